"""Your own image, working directory, data and reward (issue 29 section 1,
docs/your-own-experiment.md): the plan of such a run, and the rules each key follows."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path

import pyarrow.parquet as parquet
import pytest

from components.facts import pins
from components.facts.hardware import profile
from components.runspec import run_inputs
from components.runspec.run import GrpoRunConfig, resolve_run
from components.storage import model_staging
from components.storage.staging import stage
from tests.test_config import load, problems
from tests.test_experiment_checks import verl_rows

A4 = profile("a4")
BUCKET = "my-verl-bucket"
REWARD = (
    "def exact_answer(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return float(solution_str.strip().endswith(ground_truth))\n"
)
OBJECT = "gcp:storage/bucketObject:BucketObject"


def _experiment(root: Path) -> Path:
    """A working directory as a user would have it: a reward file, data, and a .git to skip."""
    (root / "data").mkdir(parents=True)
    (root / "reward.py").write_text(REWARD)
    # Real parquet in verl's format: the plan reads each file's schema (tests/test_experiment_checks.py).
    parquet.write_table(verl_rows(rows=4), root / "data" / "train.parquet")
    parquet.write_table(verl_rows(rows=2), root / "data" / "test.parquet")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


JOB = {
    "image": "myorg/verl-trainer:2026.12.01",
    "trainFiles": "data/train.parquet",
    "valFiles": "data/test.parquet",
    "rewardFunctionPath": "reward.py",
    "rewardFunctionName": "exact_answer",
    "modelPath": f"gs://{BUCKET}/models/my-7b",
    # As `pulumi config set --path 'verl-gke:job.extraOverrides.actor_rollout_ref.actor.
    # entropy_coeff' 0` stores it: a nested map.
    "extraOverrides": {"actor_rollout_ref": {"actor": {"entropy_coeff": 0}}},
}


@functools.lru_cache(maxsize=1)
def _plan(workdir: str):
    from tools import plan

    job = {**JOB, "workingDir": workdir}
    return plan.run_program("a4", "standard", overrides={
        "verl-gke:bucketName": BUCKET, "verl-gke:job": json.dumps(job),
    })


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    workdir = _experiment(tmp_path_factory.mktemp("experiment"))
    inputs, recording = _plan(str(workdir))
    return workdir, inputs, recording


def _overrides(command: str) -> dict[str, str]:
    words = shlex.split(command.split("main_ppo", 1)[1])
    return dict(word.split("=", 1) for word in words)


def test_the_plan_of_a_run_with_its_own_image_workdir_data_and_reward(planned):
    """The plan of a run that brings everything: the RayCluster pulls the user's image through
    the stack's mirror; each file of the working directory (not .git) is one object under
    workdirs/<digest of its content>; the job starts there and reads the data, the reward
    (path and name) and the model through the bucket's mount; the nested override arrives as
    one dotted key; staging downloads neither the default model nor GSM8K."""
    workdir, _, recording = planned
    digest = run_inputs.tree_digest(run_inputs.local_files(workdir))
    mount = f"/data/workdirs/{digest}"

    ray = recording.one("kubernetes:ray.io/v1:RayCluster")
    images = {c["image"] for group in [ray.plain_inputs["spec"]["headGroupSpec"],
                                       *ray.plain_inputs["spec"]["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    mirror = recording.one("gcp:artifactregistry/repository:Repository").plain_inputs
    pulled = f"us-central1-docker.pkg.dev/example-project/{mirror['repositoryId']}/{JOB['image']}"
    assert pulled in images
    assert not any(pins.VERL_IMAGES[A4.arch] in image for image in images)

    objects = {r.plain_inputs["name"]: r for r in recording.of_type(OBJECT)}
    assert sorted(objects) == [f"workdirs/{digest}/{name}" for name in
                               ("data/test.parquet", "data/train.parquet", "reward.py")]
    assert {r.plain_inputs["bucket"] for r in objects.values()} == {BUCKET}
    reward = objects[f"workdirs/{digest}/reward.py"].plain_inputs["source"]
    assert reward["path"] == str(workdir / "reward.py")

    job = recording.one("pulumi-python:dynamic/verl-gke:GrpoRun")
    command = job.plain_inputs["entrypoint"]
    assert command.startswith(f"cd {mount} && ")
    overrides = _overrides(command)
    # Where the pinned verl reads them (components/facts/verl.py), not the legacy group it
    # composes and ignores; tests/test_training_stack.py reads them back from verl's config.
    assert overrides["reward.custom_reward_function.path"] == f"{mount}/reward.py"
    assert overrides["reward.custom_reward_function.name"] == "exact_answer"
    assert not any(key.startswith("custom_reward_function") for key in overrides)
    assert overrides["data.train_files"] == f"{mount}/data/train.parquet"
    assert overrides["data.val_files"] == f"{mount}/data/test.parquet"
    assert overrides["actor_rollout_ref.model.path"] == "/data/models/my-7b"
    assert overrides["actor_rollout_ref.actor.entropy_coeff"] == "0"
    # The job waits for the upload, so it never starts on a half-uploaded directory.
    # (a dependency on a component is one on each of its resources, as the engine expands it)
    waits_for = recording.by_urn(job.parent).dependencies
    assert {r.urn for r in objects.values()} <= waits_for

    # The ClusterCheck measures reads of the model the run reads, not of the unstaged default.
    check = recording.one("pulumi-python:dynamic/verl-gke:ClusterCheckRun").plain_inputs
    assert "--read-path /data/models/my-7b" in check["entrypoint"]

    staging = recording.one("kubernetes:batch/v1:Job", "staging-job").plain_inputs
    env = {e["name"]: e.get("value") for e in
           staging["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STAGING_SKIP_STEPS"] == "gsm8k,model"
    assert "HF_TOKEN" not in env  # no model download: no Secret to read (no hfToken needed)


def test_the_second_up_of_such_a_run_changes_nothing(planned):
    """Steady state with a working directory: the uploaded objects read back as sent
    (tools/readback.py), so an unchanged stack and directory replace and update nothing."""
    from tools import plan, plan_diff, plan_report, readback

    _, inputs, recording = planned
    resources = plan.plan_document("a4", inputs, recording)["resources"]
    assert OBJECT in {r["type"] for r in resources}
    after = [readback.state_after_create(r) if r["custom"] else r for r in resources]
    changes = plan_report.resource_changes(after, resources, plan_diff.pickled_providers(recording))
    assert [(c.kind, c.name) for c in changes] == []


def test_the_policy_pack_passes_such_a_run(planned):
    """The uploaded objects follow the pack's rules like every other resource (a fixed object
    name is replaced delete-first, so a successor is never deleted after it was written)."""
    from tools import plan, policy_check

    _, inputs, recording = planned
    assert policy_check.check_plan(plan.plan_document("a4", inputs, recording)) == []


def test_an_unchanged_directory_names_the_same_objects_a_changed_one_new_ones(tmp_path):
    """The upload is content-addressed: the digest ignores times and .git, so the same files
    (touched, or in a fresh copy) name the same objects and `up` uploads nothing; one changed
    byte names a new prefix, and the run's directory (its identity) changes with it."""
    first = _experiment(tmp_path / "a")
    copy = _experiment(tmp_path / "b")
    (copy / ".git" / "HEAD").write_text("ref: refs/heads/other\n")
    digest = run_inputs.tree_digest(run_inputs.local_files(first))
    assert run_inputs.tree_digest(run_inputs.local_files(copy)) == digest
    assert [name for name, _ in run_inputs.local_files(first)] == [
        "data/test.parquet", "data/train.parquet", "reward.py"]

    def run_dir(workdir: Path) -> str:
        run = GrpoRunConfig(working_dir=str(workdir), reward_function_path="reward.py")
        return resolve_run(run, A4, 2).run_dir  # placed by the resolution

    before = run_dir(first)
    (first / "reward.py").write_text(REWARD + "# one byte more\n")
    assert run_inputs.tree_digest(run_inputs.local_files(first)) != digest
    assert run_dir(first) != before
    assert run_dir(copy) == before


