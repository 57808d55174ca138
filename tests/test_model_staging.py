"""ModelStaging under the mock runtime, and its config checks.

The Job and its ConfigMap are validated strictly against Kubernetes' own schemas; the rest checks
the properties the issue asks for: CPU nodes only, the token only by reference, a bounded Job that
`pulumi up` waits for, a new Job exactly when what it stages changes, and nothing when skipped.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pulumi
import pytest

from components.facts import pins
from components.schema.staging import StagingConfig, staging_problems
from components.storage.model_staging import SCRIPT, ModelStaging, ModelStagingArgs, staging_env
from tests.k8s_schemas import validate
from tools import mockrun

JOB = "kubernetes:batch/v1:Job"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SYSTEM_POOL = {"cloud.google.com/gke-nodepool": "system-pool"}
SYSTEM_TOLERATION = {"key": "components.gke.io/gke-managed-components", "operator": "Exists"}


def _args(**overrides: Any) -> ModelStagingArgs:
    values: dict[str, Any] = {
        "staging": StagingConfig(),
        "namespace": "verl",
        "service_account": "verl-ray",
        "bucket_name": "verl-bucket",
        "node_selector": SYSTEM_POOL,
        "tolerations": [SYSTEM_TOLERATION],
    }
    return ModelStagingArgs(**{**values, **overrides})


def _render(args: ModelStagingArgs) -> mockrun.Recording:
    def program() -> None:
        staging = ModelStaging("staging", args)
        for key in ("job_name", "model_path", "verl_path", "train_files", "val_files"):
            pulumi.export(key, getattr(staging, key))
        pulumi.export("marker_path", staging.marker_path)

    return mockrun.run(program)


def _job(recording: mockrun.Recording) -> dict[str, Any]:
    return next(o for o in recording.kubernetes_objects() if o["kind"] == "Job")


def _container(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("verl_gke_stage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered() -> mockrun.Recording:
    return _render(_args())


def test_job_and_config_map_are_valid_kubernetes(rendered: mockrun.Recording) -> None:
    """Every object ModelStaging creates passes the API server's schema, unknown fields refused."""
    objects = rendered.kubernetes_objects()

    assert sorted(o["kind"] for o in objects) == ["ConfigMap", "Job"]
    for obj in objects:
        validate(obj)


def test_job_runs_on_cpu_nodes_only(rendered: mockrun.Recording) -> None:
    """The Job asks for no GPU, tolerates no GPU taint and keeps the node selector it was given."""
    pod = _job(rendered)["spec"]["template"]["spec"]

    assert pod["nodeSelector"] == SYSTEM_POOL
    assert pod["tolerations"] == [SYSTEM_TOLERATION]
    for container in pod["containers"]:
        for amounts in container["resources"].values():
            assert not any("gpu" in resource for resource in amounts)


@pytest.mark.parametrize(
    "placement",
    [
        {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"tolerations": [{"operator": "Exists"}]},
        {"node_selector": {"cloud.google.com/gke-accelerator": "nvidia-b200"}},
    ],
    ids=["gpu-toleration", "tolerate-everything", "gpu-selector"],
)
def test_gpu_placement_is_refused(placement: dict[str, Any]) -> None:
    """A selector or toleration that could put the Job on a GPU node is an error, not a plan."""
    with pytest.raises(ValueError, match="GPU nodes"):
        _render(_args(**placement))


def test_hf_token_comes_only_from_the_secret(rendered: mockrun.Recording) -> None:
    """HF_TOKEN is a secretKeyRef to the storage's Secret; no env var carries a literal token."""
    env = {e["name"]: e for e in _container(_job(rendered))["env"]}

    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "hf_api_token"}},
    }
    literal = [e["value"] for e in env.values() if "value" in e]
    assert not any(v.startswith("hf_") for v in literal)


