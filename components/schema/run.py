"""The GRPO training run as data: its config model and its command line.

Pure functions over `GrpoRunConfig` and a `HardwareProfile`; nothing here talks to Ray or
Pulumi. `components/ray/grpo_job.py` turns the result into a submitted Ray job. By concern:
- run_sizing.py: the defaults of every unset field, from the tutorial, the cluster and the
  model (`resolve`);
- run_checks.py and run_memory.py: what verl or vLLM would refuse, and what would not fit;
- run_identity.py: what names the run's checkpoint directory, and what keeps it;
- run_env.py: the Ray runtime env, and the env verl's workers really get;
- here: the config keys, the Hydra overrides and entrypoint, resuming, export, and the
  problems of a run gathered in one list (`run_problems`).

Every run checkpoints to its own directory on the bucket and always resumes from it
(`resume_mode=auto`, tutorial defect 6): `/checkpoint-bucket/checkpoints/<runName>-<N>gpu-<12
hex of its identity>`. What it does not do: stage the model, data or verl source (model staging
owns that), or validate Hydra keys it does not model (`extraOverrides` is passed through as
written, after Hydra's own parser and merge check them against the program's keys).

verl's checks mirror verl at its pinned ref (components/facts/verl.py); each names the file it
mirrors, and tools/training_stack.py composes every override the program writes with verl's
own config at that ref.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic.alias_generators import to_camel

from components.facts import verl
from components.facts.hardware import HardwareProfile
from components.facts.models import ModelShape
from components.facts.layout import (
    CHECKPOINT_ROOT,
    CHECKPOINT_STEP_DIR,
    CHECKPOINT_SUBPATH,
    CHECKPOINT_TRACKER,
    DATA_MOUNT,
    VERL_DIR,
)
from components.messages import quoted
from components.schema.hydra_overrides import (
    PROTECTED_KEYS,
    flattened,
    override_problems,
    override_text,
)
from components.schema.lifecycle import RunLifecycle, prune_command
from components.schema.pulumi_forms import Key
from components.schema.run_checks import batch_problems, hardware_problems, model_problems
from components.schema.run_env import effective_env, runtime_env  # noqa: F401 (re-exported)
from components.schema.run_identity import (  # noqa: F401 (re-exported)
    CONTINUATION_FIELDS,
    CONTINUATION_OVERRIDES,
    REFERENCE_DTYPE,
    identity_of,
)
from components.schema.run_inputs import image_problem, path_problems, working_dir_problems
from components.schema.run_memory import Offload
from components.schema.run_sizing import SIZED_FIELDS, resolve  # noqa: F401 (re-exported)

CONFIG_KEY = Key("job")  # `<project>:job`, under the project's name
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
    train_batch_size: int | None = Field(
        None, gt=0,
        description="data.train_batch_size (prompts); default: 256, or more so that every GPU "
        "gets at least 64 samples per step (docs/training.md).",
    )
    max_prompt_length: int = Field(512, gt=0, description="data.max_prompt_length (tokens).")
    max_response_length: int = Field(
        512, gt=0, description="data.max_response_length (tokens)."
    )
    # verl's own GSM8K GRPO recipe for Qwen2.5-32B-Instruct trains at 1e-6 with the KL loss
    # (examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh:25-26, :76-78 at the pinned ref); the
    # tutorial's 1e-5 without KL on a4/a3u is 10x that for a full-parameter update of a 32B
    # policy (review finding 7).
    learning_rate: float = Field(
        1e-6, gt=0, description="actor_rollout_ref.actor.optim.lr; default 1e-6 (verl's recipes)."
    )
    ppo_mini_batch_size: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.actor.ppo_mini_batch_size; default: the train batch "
        "(a4, a3u) or a quarter of it (a4x), the tutorial's optimizer steps per RL step.",
    )
    ppo_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu; default: the largest "
        "divisor of the per-GPU mini batch, at most 64, that fits in memory.",
    )
    use_kl_loss: bool = Field(
        True,
        description="actor_rollout_ref.actor.use_kl_loss (GRPO's KL to the reference policy, "
        "weighted by klCoef); default True, as in verl's GRPO recipes.",
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
        "per node, the attention heads and the KV heads; default: the smallest such size that "
        "leaves half of vLLM's memory for the KV cache (2 for a 32B model).",
    )
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1,
        description="actor_rollout_ref.rollout.gpu_memory_utilization; default 0.6 (the "
        "tutorial's), lower when FSDP's resident state leaves less.",
    )
    fsdp_size: int | None = Field(
        None, ge=-1,
        description="actor_rollout_ref.actor.fsdp_config.fsdp_size: GPUs per FSDP sharding group "
        "(HSDP), -1 for all; default: all up to 16 GPUs, beyond that the smallest group of "
        "whole nodes of at least 16 GPUs that fits in memory.",
    )
    offload: Offload | None = Field(
        None,
        description="What FSDP keeps in host memory: none, optimizer, or all (parameters too); "
        "verl's fsdp_config optimizer_offload / param_offload. default: none, unless the run "
        "does not fit without it.",
    )
    rollout_n: int = Field(
        8, gt=0, description="actor_rollout_ref.rollout.n: responses sampled per prompt."
    )
    rollout_log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu; default: the "
        "largest divisor of the per-GPU samples, at most 64, that fits in memory.",
    )
    ref_log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu; default: as the "
        "rollout's.",
    )
    # GRPO's KL is the actor's KL loss (verl/workers/utils/losses.py:132-140 at the pinned ref);
    # algorithm.kl_ctrl is read only with use_kl_in_reward (verl/trainer/ppo/v1/trainer_base.py:
    # 116-117), which GRPO leaves off.
    kl_coef: float = Field(
        0.001, ge=0,
        description="actor_rollout_ref.actor.kl_loss_coef, with useKlLoss; default 0.001 "
        "(verl's).",
    )
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
    extra_overrides: dict[str, OverrideValue | dict[str, Any]] = Field(
        default_factory=dict,
        description="Any other Hydra override of main_ppo, key -> value, appended last. "
        "Keys set by a typed field above, and the checkpoint keys, are refused. A nested map "
        "(what `pulumi config set --path 'verl-gke:job.extraOverrides.a.b' 4` stores) is "
        "flattened into dotted keys (a.b: 4).",
    )
    # What the user brings (components/schema/run_inputs.py, docs/your-own-experiment.md).
    image: str | None = Field(
        None,
        description="The training image of the Ray head and workers, by tag or digest (never a "
        "floating tag), pulled through the stack's Docker Hub mirror; default: the pinned verl "
        "image of the target's architecture.",
    )
    working_dir: str | None = Field(
        None,
        description="A local directory (relative to the project directory) uploaded to "
        "gs://<bucket>/workdirs/<digest of its files>, or a gs://<bucket>/<path> already "
        "there: the job's working directory (its relative paths are read inside it); its "
        "content is part of the run's identity.",
    )
    reward_function_path: str | None = Field(
        None,
        description="reward.custom_reward_function.path: a Python file (relative to workingDir, "
        "/data/..., or gs://<bucket>/...); default: verl's reward for the dataset.",
    )
    reward_function_name: str | None = Field(
        None,
        description="reward.custom_reward_function.name: the function in that file; default: "
        "compute_score.",
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
    # The model's shape, set by the program once it is known (components/preflight/model_shape.py);
    # not a config key. None: unknown, the defaults are derived for DEFAULT_MODEL and the checks
    # that need the shape are left to the model check at preview.
    _model: ModelShape | None = PrivateAttr(default=None)

    def with_model(self, shape: ModelShape) -> GrpoRunConfig:
        """This run, for a model of this shape."""
        run = self.model_copy()
        run._model = shape
        return run

    @property
    def model(self) -> ModelShape | None:
        return self._model

    @field_validator("extra_overrides", mode="before")
    @classmethod
    def _flat_overrides(cls, value: Any) -> Any:
        # What `pulumi config set --path` stores for a dotted Hydra key (hydra_overrides.py).
        if isinstance(value, dict):
            return flattened(value, f"{CONFIG_KEY}.extraOverrides")
        return value

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, value: str | None) -> str | None:
        if value is not None and (problem := image_problem(f"{CONFIG_KEY}.image", value)):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _reward_name_needs_path(self) -> GrpoRunConfig:
        if self.reward_function_name is not None and self.reward_function_path is None:
            raise ValueError(
                f"{CONFIG_KEY}.rewardFunctionName={quoted(self.reward_function_name)} is set "
                f"without {CONFIG_KEY}.rewardFunctionPath: set the file that defines it, e.g. "
                f"`pulumi config set --path {CONFIG_KEY}.rewardFunctionPath reward.py`"
            )
        return self

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
    "kl_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "logger": "trainer.logger",
    "val_before_train": "trainer.val_before_train",
    "n_gpus_per_node": "trainer.n_gpus_per_node",
    "nnodes": "trainer.nnodes",
    "save_freq": "trainer.save_freq",
    "test_freq": "trainer.test_freq",
    "total_epochs": "trainer.total_epochs",
    # Not in the tutorial: HSDP (verl/workers/engine/fsdp/transformer_impl.py:215-217 at the
    # pinned ref builds each engine's mesh from its own fsdp_size: the actor's; the reference
    # keeps its -1, TRAINING-REVIEW-2.md finding 9).
    "fsdp_size": "actor_rollout_ref.actor.fsdp_config.fsdp_size",
    # verl loads the file by path (it must exist where the trainer runs: os.path.exists, then
    # spec_from_file_location) and takes the named function; where it reads them at the pinned
    # ref is components/facts/verl.py's (not the legacy top-level group, which main_ppo ignores).
    "reward_function_path": verl.REWARD_FUNCTION_PATH,
    "reward_function_name": verl.REWARD_FUNCTION_NAME,
}
# Keys a typed field sets through something other than _HYDRA_KEYS.
_OFFLOAD_KEYS = {
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": (Offload.OPTIMIZER, Offload.ALL),
    "actor_rollout_ref.actor.fsdp_config.param_offload": (Offload.ALL,),
    "actor_rollout_ref.ref.fsdp_config.param_offload": (Offload.ALL,),
}
_OVERRIDE_KEY = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")

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
    """Everything that shapes the run's state (components/schema/run_identity.py)."""
    return identity_of(resolve(run, profile, nodes), run, profile, model_revision)


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
    if not resolved.use_kl_loss:
        values["kl_coef"] = None  # no KL loss: the coefficient is refused when set (run_checks)
    overrides = {
        hydra_key: _hydra_value(values[field])
        for field, hydra_key in _HYDRA_KEYS.items()
        if values[field] is not None
    }
    if resolved.reward_function_path is not None and resolved.reward_function_name is None:
        # The reward group's own default, written out: the run says which function it calls.
        overrides[verl.REWARD_FUNCTION_NAME] = verl.DEFAULT_REWARD_FUNCTION_NAME
    if resolved.use_kl_loss:
        overrides[REFERENCE_DTYPE[0]] = REFERENCE_DTYPE[1]
    # The trainer the offline check walks (tools/training_stack.py), named rather than left to
    # verl's default of the day (components/facts/verl.py USE_V1).
    overrides[verl.USE_V1[0]] = verl.USE_V1[1]
    overrides.update({
        key: "True" for key, modes in _OFFLOAD_KEYS.items() if resolved.offload in modes
    })
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
    # The driver starts in the working directory the user brought (run_inputs.placed), else in
    # verl's source; verl itself comes from PYTHONPATH (run_env.py) either way.
    return (
        f"cd {shlex.quote(run.working_dir or VERL_DIR)} && {prelude}PYTHONUNBUFFERED=1 python3 -m "
        "verl.trainer.main_ppo "
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
    user_set = run.model_fields_set
    return [
        *hardware_problems(resolved, profile, nodes, user_set),
        *batch_problems(resolved, user_set),
        *model_problems(resolved, profile, user_set),
        *_resume_problems(run, profile, nodes),
        *_override_problems(run, profile, nodes),
    ]


def brought_problems(run: GrpoRunConfig, bucket: str) -> list[str]:
    """What the user brings that the pods could not read: the working directory (a local one
    within the upload's limits, a gs:// one in the stack's bucket) and the run's paths."""
    problems = []
    if run.working_dir is not None:
        problems += working_dir_problems(_key("working_dir"), run.working_dir, bucket)
    return problems + path_problems(run, bucket, _key)


def _key(field: str) -> str:
    return f"{CONFIG_KEY}.{to_camel(field)}"


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
        f"({Key('gpuNodes')}, {_key('nnodes')}), or remove {_key('resume_from')} to start clean"
    ]


def _override_problems(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> list[str]:
    typed = {hydra_key: field for field, hydra_key in _HYDRA_KEYS.items()}
    typed.update(dict.fromkeys(_OFFLOAD_KEYS, "offload"))
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
        elif bare == verl.USE_V1[0]:
            problems.append(
                f"{where} chooses verl's trainer, which the program sets: it runs the V1 trainer, "
                "the one its training stack is checked for (docs/training.md); remove the entry"
            )
        elif ignored := next((group for group in verl.IGNORED_GROUPS
                              if bare == group or bare.startswith(group + ".")), None):
            problems.append(
                f"{where} is under `{ignored}`, which the pinned verl composes but never reads "
                f"(it reads {verl.IGNORED_GROUPS[ignored]}): for a reward function set "
                f"{_key('reward_function_path')} and {_key('reward_function_name')}"
            )
        else:
            checked[key] = value
    # Every other override is parsed and merged with Hydra itself; the program's checkpoint keys
    # come before the extras on the command line, as they do here.
    program = {
        key: value for key, value in _checkpoint_overrides(run, profile, nodes, None).items()
        if key in PROTECTED_KEYS
    }
    return problems + override_problems(checked, program, _key("extra_overrides"))
