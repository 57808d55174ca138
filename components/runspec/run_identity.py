"""What a run is: the settings that shape its state and name its checkpoint directory.

A run is identified by everything that shapes its state: the model and its revision, the world
size, the strategy and sharding, the algorithm, optimiser, batch and data settings, the verl
source and image it trains with, the working directory and reward the user brings, and any extra
override not known to be harmless. Settings that only extend, observe or tune the execution of a
run (`CONTINUATION_FIELDS`, `CONTINUATION_OVERRIDES`) keep its directory, so changing one
restarts the job, which resumes.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from components.facts import pins
from components.facts.hardware import HardwareProfile
from components.runspec.lifecycle import RunLifecycle

if TYPE_CHECKING:
    from components.runspec.run_config import GrpoRunConfig

# The reference policy in bf16: verl builds it with ref.fsdp_config, whose model_dtype is fp32
# in the composed config (verl/trainer/config/engine/fsdp.yaml:33 at the pinned ref; the engine
# reads it, verl/workers/engine/fsdp/transformer_impl.py). It is only read for log-probs, so
# fp32 weights buy nothing but 2 bytes per parameter per GPU.
REFERENCE_DTYPE = ("actor_rollout_ref.ref.fsdp_config.model_dtype", "bfloat16")
# Settings that extend, observe or only tune the execution of a run: changing one keeps the run
# (its checkpoint directory), so the job restarts and resumes where it was. Everything else of
# GrpoRunConfig shapes the run's state and starts a new one, including any field added later.
# - extend: more epochs;
# - observe: checkpoint and validation cadence, loggers, validation data;
# - execution: micro batches, offload, rollout memory and rollout TP split the same batch
#   differently over the same GPUs (the usual fixes after an OOM), which does not change what
#   is learned; vLLM's weights are synced from FSDP every step, so its TP holds no state;
# - how the job is followed and named.
CONTINUATION_FIELDS = frozenset({
    "total_epochs",
    "save_freq", "test_freq", "logger", "val_before_train", "val_files",
    "ppo_micro_batch_size_per_gpu", "rollout_log_prob_micro_batch_size_per_gpu",
    "ref_log_prob_micro_batch_size_per_gpu", "gpu_memory_utilization", "run_name",
    "tensor_model_parallel_size", "offload",
    # checks only: whether an unread model shape may run
    "accept_unknown_model_shape",
    *RunLifecycle.model_fields,
})
# Extra overrides of the same kinds; every other extra override is part of the run's identity.
# Execution-only keys of verl's config (verl/trainer/config/_generated_ppo_trainer.yaml at the
# pinned ref): dynamic batch sizes and their token budgets (:66-67, :164-165, :274-275), FSDP
# offload (:31-33, :206-208), vLLM's batching, eager mode and cache (:256-265), activation
# checkpointing and offload (:388-389). tests/test_training_stack.py holds each key to verl's
# composed config.
CONTINUATION_OVERRIDES = frozenset({
    "trainer.total_training_steps", "trainer.project_name", "trainer.experiment_name",
    "trainer.log_val_generations", "trainer.max_actor_ckpt_to_keep",
    "trainer.rollout_data_dir", "trainer.validation_data_dir",
    "actor_rollout_ref.actor.use_dynamic_bsz", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.actor.fsdp_config.offload_policy",
    "actor_rollout_ref.rollout.max_num_seqs", "actor_rollout_ref.rollout.max_num_batched_tokens",
    "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.free_cache_engine",
    "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.model.enable_activation_offload",
})
# Hex digits of `digest`: enough to tell runs (and Ray submissions) apart, short enough to read.
DIGEST_HEX = 12


def digest(value: Any) -> str:
    """12 hex of the SHA-256 of `value` as JSON with sorted keys: the same for the same value.
    Names a run's directory (its identity) and a Ray submission (components/run/grpo_job.py)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:DIGEST_HEX]


# Keys added after runs existed: absent from the identity while unset (image has its own line).
# A warm start's source is one too: other initial weights are another run (run_resume.py).
BROUGHT_FIELDS = ("working_dir", "reward_function_path", "reward_function_name", "warm_start_from")


def identity_of(
    resolved: GrpoRunConfig, run: GrpoRunConfig, profile: HardwareProfile,
    model_revision: str | None,
) -> dict:
    """Everything that shapes the run's state; the same identity resumes the same checkpoints.

    Values are the resolved ones, so spelling out a default does not start a new run. The world
    size stands for nnodes and nGpusPerNode: verl's FSDP shards are named by rank and world size
    (`model_world_size_<N>_rank_<r>.pt`), so any other split of the same GPU count loads them.
    `resolved` is `run` with its defaults filled (run.resolve); the extras are `run`'s own.
    """
    identity = resolved.model_dump(
        mode="json",
        exclude={*CONTINUATION_FIELDS, "extra_overrides", "nnodes", "n_gpus_per_node"},
    )
    identity["adv_estimator"] = "grpo"
    identity["world_size"] = resolved.nnodes * resolved.n_gpus_per_node
    identity["model_revision"] = model_revision
    # verl's defaults (rollout mode, loss aggregation, reference dtype) change between releases
    # (review finding 8): a checkpoint continues only under the trainer code and image it was
    # written with. Another verl or image is another run, and the old one stays on the bucket.
    identity["verl_ref"] = pins.VERL_REF
    identity["image"] = resolved.image or pins.VERL_IMAGES[profile.arch]
    # What the user brings, when brought: the working directory's place on the bucket names a
    # local one's content (run_inputs.placed), the reward is its file and function. Unset, they
    # are left out, so a run from before these keys existed keeps its directory.
    for field in BROUGHT_FIELDS:
        if identity.get(field) is None:
            identity.pop(field, None)
    if resolved.use_kl_loss:
        identity["reference_dtype"] = REFERENCE_DTYPE[1]
    else:
        identity.pop("kl_coef")
    identity["extra_overrides"] = {
        key: value for key, value in sorted(run.extra_overrides.items())
        if key.lstrip("+~") not in CONTINUATION_OVERRIDES
    }
    return identity