def test_a_working_directory_in_the_bucket_is_read_where_it_is():
    """A gs:// working directory is not uploaded: the pods read it on the bucket's mount, with
    the run's relative paths inside it, and its path is part of the run's identity."""
    run = GrpoRunConfig(working_dir=f"gs://{BUCKET}/experiments/math/", train_files="train.parquet",
                        reward_function_path="reward.py")
    resolved = resolve_run(run, A4, 2)
    placed = resolved.settings
    assert run_inputs.placed(run).working_dir == placed.working_dir
    assert (placed.working_dir, placed.train_files, placed.reward_function_path) == (
        "/data/experiments/math", "/data/experiments/math/train.parquet",
        "/data/experiments/math/reward.py")
    other = run.model_copy(update={"working_dir": f"gs://{BUCKET}/exp2"})
    assert resolved.run_dir != resolve_run(other, A4, 2).run_dir


def test_unset_keys_leave_an_existing_runs_identity_and_command_as_they_were():
    """Runs from before these keys keep their checkpoint directory: an unset image, working
    directory or reward adds nothing to the identity, and the job still starts in verl's source."""
    identity = resolve_run(GrpoRunConfig(), A4, 2).identity
    assert not {"working_dir", "reward_function_path", "reward_function_name"} & set(identity)
    assert identity["image"] == pins.VERL_IMAGES[A4.arch]
    assert resolve_run(GrpoRunConfig(), A4, 2).entrypoint.startswith("cd /data/verl && ")
    own_image = GrpoRunConfig(image="myorg/verl-trainer:2026.12.01")
    assert resolve_run(own_image, A4, 2).identity["image"] == "myorg/verl-trainer:2026.12.01"


