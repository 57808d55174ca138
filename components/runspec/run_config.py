"""The GRPO training run's config: the stack key `verl-gke:job`, as one pydantic model.

The model and what it validates on its own (names, loggers, the image, the reward's pair of
keys, resumeFrom's form), and `HYDRA_KEYS`, the one place each field's Hydra key is written:
the command line (components/runspec/run.py), the JSON Schema of the stack file and the docs'
field table (held to it by tests/test_config.py) all read it. What a run needs beyond its own
fields (the cluster, the model's shape) is checked and derived by the modules that stand on
this one: run_sizing.py, run_checks.py, run_identity.py, run_inputs.py and run.py.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic.alias_generators import to_camel

from components.facts import verl
from components.facts.layout import DATA_MOUNT
from components.facts.models import ModelShape
from components.messages import quoted
from components.forms.hydra_overrides import flattened
from components.forms.image_refs import image_problem
from components.runspec.lifecycle import RunLifecycle
from components.forms.pulumi_forms import Key
from components.runspec.run_memory import Offload

CONFIG_KEY = Key("job")  # `<project>:job`, under the project's name
# The bucket is mounted at /data in every Ray pod (GcsFuseStorage); each run checkpoints to its
# own directory under CHECKPOINT_ROOT, `gs://<bucket>/checkpoints/<run>`.
_RUN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
# `<runName>-<N>gpu-<12 hex>`, optionally `/global_step_<n>`: what resumeFrom accepts;
# warmStartFrom takes the directory alone (components/runspec/run_resume.py).
RUN_DIR = re.compile(r"^(?P<dir>[a-z0-9][-a-z0-9]*-(?P<gpus>[0-9]+)gpu-[0-9a-f]{12})"
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


def warm_start_problem(value: str) -> str | None:
    """Why `value` is not a run directory a warm start can name, or None."""
    if (match := RUN_DIR.match(value)) and match.group("step") is None:
        return None
    return (
        f"{CONFIG_KEY}.warmStartFrom={quoted(value)} is not a run directory: use the last part "
        "of another run's job.checkpointUri output, e.g. grpo-16gpu-0123456789ab (a warm start "
        "takes that run's exported model, not a step)"
    )



def _name_hydra_keys(schema: dict[str, Any]) -> None:
    """The JSON Schema of the model (schemas/stack-config.schema.json, what editors show) names
    each field's Hydra key, read from HYDRA_KEYS rather than written in the descriptions."""
    for field, key in HYDRA_KEYS.items():
        for name in (field, to_camel(field)):
            if name in schema.get("properties", {}):
                described = schema["properties"][name]
                text = described.get("description", "")
                described["description"] = f"{text} Hydra key: {key}.".strip()


