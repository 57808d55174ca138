"""A run's own checkpoint directory: what keeps it, what starts a new one, and what no Hydra
override may change. Overrides are checked with Hydra's real parser and merge."""

from __future__ import annotations

import shlex
import subprocess

import pydantic
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from components.facts.hardware import profile
from components.facts.layout import CHECKPOINT_MOUNT
from components.forms.hydra_overrides import PROTECTED_KEYS, override_text
from components.runspec.run import (
    CONTINUATION_FIELDS,
    GrpoRunConfig,
    resolve_run,
)

A4 = profile("a4")
REVISION = "5ede1c97bbab6ce5cda5812749b4c0bdf79b18dd"


def run_dir(run: GrpoRunConfig, nodes: int = 2, revision: str | None = REVISION) -> str:
    return resolve_run(run, A4, nodes, revision).run_dir


# Changes that extend, observe or only tune the execution of a run: the same run, resumed.
SAME_RUN = {
    "more epochs": {"totalEpochs": 5},
    "save frequency": {"saveFreq": 50},
    "test frequency": {"testFreq": 5},
    "loggers": {"logger": "[console,wandb]"},
    "validation before training": {"valBeforeTrain": True},
    "micro batch after an OOM": {"ppoMicroBatchSizePerGpu": 32},
    "rollout memory": {"gpuMemoryUtilization": 0.5},
    "following": {"waitFor": "succeeded", "timeoutMinutes": 90, "maxRetries": 3},
    "metadata": {"metadata": {"owner": "me"}},
    "tracker names": {"extraOverrides": {"trainer.experiment_name": "try-2"}},
    "a default spelled out": {"learningRate": 1e-6, "trainBatchSize": 256, "fsdpSize": -1},
    # Execution only (review finding 5): the usual fixes after an OOM keep the checkpoints.
    "rollout tensor parallelism": {"tensorModelParallelSize": 4},
    "offload": {"offload": "optimizer"},
    "log-prob micro batches": {"rolloutLogProbMicroBatchSizePerGpu": 16,
                               "refLogProbMicroBatchSizePerGpu": 8},
    "dynamic batch size": {"extraOverrides": {
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 24576}},
    "vLLM batching and eager mode": {"extraOverrides": {
        "actor_rollout_ref.rollout.max_num_seqs": 128,
        "actor_rollout_ref.rollout.enforce_eager": True,
        "actor_rollout_ref.rollout.max_num_batched_tokens": 4096}},
    "offload as verl spells it": {"extraOverrides": {
        "actor_rollout_ref.actor.fsdp_config.offload_policy": True}},
}
# Changes that shape the run's state: a new run, started clean.
NEW_RUN = {
    "learning rate": {"learningRate": 2e-6},
    "strategy": {"actorStrategy": "fsdp"},
    "sharding": {"fsdpSize": 8},
    "KL": {"klCoef": 0.01},
    "no KL": {"useKlLoss": False},
    "rollouts per prompt": {"rolloutN": 16},
    "batch": {"trainBatchSize": 512},
    "model": {"modelPath": "/data/other-model"},
    "algorithm extra": {"extraOverrides": {"actor_rollout_ref.actor.entropy_coeff": 0.01}},
    "resumed from another run": {"resumeFrom": "grpo-16gpu-0123456789ab"},
}


@pytest.mark.parametrize("change", SAME_RUN.values(), ids=SAME_RUN.keys())
def test_a_change_that_extends_or_observes_keeps_the_runs_directory(change):
    """The job restarts with these, and verl resumes from the same checkpoints."""
    assert run_dir(GrpoRunConfig.model_validate(change)) == run_dir(GrpoRunConfig())


@pytest.mark.parametrize("change", NEW_RUN.values(), ids=NEW_RUN.keys())
def test_a_change_that_shapes_the_state_starts_a_new_directory(change):
    """A different model, algorithm or optimiser never silently continues the old run."""
    assert run_dir(GrpoRunConfig.model_validate(change)) != run_dir(GrpoRunConfig())