def test_a_floating_image_is_refused_like_the_pinned_ones_rule():
    """job.image follows the pinned image's rule: a tag that names one build, or a digest."""
    assert load(job=json.dumps({"image": "myorg/t@sha256:" + "0" * 64})).run.image
    for image in ("myorg/trainer", "myorg/trainer:latest"):
        found = problems(job=json.dumps({"image": image}))
        assert any(f"verl-gke:job.image='{image}' has a floating tag" in p for p in found), found


def test_a_nested_override_is_flattened_and_a_list_gets_the_command_to_type():
    """What `pulumi config set --path` stores for a dotted Hydra key (a nested map) becomes that
    key; a list, which no single override means, is refused with the command that stores it."""
    run = load(job=json.dumps({"extraOverrides": {"trainer": {"project_name": "mine"}}})).run
    assert run.extra_overrides == {"trainer.project_name": "mine"}
    found = problems(job=json.dumps({"extraOverrides": {"data": {"keys": ["a", "b"]}}}))
    assert any(
        "pulumi config set --path 'verl-gke:job.extraOverrides[\"data.keys\"]' '[a,b]'" in p
        for p in found
    ), found


@pytest.mark.parametrize(("job", "expected"), [
    ({"trainFiles": "gs://someone-else/train.parquet"},
     "verl-gke:job.trainFiles='gs://someone-else/train.parquet' is not a path in the stack's "
     "bucket"),
    ({"rewardFunctionPath": "reward.py"},
     "verl-gke:job.rewardFunctionPath='reward.py' is relative, but there is no working "
     "directory"),
    ({"workingDir": "/nonexistent/experiment"},
     "verl-gke:job.workingDir='/nonexistent/experiment' is not a directory here"),
    ({"rewardFunctionName": "score"},
     "verl-gke:job.rewardFunctionName='score' is set without verl-gke:job.rewardFunctionPath"),
])
def test_what_the_pods_could_not_read_is_refused_with_the_key_and_fix(job, expected):
    """A path outside the one bucket the pods mount, a relative path with nothing to be
    relative to, a missing directory, and a reward name without its file are config errors."""
    found = problems(job=json.dumps(job))
    assert any(expected in p for p in found), found


def test_a_run_that_reads_its_own_model_needs_no_hugging_face_token():
    """Without a model to download, staging needs no token (verl's clone and GSM8K are
    public), so hfToken is not required; with the default model it still is."""
    own = json.dumps({"modelPath": f"gs://{BUCKET}/models/my-7b"})
    assert load(hfToken=None, bucketName=BUCKET, job=own).hf_token is None
    assert any("hfToken is not set" in p for p in problems(hfToken=None))


def test_staging_downloads_only_what_the_run_reads(tmp_path):
    """The default model and GSM8K are staged only when the run reads them; stage.py leaves a
    skipped step out (verl's source is always staged: it is the job's PYTHONPATH)."""
    default = model_staging.skipped_steps(
        ["/data/Qwen2.5-32B-Instruct", "/data/gsm8k/train.parquet", "/data/gsm8k/test.parquet"],
        "/data/Qwen2.5-32B-Instruct",
    )
    assert default == ()
    assert model_staging.skipped_steps(
        ["/data/models/mine", "/data/workdirs/x/train.parquet", "/data/gsm8k/test.parquet"],
        "/data/Qwen2.5-32B-Instruct",
    ) == ("model",)
    env = {name: str(tmp_path / name) for name in stage.REQUIRED_ENV}
    env[stage.ENV["download_workers"]] = "4"
    assert [s.name for s in stage.plan(stage.settings_from_env(env))] == ["verl", "gsm8k", "model"]
    env[stage.SKIP_ENV] = "gsm8k,model"
    assert [s.name for s in stage.plan(stage.settings_from_env(env))] == ["verl"]
    with pytest.raises(SystemExit, match="STAGING_SKIP_STEPS names verl"):
        stage.settings_from_env({**env, stage.SKIP_ENV: "verl"})