class GrpoRunConfig(RunLifecycle):
    """The stack config key `verl-gke:job`: one GRPO run of verl's `main_ppo` trainer.

    Every sizing field left unset is derived for the stack's cluster and model by `resolve()`
    (components/runspec/run_sizing.py); how far `pulumi up` follows the run (`waitFor`) and what
    happens to it afterwards are RunLifecycle's fields (components/runspec/lifecycle.py).
    """

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True,
        json_schema_extra=lambda schema: _name_hydra_keys(schema),
    )

    model_path: str = Field(
        f"{DATA_MOUNT}/Qwen2.5-32B-Instruct",
        description="The model on the bucket mount.",
    )
    train_files: str = Field(
        f"{DATA_MOUNT}/gsm8k/train.parquet", description="The training prompts (parquet)."
    )
    val_files: str = Field(
        f"{DATA_MOUNT}/gsm8k/test.parquet", description="The validation prompts (parquet)."
    )
    train_batch_size: int | None = Field(
        None, gt=0,
        description="Prompts per step; default: 256, or more so that every GPU "
        "gets at least 64 samples per step (docs/training.md).",
    )
    max_prompt_length: int = Field(512, gt=0, description="Tokens of a prompt, at most.")
    max_response_length: int = Field(
        512, gt=0, description="Tokens of a response, at most."
    )
    # verl's own GSM8K GRPO recipe for Qwen2.5-32B-Instruct trains at 1e-6 with the KL loss
    # (examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh:25-26, :76-78 at the pinned ref); the
    # tutorial's 1e-5 without KL on a4/a3u is 10x that for a full-parameter update of a 32B
    # policy (review finding 7).
    learning_rate: float = Field(
        1e-6, gt=0, description="The actor's learning rate (verl's GRPO recipes' value)."
    )
    ppo_mini_batch_size: int | None = Field(
        None, gt=0,
        description="Prompts per optimizer step; default: the tutorial's 256 prompts (a4, a3u) "
        "or 64 (a4x) at every node count, so updates per epoch stay the same.",
    )
    ppo_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="Samples per GPU per forward and backward pass; default: the largest "
        "divisor of the per-GPU mini batch, at most 64, that fits in memory.",
    )
    use_kl_loss: bool = Field(
        True,
        description="GRPO's KL to the reference policy, as a loss weighted by klCoef, as in "
        "verl's GRPO recipes.",
    )
    # Megatron has other divisibility rules (tensor x pipeline x context parallel) that
    # the run's checks (run_checks.py) do not model, so only the FSDP strategies are accepted.
    actor_strategy: Literal["fsdp", "fsdp2"] = Field(
        "fsdp2", description="The actor's FSDP version."
    )
    rollout_engine: Literal["vllm", "sglang"] = Field(
        "vllm", description="The rollout engine."
    )
    tensor_model_parallel_size: int | None = Field(
        None, gt=0,
        description="The rollout engine's tensor parallel size; must divide the GPUs "
        "per node, the attention heads and the KV heads; default: the smallest such size that "
        "leaves half of vLLM's memory for the KV cache (2 for a 32B model).",
    )
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1,
        description="The rollout engine's share of GPU memory; default 0.6 (the "
        "tutorial's), lower when FSDP's resident state leaves less.",
    )
    fsdp_size: int | None = Field(
        None, ge=-1,
        description="GPUs per FSDP sharding group "
        "(HSDP), -1 for all; default: all up to 64 GPUs, beyond that the smallest group of "
        "whole nodes of at least 64 GPUs that fits in memory.",
    )
    offload: Offload | None = Field(
        None,
        description="What FSDP keeps in host memory: none, optimizer, or all (parameters too); "
        "verl's fsdp_config optimizer_offload / param_offload. default: none, unless the run "
        "does not fit without it.",
    )
    rollout_n: int = Field(
        8, gt=0, description="Responses sampled per prompt (GRPO's group)."
    )
    rollout_log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="Samples per GPU per log-prob pass of the actor; default: the "
        "largest divisor of the per-GPU samples, at most 64, that fits in memory.",
    )
    ref_log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0,
        description="Samples per GPU per log-prob pass of the reference; default: as the "
        "rollout's.",
    )
    # GRPO's KL is the actor's KL loss (verl/workers/utils/losses.py:132-140 at the pinned ref);
    # algorithm.kl_ctrl is read only with use_kl_in_reward (verl/trainer/ppo/v1/trainer_base.py:
    # 116-117), which GRPO leaves off.
    kl_coef: float = Field(
        0.001, ge=0,
        description="The KL loss's weight, with useKlLoss (verl's value)."
    )
    logger: str = Field(
        "console",
        description="Where verl logs metrics: console, wandb, mlflow, tensorboard, or a list "
        "such as [console,wandb]. wandb needs verl-gke:wandbApiKey, mlflow verl-gke:mlflowTrackingUri "
        "(both secret); tensorboard writes to the run's directory on the bucket.",
    )
    val_before_train: bool | None = Field(
        None,
        description="A validation pass before the first step; default: False (a4, a3u), left "
        "to verl (a4x).",
    )
    nnodes: int | None = Field(
        None, gt=0, description="Nodes; default: the RayCluster's worker replicas."
    )
    n_gpus_per_node: int | None = Field(
        None, gt=0, description="GPUs per node; default: the target's."
    )
    save_freq: int = Field(
        10, gt=0,
        description="Steps between checkpoints. Must be > 0: verl's default -1 never "
        "checkpoints, so a restarted run would start over.",
    )
    test_freq: int = Field(10, ge=-1, description="Steps between validations; -1: never.")
    total_epochs: int = Field(2, gt=0, description="Passes over the training prompts.")
    extra_overrides: dict[str, OverrideValue | dict[str, Any]] = Field(
        default_factory=dict,
        description="Any other Hydra override of main_ppo, key -> value, appended last. "
        "Keys set by a typed field above, and the checkpoint keys, are refused. A nested map "
        "(what `pulumi config set --path 'verl-gke:job.extraOverrides.a.b' 4` stores) is "
        "flattened into dotted keys (a.b: 4).",
    )
    # What the user brings (components/runspec/run_inputs.py, docs/your-own-experiment.md).
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
        description="A Python file defining the reward (relative to workingDir, "
        "/data/..., or gs://<bucket>/...); default: verl's reward for the dataset.",
    )
    reward_function_name: str | None = Field(
        None,
        description="The reward function in that file; default: compute_score."
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
        "`/global_step_<n>`; default: its latest. Refused when its GPU count differs. It "
        "restores that run's optimizer, learning rate, step count and data position; for new "
        "optimizer settings use warmStartFrom.",
    )
    warm_start_from: str | None = Field(
        None,
        description="Begin a new training from another run's weights only: its exported model "
        "(`<run>/huggingface`, written when it SUCCEEDED), with a fresh optimizer at this run's "
        "learningRate, step 0 and the data from the start, at any GPU count; its directory name "
        "as in the `job.checkpointUri` output (`grpo-16gpu-0123456789ab`).",
    )
    accept_unknown_model_shape: bool = Field(
        False,
        description="Run even when the model's shape cannot be read (its config.json at the Hub "
        "or in the bucket): the defaults are then sized for the default model and the TP and "
        "memory checks skipped; unset, an unknown shape stops `pulumi preview`.",
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

    @field_validator("warm_start_from")
    @classmethod
    def _warm_start_from(cls, value: str | None) -> str | None:
        if value is not None and (problem := warm_start_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("resume_from")
    @classmethod
    def _resume_from(cls, value: str | None) -> str | None:
        if value is not None and not RUN_DIR.match(value):
            raise ValueError(
                f"{CONFIG_KEY}.resumeFrom={quoted(value)} is not a run directory: use the last "
                "part of another run's job.checkpointUri output, e.g. grpo-16gpu-0123456789ab, "
                "optionally followed by /global_step_<n>"
            )
        return value


# Hydra key of each typed field, in the order of the tutorial's override table: the one place
# each is written (module docstring).
HYDRA_KEYS: dict[str, str] = {
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
