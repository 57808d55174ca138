"""The GRPO training run as data: its config model, its checks, its command line and its env.

Pure functions over `GrpoRunConfig` and a `HardwareProfile`; nothing here talks to Ray or
Pulumi. `components/ray/grpo_job.py` turns the result into a submitted Ray job.

What it does: fills every setting the user leaves unset with the tutorial's value for the target
(TUTORIAL.md, "GrpoJob"), rejects before anything is submitted what verl would reject hours later
on the GPUs, gives every run its own checkpoint directory on the bucket and always resumes from it
(`resume_mode=auto`, ANCHORS defect 6), and builds the Ray runtime env as data (ANCHORS defects 1
and 2).

A run is identified by everything that shapes its state (`run_identity`): the model and its
revision, the world size, the strategy and parallelism, the algorithm, optimiser, batch and data
settings, and any extra override not known to be harmless. Its directory is
`/checkpoint-bucket/checkpoints/<runName>-<N>gpu-<12 hex of that identity>`: the same identity resumes, a
different one starts clean. Keys that only extend, observe or tune the execution of a run
(`CONTINUATION_FIELDS`) keep its directory.
What it does not do: stage the model, data or verl source (model staging owns that), or
validate Hydra keys it does not model (`extraOverrides` is passed through as written).

verl's checks are read at volcengine/verl b178a3cd5 (2026-01-29), the newest snapshot available
here; the tutorial's VERL_REF ddbcdb7 is not in it. Each check below names the file it mirrors.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from components.facts.hardware import HardwareProfile, NodeNetworking, Target
from components.facts.layout import (
    CHECKPOINT_ROOT,
    CHECKPOINT_STEP_DIR,
    CHECKPOINT_SUBPATH,
    CHECKPOINT_TRACKER,
    DATA_MOUNT,
    HF_HOME,
    VERL_DIR,
)
from components.messages import quoted
from components.schema.hydra_overrides import PROTECTED_KEYS, override_problems, override_text
from components.schema.lifecycle import RunLifecycle, WaitFor, prune_command

CONFIG_KEY = "verl-gke:job"
# The bucket is mounted at /data in every Ray pod (GcsFuseStorage); each run checkpoints to its
# own directory under CHECKPOINT_ROOT, `gs://<bucket>/checkpoints/<run>`.
_RUN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
# `<runName>-<N>gpu-<12 hex>`, optionally `/global_step_<n>`: what resumeFrom accepts.
_RUN_DIR = re.compile(r"^(?P<dir>[a-z0-9][-a-z0-9]*-(?P<gpus>[0-9]+)gpu-[0-9a-f]{12})"
                      r"(?:/(?P<step>global_step_[0-9]+))?$")

OverrideValue = str | int | float | bool

# The trackers of verl's Tracking (verl/utils/tracking.py) this program configures: wandb and
# mlflow get their credentials from a Kubernetes Secret in the Ray pods' env, tensorboard writes
# to the run's directory (TENSORBOARD_DIR). verl's others (swanlab, clearml, ...) would need
# credentials the program does not deliver, so they are refused rather than failing on the GPUs.
SUPPORTED_LOGGERS = ("console", "wandb", "mlflow", "tensorboard")
TENSORBOARD_SUBDIR = "tensorboard"


def parse_loggers(value: str) -> list[str]:
    """`console` or `[console,wandb]` (Hydra's list syntax, as trainer.logger takes it)."""
    return [name.strip().strip("'\"") for name in value.strip().strip("[]").split(",")
            if name.strip()]


class GrpoRunConfig(RunLifecycle):
    """The stack config key `verl-gke:job`: one GRPO run of verl's `main_ppo` trainer.

    Every field left unset takes the tutorial's value for the stack's target (a4 and a3u share
    one column, a4x has its own); `resolve()` fills them. `waitFor` defaults to `running`:
    a RUNNING job has passed Ray's scheduling and runtime-env setup, which is where a wrong
    image, env or address fails, while a full run takes hours and must not hold `pulumi up`
    (and its lock on the stack) open; `pulumi refresh` reports progress after that.
    """

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    model_path: str = Field(
        f"{DATA_MOUNT}/Qwen2.5-32B-Instruct",
        description="actor_rollout_ref.model.path: the model on the bucket mount.",
    )
    train_files: str = Field(
        f"{DATA_MOUNT}/gsm8k/train.parquet", description="data.train_files."
    )
    val_files: str = Field(f"{DATA_MOUNT}/gsm8k/test.parquet", description="data.val_files.")
    train_batch_size: int = Field(256, gt=0, description="data.train_batch_size (prompts).")
    max_prompt_length: int = Field(512, gt=0, description="data.max_prompt_length (tokens).")
    max_response_length: int = Field(
        512, gt=0, description="data.max_response_length (tokens)."
    )
    learning_rate: float = Field(1e-5, gt=0, description="actor_rollout_ref.actor.optim.lr.")
    ppo_mini_batch_size: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.actor.ppo_mini_batch_size; "
        "default: 256 (a4, a3u), 64 (a4x).",
    )
    ppo_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu; "
        "default: 64 (a4, a3u), 8 (a4x).",
    )
    use_kl_loss: bool | None = Field(
        None,
        description="actor_rollout_ref.actor.use_kl_loss; default: left to verl (a4, a3u), "
        "True (a4x).",
    )
    # Megatron has other divisibility rules (tensor x pipeline x context parallel) that
    # run_problems does not model, so only the FSDP strategies are accepted.
    actor_strategy: Literal["fsdp", "fsdp2"] = Field(
        "fsdp2", description="actor_rollout_ref.actor.strategy."
    )
    rollout_engine: Literal["vllm", "sglang"] = Field(
        "vllm", description="actor_rollout_ref.rollout.name."
    )
    tensor_model_parallel_size: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.rollout.tensor_model_parallel_size; must divide the GPUs "
        "per node; default: all GPUs of a node (8 on a4 and a3u, 4 on a4x).",
    )
    gpu_memory_utilization: float = Field(
        0.6, gt=0, le=1, description="actor_rollout_ref.rollout.gpu_memory_utilization."
    )
    rollout_n: int = Field(
        8, gt=0, description="actor_rollout_ref.rollout.n: responses sampled per prompt."
    )
    rollout_log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu; "
        "default: 8 (a4, a3u), 16 (a4x).",
    )
    ref_log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu; "
        "default: 4 (a4, a3u), 16 (a4x).",
    )
    kl_coef: float = Field(0.001, ge=0, description="algorithm.kl_ctrl.kl_coef.")
    logger: str = Field(
        "console",
        description="trainer.logger: console, wandb, mlflow, tensorboard, or a list such as "
        "[console,wandb]. wandb needs verl-gke:wandbApiKey, mlflow verl-gke:mlflowTrackingUri "
        "(both secret); tensorboard writes to the run's directory on the bucket.",
    )
    val_before_train: bool | None = Field(
        None,
        description="trainer.val_before_train; default: False (a4, a3u), left to verl (a4x).",
    )
    nnodes: int | None = Field(
        None, gt=0, description="trainer.nnodes; default: the RayCluster's worker replicas."
    )
    n_gpus_per_node: int | None = Field(
        None, gt=0, description="trainer.n_gpus_per_node; default: the target's GPUs per node."
    )
    save_freq: int = Field(
        10, gt=0,
        description="trainer.save_freq (steps). Must be > 0: verl's default -1 never "
        "checkpoints, so a restarted run would start over.",
    )
    test_freq: int = Field(10, ge=-1, description="trainer.test_freq (steps; -1: never).")
    total_epochs: int = Field(2, gt=0, description="trainer.total_epochs.")
    extra_overrides: dict[str, OverrideValue] = Field(
        default_factory=dict,
        description="Any other Hydra override of main_ppo, key -> value, appended last. "
        "Keys set by a typed field above, and the checkpoint keys, are refused.",
    )
    run_name: str = Field(
        "grpo",
        description="Readable prefix of the run's checkpoint directory "
        "(`<runName>-<N>gpu-<digest>`); lowercase letters, digits and '-', at most 40.",
    )
    resume_from: str | None = Field(
        None,
        description="Continue from another run's checkpoint: its directory name as in the "
        "`job.checkpointUri` output (`grpo-16gpu-0123456789ab`), optionally "
        "`/global_step_<n>`; default: its latest. Refused when its GPU count differs.",
    )
    @field_validator("logger")
    @classmethod
    def _known_loggers(cls, value: str) -> str:
        unknown = [name for name in parse_loggers(value) if name not in SUPPORTED_LOGGERS]
        if unknown or not parse_loggers(value):
            raise ValueError(
                f"{CONFIG_KEY}.logger={quoted(value)} names {', '.join(unknown) or 'no logger'}:"
                f" use {', '.join(SUPPORTED_LOGGERS)}, or a list such as [console,wandb]"
            )
        return value

    @property
    def loggers(self) -> list[str]:
        return parse_loggers(self.logger)

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, value: str) -> str:
        if not _RUN_NAME.match(value):
            raise ValueError(
                f"{CONFIG_KEY}.runName={quoted(value)} is not a run name: use lowercase "
                "letters, digits and '-', at most 40, starting and ending with a letter or "
                "digit, e.g. qwen32b-gsm8k"
            )
        return value

    @field_validator("resume_from")
    @classmethod
    def _resume_from(cls, value: str | None) -> str | None:
        if value is not None and not _RUN_DIR.match(value):
            raise ValueError(
                f"{CONFIG_KEY}.resumeFrom={quoted(value)} is not a run directory: use the last "
                "part of another run's job.checkpointUri output, e.g. grpo-16gpu-0123456789ab, "
                "optionally followed by /global_step_<n>"
            )
        return value