def test_world_size_and_model_revision_are_part_of_the_run():
    """Another node count (FSDP shards are per rank) or model revision is another run; the
    world size is readable in the name, the run name prefixes it."""
    base = run_dir(GrpoRunConfig())
    assert base.startswith("grpo-16gpu-")
    assert run_dir(GrpoRunConfig(), nodes=4).startswith("grpo-32gpu-")
    assert run_dir(GrpoRunConfig(), revision="0" * 40) != base
    named = run_dir(GrpoRunConfig(run_name="qwen32b-gsm8k"))
    assert named.startswith("qwen32b-gsm8k-16gpu-") and named[-12:] == base[-12:]


def test_the_verl_ref_and_the_image_are_part_of_the_run(monkeypatch):
    """Another verl source or image is another run (review finding 8): verl's defaults change
    between releases, so a checkpoint never continues under other trainer code."""
    from components.facts import pins

    base = run_dir(GrpoRunConfig())
    monkeypatch.setattr(pins, "VERL_REF", "0" * 40)
    assert run_dir(GrpoRunConfig()) != base
    monkeypatch.undo()
    monkeypatch.setitem(pins.VERL_IMAGES, A4.arch, "verlai/verl:other")
    assert run_dir(GrpoRunConfig()) != base


def test_every_field_is_either_identity_or_declared_a_continuation():
    """A new config field shapes the run unless it is listed as a continuation on purpose:
    the list names only real fields."""
    assert CONTINUATION_FIELDS <= set(GrpoRunConfig.model_fields)


def test_run_name_and_resume_from_are_validated_with_the_fix():
    """Bad names are refused naming the key, the value and an example."""
    with pytest.raises(pydantic.ValidationError, match=r"runName='My Run'.*qwen32b-gsm8k"):
        GrpoRunConfig.model_validate({"runName": "My Run"})
    with pytest.raises(pydantic.ValidationError, match=r"resumeFrom='/data/x'.*grpo-16gpu-"):
        GrpoRunConfig.model_validate({"resumeFrom": "/data/x"})


def test_resume_from_another_world_size_is_refused():
    """verl cannot load FSDP shards of another world size: refused before anything runs."""
    run = GrpoRunConfig(resume_from="grpo-8gpu-0123456789ab/global_step_40")
    (problem,) = resolve_run(run, A4, 2).problems
    assert problem.startswith(
        "verl-gke:job.resumeFrom='grpo-8gpu-0123456789ab/global_step_40' was saved by 8 GPUs,"
        " but this run has 16"
    )
    assert resolve_run(GrpoRunConfig(resume_from="grpo-16gpu-0123456789ab"), A4, 2).problems == ()


def _resume_command(tmp_path, run: GrpoRunConfig) -> str:
    """The entrypoint's resume decision, run by a real shell against a fake /data layout."""
    command = resolve_run(run, A4, 2).entrypoint
    shell, python = command.split(" && PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo ")
    shell = shell.removeprefix("cd /data/verl && ").replace(f"{CHECKPOINT_MOUNT}/", f"{tmp_path}/")
    wanted = [a for a in shlex.split(python) if a.startswith("trainer.resume")]
    script = f"{shell} && printf '%s\\n' {' '.join(shlex.quote(a) for a in wanted)}"
    script = script.replace("'trainer.resume_mode=$VERL_GKE_RESUME_MODE'", '"trainer.resume_mode=$VERL_GKE_RESUME_MODE"')
    script = script.replace("'trainer.resume_from_path=$VERL_GKE_RESUME_PATH'", '"trainer.resume_from_path=$VERL_GKE_RESUME_PATH"')
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    return done.stdout + done.stderr


def test_resume_from_starts_from_the_other_run_then_from_its_own(tmp_path):
    """With resumeFrom, the first start loads the other run's latest step; once the run has
    its own checkpoint, every restart resumes from that instead (verl's resume_path mode
    would otherwise go back to the other run's step on every start)."""
    other = tmp_path / "checkpoints" / "grpo-16gpu-0123456789ab"
    (other / "global_step_40").mkdir(parents=True)
    (other / "latest_checkpointed_iteration.txt").write_text("40")
    run = GrpoRunConfig(resume_from="grpo-16gpu-0123456789ab")
    assert _resume_command(tmp_path, run).split() == [
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={other}/global_step_40",
    ]
    own = tmp_path / "checkpoints" / resolve_run(run, A4, 2).run_dir
    own.mkdir(parents=True)
    (own / "latest_checkpointed_iteration.txt").write_text("50")
    assert _resume_command(tmp_path, run).split() == [
        "trainer.resume_mode=auto", "trainer.resume_from_path=null",
    ]