def test_job_is_bounded_and_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Job has a retry limit and a deadline from timeoutMinutes; Pulumi waits a little longer
    than that deadline, and replaces the Job by deleting it first."""
    options: dict[str, Any] = {}
    register = mockrun.RecordingMonitor.RegisterResource

    def capture(self: mockrun.RecordingMonitor, request: Any) -> Any:
        options[request.type] = request
        return register(self, request)

    monkeypatch.setattr(mockrun.RecordingMonitor, "RegisterResource", capture)
    job = _job(_render(_args(staging=StagingConfig(timeout_minutes=90))))

    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 90 * 60
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"
    assert options[JOB].customTimeouts.create == "95m"
    assert options[JOB].deleteBeforeReplace


def test_pod_mounts_the_bucket_and_the_script(rendered: mockrun.Recording) -> None:
    """The pod mounts the bucket (GCS FUSE, inline) at /data with a sized gcsfuse sidecar, and runs the
    script from a ConfigMap holding exactly components/storage/staging/stage.py and the pinned
    wheels, which it installs first (exact versions, no resolver)."""
    job = _job(rendered)
    pod = job["spec"]["template"]["spec"]
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    config_map = rendered.one(CONFIG_MAP, "staging-script").plain_inputs
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in _container(job)["volumeMounts"]}

    assert annotations["gke-gcsfuse/volumes"] == "true"
    for resource in ("cpu", "memory", "ephemeral-storage"):
        assert f"gke-gcsfuse/{resource}-limit" in annotations
    # The bucket itself, inline: the Ray pods' claim waits for the GPU pool, staging must not.
    assert volumes["bucket"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert volumes["bucket"]["csi"]["volumeAttributes"]["bucketName"] == "verl-bucket"
    assert "implicit-dirs" in volumes["bucket"]["csi"]["volumeAttributes"]["mountOptions"].split(",")
    assert mounts["bucket"] == "/data"
    assert pod["serviceAccountName"] == "verl-ray"
    assert config_map["data"] == {
        "stage.py": SCRIPT.read_text(),
        "requirements.txt": "".join(f"{w}\n" for w in pins.STAGING_WHEELS),
    }
    assert volumes["script"]["configMap"]["name"] == config_map["metadata"]["name"]
    shell, flag, command = _container(job)["command"]
    assert (shell, flag) == ("sh", "-c")
    install, run = command.split(" && ")
    assert "pip install" in install and "--no-deps" in install
    assert f"--requirement {mounts['script']}/requirements.txt" in install
    assert run == f"exec python3 {mounts['script']}/stage.py"


def test_staging_wheels_are_exact_and_complete() -> None:
    """Every wheel is one exact version (nothing floats under --no-deps), each package once,
    and the closure holds what stage.py and verl's gsm8k.py import, hf_xet included (without it
    a Xet-backed file's range requests would all hit the Hub's rate-limited resolver)."""
    names = [w.split("==")[0].lower().replace("_", "-") for w in pins.STAGING_WHEELS]
    assert all(w.count("==") == 1 and w.split("==")[1] for w in pins.STAGING_WHEELS)
    assert len(names) == len(set(names))
    assert {"huggingface-hub", "hf-transfer", "hf-xet", "datasets", "pyarrow", "pandas"} <= set(names)
    assert "huggingface-hub==0.36.0" in [w.lower().replace("_", "-") for w in pins.STAGING_WHEELS]


def test_download_concurrency_is_set_by_the_component() -> None:
    """stage.py fetches as many files at once as the component says, hf_transfer is on and
    hf_xet's streams per file are pinned to the same figure as hf_transfer's: one peak, which
    the Cloud NAT is sized from."""
    from components.storage import model_staging

    env = staging_env(StagingConfig())
    assert env["STAGING_DOWNLOAD_WORKERS"] == str(model_staging.DOWNLOAD_WORKERS)
    assert env["HF_HUB_ENABLE_HF_TRANSFER"] == "1"
    assert env["HF_XET_FIXED_DOWNLOAD_CONCURRENCY"] == str(model_staging.CONNECTIONS_PER_FILE)
    assert model_staging.PEAK_CONNECTIONS == (
        model_staging.DOWNLOAD_WORKERS * model_staging.CONNECTIONS_PER_FILE
    )


def test_env_gives_the_script_every_setting_and_the_published_paths(
    rendered: mockrun.Recording,
) -> None:
    """The Job sets every variable stage.py requires, and points it at the very paths the
    component publishes for the RayCluster and the GrpoJob."""
    stage = _load_script()
    env = {e["name"]: e.get("value") for e in _container(_job(rendered))["env"]}
    outputs = rendered.plain_outputs()

    assert set(stage.REQUIRED_ENV) <= set(env)
    assert env["STAGING_MODEL_DIR"] == outputs["model_path"] == "/data/Qwen2.5-32B-Instruct"
    assert env["STAGING_VERL_DIR"] == outputs["verl_path"] == "/data/verl"
    assert outputs["train_files"] == f"{env['STAGING_GSM8K_DIR']}/train.parquet"
    assert outputs["val_files"] == f"{env['STAGING_GSM8K_DIR']}/test.parquet"
    assert env["STAGING_MARKER"] == outputs["marker_path"]
    assert env["STAGING_VERL_REF"] == pins.VERL_REF
    assert env["STAGING_MODEL_REVISION"] == pins.STAGING_MODEL_REVISION


def test_job_name_changes_exactly_when_staged_values_change() -> None:
    """Same values, same Job (a `pulumi up` with no change re-runs nothing); a new revision or
    model is a new Job name, so `pulumi up` runs staging again."""

    def job_name(**staging: Any) -> str:
        return _job(_render(_args(staging=StagingConfig(**staging))))["metadata"]["name"]

    base = job_name()
    revision = "0" * 40

    assert job_name() == base
    assert job_name(model_revision=revision) != base
    assert job_name(model_id="Qwen/Qwen2.5-7B-Instruct", model_revision=revision) not in (
        base,
        job_name(model_revision=revision),
    )
    assert job_name(timeout_minutes=60) == base


def test_skip_creates_no_job_and_keeps_the_outputs(rendered: mockrun.Recording) -> None:
    """With skip, nothing is created in the cluster and the paths GrpoJob reads are the same."""
    skipped = _render(_args(staging=StagingConfig(skip=True)))

    assert skipped.kubernetes_objects() == []
    outputs = skipped.plain_outputs()
    assert outputs.pop("job_name") is None
    assert outputs == {k: v for k, v in rendered.plain_outputs().items() if k != "job_name"}


def test_model_path_is_the_last_part_of_the_model_id() -> None:
    """The model lands at /data/<name>, the path GrpoJob passes as actor_rollout_ref.model.path."""
    staging = StagingConfig(model_id="meta-llama/Llama-3.1-8B-Instruct", model_revision="1" * 40)

    assert _render(_args(staging=staging)).plain_outputs()["model_path"] == (
        "/data/Llama-3.1-8B-Instruct"
    )


def test_default_config_has_no_problems() -> None:
    """The defaults (and the camelCase form the stack config uses) are valid."""
    assert staging_problems(StagingConfig()) == []
    assert staging_problems(StagingConfig.model_validate({"timeoutMinutes": 60})) == []


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"modelRevision": "main"},
            ["verl-gke:staging.modelRevision = 'main' is not a commit", "revision/main"],
        ),
        (
            {"modelId": "Qwen2.5-32B-Instruct"},
            ["verl-gke:staging.modelId = 'Qwen2.5-32B-Instruct' is not a Hugging Face model id",
             "owner/name"],
        ),
        (
            {"modelId": "someone/verl", "modelRevision": "2" * 40},
            ["verl-gke:staging.modelId = 'someone/verl' would be staged at /data/verl", "reserved"],
        ),
        (
            {"modelId": "Qwen/Qwen2.5-7B-Instruct"},
            ["verl-gke:staging.modelRevision is not set", "Qwen/Qwen2.5-7B-Instruct/revision/main"],
        ),
        (
            {"timeoutMinutes": 5},
            ["verl-gke:staging.timeoutMinutes = 5 is out of range", "10 to 1440"],
        ),
    ],
    ids=["branch-revision", "id-without-owner", "reserved-name", "id-without-revision", "timeout"],
)
def test_bad_config_names_key_value_and_fix(config: dict[str, Any], expected: list[str]) -> None:
    """Each bad value gives one problem naming the key path, the value and how to fix it."""
    (problem,) = staging_problems(StagingConfig.model_validate(config))

    for fragment in expected:
        assert fragment in problem


def test_all_problems_are_reported_together() -> None:
    """Several bad values are reported at once, not one per `pulumi up`."""
    cfg = StagingConfig.model_validate(
        {"modelId": "not an id", "modelRevision": "v1.0", "timeoutMinutes": 100000}
    )

    problems = staging_problems(cfg)

    assert [p.split(" ", 1)[0] for p in problems] == [
        "verl-gke:staging.modelId",
        "verl-gke:staging.modelRevision",
        "verl-gke:staging.timeoutMinutes",
    ]


def test_unknown_staging_key_is_refused() -> None:
    """A misspelled key is an error, not a silently ignored setting."""
    with pytest.raises(ValueError, match="modelRevison"):
        StagingConfig.model_validate({"modelRevison": "0" * 40})