# The tutorial's values where a4/a3u and a4x differ. None means "the tutorial leaves the key
# out": it is not passed, so verl's own default applies.
_PER_TARGET_DEFAULTS: dict[str, dict[Target, object]] = {
    "ppo_mini_batch_size": {Target.A4: 256, Target.A3_ULTRA: 256, Target.A4X: 64},
    "ppo_micro_batch_size_per_gpu": {Target.A4: 64, Target.A3_ULTRA: 64, Target.A4X: 8},
    "use_kl_loss": {Target.A4: None, Target.A3_ULTRA: None, Target.A4X: True},
    "rollout_log_prob_micro_batch_size_per_gpu": {
        Target.A4: 8, Target.A3_ULTRA: 8, Target.A4X: 16,
    },
    "ref_log_prob_micro_batch_size_per_gpu": {Target.A4: 4, Target.A3_ULTRA: 4, Target.A4X: 16},
    "val_before_train": {Target.A4: False, Target.A3_ULTRA: False, Target.A4X: None},
}


def resolve(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> GrpoRunConfig:
    """The run with every unset field filled from the tutorial and the hardware."""
    unset = {
        key: by_target[profile.target]
        for key, by_target in _PER_TARGET_DEFAULTS.items()
        if getattr(run, key) is None
    }
    gpus_per_node = run.n_gpus_per_node or profile.gpus_per_node
    hardware = {
        "tensor_model_parallel_size": run.tensor_model_parallel_size or gpus_per_node,
        "nnodes": run.nnodes or nodes,
        "n_gpus_per_node": gpus_per_node,
    }
    return run.model_copy(update={**unset, **hardware})


# Hydra key of each typed field, in the order of the tutorial's override table.
_HYDRA_KEYS: dict[str, str] = {
    "adv_estimator": "algorithm.adv_estimator",
    "train_files": "data.train_files",
    "val_files": "data.val_files",
    "train_batch_size": "data.train_batch_size",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "model_path": "actor_rollout_ref.model.path",
    "learning_rate": "actor_rollout_ref.actor.optim.lr",
    "ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "use_kl_loss": "actor_rollout_ref.actor.use_kl_loss",
    "actor_strategy": "actor_rollout_ref.actor.strategy",
    "rollout_engine": "actor_rollout_ref.rollout.name",
    "tensor_model_parallel_size": "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "rollout_n": "actor_rollout_ref.rollout.n",
    "rollout_log_prob_micro_batch_size_per_gpu":
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "ref_log_prob_micro_batch_size_per_gpu":
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "kl_coef": "algorithm.kl_ctrl.kl_coef",
    "logger": "trainer.logger",
    "val_before_train": "trainer.val_before_train",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "nnodes": "trainer.nnodes",
    "save_freq": "trainer.save_freq",
    "test_freq": "trainer.test_freq",
    "total_epochs": "trainer.total_epochs",
}
_OVERRIDE_KEY = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")

# Settings that extend, observe or only tune the execution of a run: changing one keeps the run
# (its checkpoint directory), so the job restarts and resumes where it was. Everything else of
# GrpoRunConfig shapes the run's state and starts a new one, including any field added later.
# - extend: more epochs;
# - observe: checkpoint and validation cadence, loggers, validation data;
# - execution: micro batches and rollout memory split the same batch differently over the same
#   GPUs (the usual fix after an OOM), which does not change what is learned;
# - how the job is followed and named.
CONTINUATION_FIELDS = frozenset({
    "total_epochs",
    "save_freq", "test_freq", "logger", "val_before_train", "val_files",
    "ppo_micro_batch_size_per_gpu", "rollout_log_prob_micro_batch_size_per_gpu",
    "ref_log_prob_micro_batch_size_per_gpu", "gpu_memory_utilization", "run_name",
    *RunLifecycle.model_fields,
})
# Extra overrides of the same kinds; every other extra override is part of the run's identity.
CONTINUATION_OVERRIDES = frozenset({
    "trainer.total_training_steps", "trainer.project_name", "trainer.experiment_name",
    "trainer.log_val_generations", "trainer.max_actor_ckpt_to_keep",
    "trainer.rollout_data_dir", "trainer.validation_data_dir",
})
# With resumeFrom, the entrypoint decides at run time (the bucket is only visible there) whether
# the run resumes from its own checkpoints or starts from the other run's: these shell variables
# carry the decision into the two overrides.
_RESUME_MODE_VAR, _RESUME_PATH_VAR = "VERL_GKE_RESUME_MODE", "VERL_GKE_RESUME_PATH"


def world_size(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> int:
    resolved = resolve(run, profile, nodes)
    return resolved.nnodes * resolved.n_gpus_per_node


def run_identity(
    run: GrpoRunConfig, profile: HardwareProfile, nodes: int, model_revision: str | None = None
) -> dict:
    """Everything that shapes the run's state; the same identity resumes the same checkpoints.

    Values are the resolved ones, so spelling out a default does not start a new run. The world
    size stands for nnodes and nGpusPerNode: verl's FSDP shards are named by rank and world size
    (`model_world_size_<N>_rank_<r>.pt`), so any other split of the same GPU count loads them.
    """
    resolved = resolve(run, profile, nodes)
    identity = resolved.model_dump(
        mode="json",
        exclude={*CONTINUATION_FIELDS, "extra_overrides", "nnodes", "n_gpus_per_node"},
    )
    identity["adv_estimator"] = "grpo"
    identity["world_size"] = resolved.nnodes * resolved.n_gpus_per_node
    identity["model_revision"] = model_revision
    identity["extra_overrides"] = {
        key: value for key, value in sorted(run.extra_overrides.items())
        if key.lstrip("+~") not in CONTINUATION_OVERRIDES
    }
    return identity


def run_dir_name(
    run: GrpoRunConfig, profile: HardwareProfile, nodes: int, model_revision: str | None = None
) -> str:
    """`<runName>-<N>gpu-<12 hex of the identity>`: readable, and unique per identity."""
    identity = run_identity(run, profile, nodes, model_revision)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return f"{run.run_name}-{identity['world_size']}gpu-{digest}"


def hydra_overrides(
    run: GrpoRunConfig, profile: HardwareProfile, nodes: int, model_revision: str | None = None
) -> dict[str, str]:
    """main_ppo's overrides: the tutorial's, in its order, then checkpointing, then extras."""
    resolved = resolve(run, profile, nodes)
    values = {"adv_estimator": "grpo", **resolved.model_dump()}
    overrides = {
        hydra_key: _hydra_value(values[field])
        for field, hydra_key in _HYDRA_KEYS.items()
        if values[field] is not None
    }
    overrides.update(_checkpoint_overrides(run, profile, nodes, model_revision))
    # verl prunes what this process saved (checkpoint_manager.py ensure_checkpoint_capacity);
    # the entrypoint's prune_command covers earlier attempts (lifecycle.py).
    overrides["trainer.max_actor_ckpt_to_keep"] = str(run.keep_checkpoints)
    overrides.update({key: _hydra_value(value) for key, value in run.extra_overrides.items()})
    return overrides


def _checkpoint_overrides(
    run: GrpoRunConfig, profile: HardwareProfile, nodes: int, model_revision: str | None
) -> dict[str, str]:
    own = f"{CHECKPOINT_ROOT}/{run_dir_name(run, profile, nodes, model_revision)}"
    overrides = {"trainer.default_local_dir": own, "trainer.resume_mode": "auto"}
    if run.resume_from is not None:
        overrides["trainer.resume_mode"] = f"${_RESUME_MODE_VAR}"
        overrides["trainer.resume_from_path"] = f"${_RESUME_PATH_VAR}"
    return overrides


def _hydra_value(value: OverrideValue) -> str:
    # repr keeps a float's full precision (1e-05); str gives True/False, which Hydra reads.
    return repr(value) if isinstance(value, float) else str(value)


def entrypoint(
    run: GrpoRunConfig, profile: HardwareProfile, nodes: int, model_revision: str | None = None
) -> str:
    """The exact shell command Ray runs on the head: the tutorial's, each argument quoted."""
    overrides = hydra_overrides(run, profile, nodes, model_revision)
    arguments = " ".join(_shell_argument(key, value) for key, value in overrides.items())
    prelude = prune_command(overrides["trainer.default_local_dir"], run.keep_checkpoints) + "; "
    if run.resume_from is not None:
        prelude += _resume_choice(overrides["trainer.default_local_dir"], run.resume_from) + " && "
    return (
        f"cd {VERL_DIR} && {prelude}PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo "
        f"{arguments}"
    )


def _shell_argument(key: str, value: str) -> str:
    if value in (f"${_RESUME_MODE_VAR}", f"${_RESUME_PATH_VAR}"):
        return f'"{key}={value}"'  # expanded by the shell; the values are plain paths and words
    return shlex.quote(override_text(key, value))


def _resume_choice(own_dir: str, resume_from: str) -> str:
    """Shell that resumes from the run's own checkpoints once it has any, else from another's.

    verl's resume_mode=resume_path loads resume_from_path, which must name a global_step_<n>
    directory, on every start (verl/trainer/ppo/ray_trainer.py _load_checkpoint); deciding per
    start keeps a restarted run from going back to the other run's step.
    """
    match = _RUN_DIR.match(resume_from)
    source = f"{CHECKPOINT_ROOT}/{match.group('dir')}"
    if match.group("step"):
        path = f"{source}/{match.group('step')}"
        find = f"[ -d {path} ] && {_RESUME_PATH_VAR}={path}"
    else:
        step = CHECKPOINT_STEP_DIR.format(f"$(cat {source}/{CHECKPOINT_TRACKER})")
        find = f"{_RESUME_PATH_VAR}={source}/{step}"
        path = source
    missing = f'{{ echo "verl-gke: no checkpoint to resume from at {path}" >&2; exit 1; }}'
    return (
        f"if [ -f {own_dir}/{CHECKPOINT_TRACKER} ]; then {_RESUME_MODE_VAR}=auto "
        f"{_RESUME_PATH_VAR}=null; else {_RESUME_MODE_VAR}=resume_path; {find} || {missing}; fi"
    )


# NCCL over the gIB plugin on the RDMA VPC targets (the tutorial's runtime-env.yaml, A4/A3U);
# the tuner file differs per machine and comes from the profile (ANCHORS defect 2).
_RDMA_VPC_NCCL_ENV = {
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    "NCCL_NET_PLUGIN": "/usr/local/gib/lib64/libnccl-net_internal.so",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_NET_CHUNKSIZE": "131072",
    "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "52",
    "NCCL_IB_FIFO_TC": "84",
}
# A4X: the gIB arm64 plugin sits next to the driver libraries and tunes itself through the
# `gcp` env plugin (the tutorial's A4X runtime env).
_DRANET_NCCL_ENV = {
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
    "NCCL_ENV_PLUGIN": "gcp",
}
# verl's own defaults (verl/trainer/runtime_env.yaml), which the tutorial's file drops. Its
# HCCL_* entries are for Ascend NPUs and are left out.
_VERL_ENV = {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def runtime_env(
    profile: HardwareProfile, nodes: int, tensorboard_dir: str | None = None
) -> dict:
    """The Ray runtime env of the job: env vars only.

    No `working_dir`, `py_modules` or `pip`: verl is already on the bucket (PYTHONPATH) and in
    the image, and an upload from the machine running Pulumi is slow and size-capped (ray
    #45602, verl #696). No `setup_hook`: it is not a runtime_env field; the tutorial's file sets
    it by mistake (ANCHORS defect 1).
    """
    env = {
        "PYTHONPATH": VERL_DIR,
        "NCCL_DEBUG": "INFO",
        **_VERL_ENV,
        "HF_HOME": HF_HOME,
        # Gloo (CPU collectives) must use the pod network, not an RDMA NIC.
        "GLOO_SOCKET_IFNAME": "eth0",
    }
    if profile.networking is NodeNetworking.RDMA_VPC:
        env.update(_RDMA_VPC_NCCL_ENV)
        env["NCCL_TUNER_CONFIG_PATH"] = profile.nccl_tuner_config
        # The tutorial's sizing hints, derived instead of hard-coded for two nodes of eight.
        env["NUM_WORKERS"] = str(nodes)
        env["GPUS_PER_WORKER"] = str(profile.gpus_per_node)
    else:
        env.update(_DRANET_NCCL_ENV)
    if tensorboard_dir:
        # verl's TensorBoard adapter writes where this says (verl/utils/tracking.py
        # _TensorboardAdapter); default: a relative path under the working dir, /data/verl.
        env["TENSORBOARD_DIR"] = tensorboard_dir
    return {"env_vars": env}


def tensorboard_dir(run: GrpoRunConfig, run_dir: str) -> str | None:
    """The run's TensorBoard directory on the bucket, when the run logs to TensorBoard."""
    if "tensorboard" not in run.loggers:
        return None
    return f"{CHECKPOINT_ROOT}/{run_dir}/{TENSORBOARD_SUBDIR}"


# Where the exported Hugging Face model goes, inside the run's directory.
EXPORT_SUBDIR = "huggingface"
# verl's FSDP checkpoint merger (verl/model_merger/__main__.py: `python -m verl.model_merger
# merge --backend fsdp --local_dir <...>/global_step_<n>/actor --target_dir <dir>`).
MODEL_MERGER = "python3 -m verl.model_merger"


def export_command(
    run_dir: str, merger: str = MODEL_MERGER, root: str = CHECKPOINT_ROOT, workdir: str = VERL_DIR
) -> str:
    """The shell command that merges the run's last checkpoint into `<run>/huggingface`.

    The step comes from verl's tracker file; the merger writes to a scratch directory that is
    renamed into place only when complete (a rename on the bucket's hierarchical namespace), so
    `<run>/huggingface` is either the previous export or a whole new one, never half of one.
    """
    own = f"{root}/{run_dir}"
    target, scratch = f"{own}/{EXPORT_SUBDIR}", f"{own}/{EXPORT_SUBDIR}.partial"
    step = f"$(cat {own}/{CHECKPOINT_TRACKER})"
    actor = f"{own}/{CHECKPOINT_STEP_DIR.format(step)}/actor"
    return (
        f"cd {workdir} && rm -rf {scratch} && PYTHONUNBUFFERED=1 {merger} merge --backend fsdp "
        f"--local_dir {actor} --target_dir {scratch} && rm -rf {target} && mv {scratch} {target}"
    )


def checkpoint_uri(bucket_url: str) -> str:
    """Where every run's checkpoint directory lives in the bucket: gs://bucket/checkpoints."""
    return f"{bucket_url.rstrip('/')}/{CHECKPOINT_SUBPATH}"


def run_problems(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> list[str]:
    """Every reason verl would refuse this run on this cluster, each with its fix; [] if none."""
    resolved = resolve(run, profile, nodes)
    return [
        *_hardware_problems(resolved, profile, nodes),
        *_batch_problems(resolved),
        *_resume_problems(run, profile, nodes),
        *_override_problems(run, profile, nodes),
    ]


def _key(field: str) -> str:
    return f"{CONFIG_KEY}.{to_camel(field)}"


def _divisors(n: int) -> str:
    found = [str(d) for d in range(1, n + 1) if n % d == 0]
    return ", ".join(found[:-1]) + f" or {found[-1]}" if len(found) > 1 else found[0]


def _hardware_problems(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> list[str]:
    problems = []
    target = profile.target.value
    if run.n_gpus_per_node > profile.gpus_per_node:
        problems.append(
            f"{_key('n_gpus_per_node')}={run.n_gpus_per_node} exceeds the "
            f"{profile.gpus_per_node} GPUs per node of {target}: use at most "
            f"{profile.gpus_per_node}, or leave it unset"
        )
    if run.nnodes > nodes:
        problems.append(
            f"{_key('nnodes')}={run.nnodes} exceeds the {nodes} GPU worker nodes of the "
            f"RayCluster: use at most {nodes}, or raise the node count"
        )
    # vLLM places one tensor-parallel group inside a node (verl/workers/rollout/vllm_rollout/
    # vllm_async_server.py: "gpus_per_node should be divisible by tensor_model_parallel_size").
    gpus = min(run.n_gpus_per_node, profile.gpus_per_node)
    if gpus % run.tensor_model_parallel_size:
        problems.append(
            f"{_key('tensor_model_parallel_size')}={run.tensor_model_parallel_size} must divide "
            f"the {gpus} GPUs per node of {target}: use {_divisors(gpus)}"
        )
    return problems


def _batch_problems(run: GrpoRunConfig) -> list[str]:
    """verl's batch-size checks for the FSDP strategies, with the numbers it will compute."""
    if str(run.extra_overrides.get("actor_rollout_ref.actor.use_dynamic_bsz")) == "True":
        return []  # verl skips these checks with dynamic batch sizes, so do we.
    problems = []
    n_gpus = run.nnodes * run.n_gpus_per_node
    samples = run.train_batch_size * run.rollout_n
    # verl/utils/config.py validate_config: real_train_batch_size % minimal_bsz (n_gpus) == 0.
    if samples % n_gpus:
        problems.append(
            f"{_key('train_batch_size')}={run.train_batch_size} x {_key('rollout_n')}="
            f"{run.rollout_n} = {samples} samples per step must be divisible by the {n_gpus} "
            f"GPUs of the run: use a multiple of {n_gpus} samples"
        )
    # verl/workers/config/actor.py ActorConfig.validate: train_batch_size >= ppo_mini_batch_size.
    if run.train_batch_size < run.ppo_mini_batch_size:
        problems.append(
            f"{_key('ppo_mini_batch_size')}={run.ppo_mini_batch_size} exceeds "
            f"{_key('train_batch_size')}={run.train_batch_size}: use at most "
            f"{run.train_batch_size}"
        )
    # verl/workers/fsdp_workers.py ActorRolloutRefWorker.__init__ normalises the mini batch to
    # ppo_mini_batch_size * rollout.n // n_gpus per GPU, then asserts it is > 0 and divisible
    # by ppo_micro_batch_size_per_gpu.
    per_gpu = run.ppo_mini_batch_size * run.rollout_n // n_gpus
    if per_gpu == 0:
        problems.append(
            f"{_key('ppo_mini_batch_size')}={run.ppo_mini_batch_size} x {_key('rollout_n')}="
            f"{run.rollout_n} leaves no sample for each of the {n_gpus} GPUs: use at least "
            f"{-(-n_gpus // run.rollout_n)}"
        )
    elif per_gpu % run.ppo_micro_batch_size_per_gpu:
        problems.append(
            f"{_key('ppo_micro_batch_size_per_gpu')}={run.ppo_micro_batch_size_per_gpu} must "
            f"divide the per-GPU mini batch ppoMiniBatchSize x rolloutN // GPUs = "
            f"{run.ppo_mini_batch_size} x {run.rollout_n} // {n_gpus} = {per_gpu}: use "
            f"{_divisors(per_gpu)}"
        )
    return problems


def _resume_problems(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> list[str]:
    if run.resume_from is None:
        return []
    saved_by = int(_RUN_DIR.match(run.resume_from).group("gpus"))
    gpus = world_size(run, profile, nodes)
    if saved_by == gpus:
        return []
    return [
        f"{_key('resume_from')}={quoted(run.resume_from)} was saved by {saved_by} GPUs, but "
        f"this run has {gpus} (nnodes x nGpusPerNode): verl's FSDP shards are per rank and "
        f"cannot be loaded by another world size. Run it on {saved_by} GPUs "
        f"(verl-gke:gpuNodes, {_key('nnodes')}), or remove {_key('resume_from')} to start clean"
    ]


def _override_problems(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> list[str]:
    typed = {hydra_key: field for field, hydra_key in _HYDRA_KEYS.items()}
    problems = []
    checked = {}
    for key, value in run.extra_overrides.items():
        where = f"{_key('extra_overrides')}[{quoted(key)}]"
        bare = key.lstrip("+~")
        if not _OVERRIDE_KEY.match(key):
            problems.append(
                f"{where} is not a Hydra key: use dotted names such as "
                "actor_rollout_ref.actor.entropy_coeff (optionally prefixed +, ++ or ~)"
            )
        elif bare in typed:
            field = typed[bare]
            hint = (
                "algorithm.adv_estimator is always grpo" if field == "adv_estimator"
                else f"set {_key(field)} instead"
            )
            problems.append(f"{where} duplicates a typed setting: {hint}")
        else:
            checked[key] = value
    # Every other override is parsed and merged with Hydra itself; the program's checkpoint keys
    # come before the extras on the command line, as they do here.
    program = {
        key: value for key, value in _checkpoint_overrides(run, profile, nodes, None).items()
        if key in PROTECTED_KEYS
    }
    return problems + override_problems(checked, program, _key("extra_overrides"))