def test_resume_from_a_run_without_checkpoints_fails_with_a_clear_message(tmp_path):
    """A resumeFrom whose directory holds nothing stops the job before verl starts."""
    output = _resume_command(tmp_path, GrpoRunConfig(resume_from="grpo-16gpu-0123456789ab"))
    assert "verl-gke: no checkpoint to resume from at" in output


# --- No override in any form Hydra accepts may change the checkpoint dir or resume mode ----

# (extraOverrides key, value) -> the form it exercises.
FORBIDDEN = {
    "plain key": ("trainer.default_local_dir", "/tmp/elsewhere"),
    "add": ("+trainer.resume_mode", "disable"),
    "force add": ("++trainer.resume_mode", "disable"),
    "delete": ("~trainer.resume_mode", ""),
    "delete with value": ("~trainer.resume_mode", "auto"),
    "delete the section": ("~trainer", ""),
    "whole section as a value": ("trainer", "{default_local_dir: /tmp/elsewhere}"),
    "force-added section": ("++trainer", "{resume_mode: disable}"),
    "interpolation": ("trainer.default_local_dir", "${oc.env:HOME}"),
    "interpolation of another key": ("trainer.resume_mode", "${trainer.project_name}"),
    "interpolated section": ("trainer", "${oc.env:VERL_TRAINER}"),
    "resume path": ("trainer.resume_from_path", "/tmp/x/global_step_1"),
}


def _apply_with_hydra(overrides: list[str]) -> dict:
    """The trainer section main_ppo would see: verl's defaults, then the command's overrides,
    parsed and merged by Hydra itself."""
    config = OmegaConf.create({"trainer": {
        "project_name": "verl_examples", "experiment_name": "gsm8k",
        "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
        "resume_mode": "auto", "resume_from_path": None,
    }})
    OmegaConf.set_struct(config, False)
    ConfigLoaderImpl._apply_overrides_to_config(
        OverridesParser.create().parse_overrides(overrides), config
    )
    return OmegaConf.to_container(config, resolve=True)["trainer"]


@pytest.mark.parametrize(("key", "value"), FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_every_hydra_form_that_reaches_the_checkpoint_keys_is_refused(key, value):
    """Each form, applied by Hydra after the program's own overrides, really would change a
    protected key (or fail on it), and the config check refuses it naming the override."""
    run = GrpoRunConfig(extra_overrides={key: value})
    overrides = resolve_run(GrpoRunConfig(), A4, 2).overrides
    program = [override_text(k, v) for k, v in overrides.items()]
    expected = _apply_with_hydra(program)
    try:
        trainer = _apply_with_hydra([*program, override_text(key, value)])
    except Exception:  # noqa: BLE001 - Hydra failing on it is the other way it breaks the run
        trainer = None
    assert trainer is None or any(
        trainer.get(k.split(".")[1]) != expected[k.split(".")[1]] for k in PROTECTED_KEYS
    ), "this form changes nothing: not a real test"
    (problem,) = resolve_run(run, A4, 2).problems
    assert problem.startswith(f"verl-gke:job.extraOverrides[{key!r}] = ")
    assert "trainer." in problem and "remove it" in problem


@pytest.mark.parametrize(("key", "value"), [
    ("trainer.experiment_name", "${trainer.default_local_dir}"),
    ("+trainer.max_actor_ckpt_to_keep", 3),
    ("actor_rollout_ref.actor.entropy_coeff", 0),
    ("trainer.project_name", "{a: 1}"),
])
def test_overrides_that_leave_the_checkpoint_keys_alone_are_accepted(key, value):
    """Reading a protected key through an interpolation, or setting unrelated keys, is fine."""
    assert list(resolve_run(GrpoRunConfig(extra_overrides={key: value}), A4, 2).problems) == []


def test_an_override_hydra_cannot_parse_is_refused_with_the_key():
    """Broken grammar fails here, not hours later on the head."""
    (problem,) = resolve_run(GrpoRunConfig(extra_overrides={"trainer.x": "[1, 2"}), A4, 2).problems
    assert problem.startswith("verl-gke:job.extraOverrides['trainer.x'] = '[1, 2' is not an")
