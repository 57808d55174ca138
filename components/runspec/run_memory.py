"""Memory per GPU of a GRPO run, by phase: the arithmetic of the review's appendix, as code.

An estimate, not a measurement (no GPU was available where it was written). It exists to refuse
before any GPU is billed what cannot fit by a wide margin, and to pick defaults that do; the
margins below are said where they are taken. Source of the arithmetic and the figures it was
checked against: ../shared/reference/TRAINING-REVIEW.md, "Memory arithmetic" (read at verl
b178a3cd5), re-derived at the pinned ref by TRAINING-REVIEW-2.md (Q3: the dense-model rows hold).

Phases (verl's hybrid engine: actor, reference and vLLM share every GPU, fsdp_workers.py):
- rollout: FSDP's fp32 parameters and Adam stay resident (no offload), the reference model too,
  and vLLM holds `gpu_memory_utilization` of the GPU (weights / TP plus KV cache);
- update: vLLM sleeps (level 2: weights and KV freed, vllm_async_server.py:563-571 at HEAD,
  ~3 GiB left), fp32 gradients exist, and one micro batch's activations;
- log-prob: a forward pass of one log-prob micro batch, without gradients.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from components.facts.models import ModelShape

GIB = 2**30
# CUDA contexts of the trainer and the vLLM worker, NCCL buffers, allocator slack (the review).
OVERHEAD_GIB = 5.0
# What vLLM keeps while asleep at level 2 (its CUDA graphs pool and context; the review).
VLLM_ASLEEP_GIB = 3.0
# vLLM's own activations and CUDA graphs inside its budget (the review's "~4").
VLLM_WORKSPACE_GIB = 4.0
# The share of a GPU's memory the estimate leaves unplanned: a phase must fit in the rest. The
# estimate is arithmetic at the worst case, without the caching allocator's fragmentation or
# what it does not model; without a margin a plan at 140.0 of 140 GiB passed (Qwen2.5-72B on one
# a3u node, TRAINING-REVIEW-2.md Q3). 4%: 5.6 GiB of an H200's 140, 7.2 of a B200's 179. The
# tutorial's own settings on 2 a3u nodes, whose worst-case update the estimate puts at 133.9 GiB
# (95.6%), stay within it; the review judged them to fit, since verl removes padding and the
# typical update is far below the worst case.
MEMORY_MARGIN = 0.04
# Bytes per parameter held by FSDP: fp32 master weights (verl `model_dtype: fp32`,
# _generated_ppo_trainer.yaml:36), fp32 gradients, and AdamW's two fp32 moments.
FP32, BF16 = 4, 2


class Offload(str, enum.Enum):
    """What FSDP keeps in host memory between uses (verl's fsdp_config param/optimizer_offload)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    ALL = "all"  # parameters, gradients and optimizer


@dataclass(frozen=True)
class MemoryPlan:
    """The inputs of the estimate, all resolved."""

    shape: ModelShape
    gpu_memory_gib: float
    shard_gpus: int  # the FSDP sharding group (all GPUs, or the HSDP group)
    tensor_parallel: int  # vLLM's tensor-parallel size
    gpu_memory_utilization: float
    micro_batch: int  # ppo_micro_batch_size_per_gpu
    log_prob_micro_batch: int  # the larger of the rollout and ref log-prob micro batches
    tokens_per_sample: int  # max prompt + max response length: the worst case
    reference: bool  # a reference model exists (use_kl_loss)
    offload: Offload = Offload.NONE
    # The context vLLM is started with (verl gives it the model's max_position_embeddings unless
    # rollout.max_model_len is set, components/facts/verl.py); 0: tokens_per_sample.
    context_tokens: int = 0


def _gib(nbytes: float) -> float:
    return nbytes / GIB


def resident_gib(plan: MemoryPlan) -> float:
    """FSDP state that stays on the GPU in every phase: fp32 weights, Adam, the bf16 reference."""
    params = plan.shape.parameter_count / plan.shard_gpus
    weights = 0 if plan.offload is Offload.ALL else FP32 * params
    adam = 0 if plan.offload is not Offload.NONE else 2 * FP32 * params
    # The reference model is held in bf16 (the program sets ref.fsdp_config.model_dtype).
    reference = BF16 * params if plan.reference and plan.offload is not Offload.ALL else 0
    return _gib(weights + adam + reference)


def vllm_budget_gib(plan: MemoryPlan) -> float:
    return plan.gpu_memory_utilization * plan.gpu_memory_gib


def kv_bytes_per_token(shape: ModelShape, tensor_parallel: int) -> int:
    """K and V of every layer for one token on one GPU; KV heads are replicated below TP."""
    heads = max(1, shape.num_key_value_heads // tensor_parallel)
    return 2 * shape.num_hidden_layers * heads * shape.head_dim * BF16


def vllm_weights_gib(plan: MemoryPlan) -> float:
    return _gib(plan.shape.weight_bytes / plan.tensor_parallel)


def vllm_need_gib(plan: MemoryPlan) -> float:
    """vLLM's least: its weight shard, its workspace and the KV cache of one sequence of its
    whole context (vLLM refuses to start otherwise), not only prompt + response."""
    context = plan.context_tokens or plan.tokens_per_sample
    kv = kv_bytes_per_token(plan.shape, plan.tensor_parallel) * context
    return vllm_weights_gib(plan) + VLLM_WORKSPACE_GIB + _gib(kv)


def rollout_gib(plan: MemoryPlan) -> float:
    return resident_gib(plan) + vllm_budget_gib(plan) + OVERHEAD_GIB


def _layer_parameters(shape: ModelShape) -> float:
    embeddings = shape.vocab_size * shape.hidden_size * (1 if shape.tie_word_embeddings else 2)
    return (shape.parameter_count - embeddings) / shape.num_hidden_layers


def activations_gib(shape: ModelShape, micro_batch: int, tokens_per_sample: int,
                    backward: bool) -> float:
    """One micro batch's activations at the worst case (every sequence at its longest).

    With gradient checkpointing (verl's default, enable_gradient_checkpointing: true,
    _generated_ppo_trainer.yaml:304): every layer's input (bf16), the recompute of one layer
    (its attention and MLP intermediates, about 4 x hidden + 3 x the MLP width per token: the
    intermediate size, or a MoE layer's experts per token, ModelShape.mlp_width_per_token), the
    logits in bf16 and, in training, their gradient; plus two gathered bf16 layers (FSDP
    prefetch). A forward without gradients keeps no layer inputs but the log-softmax in fp32.
    """
    tokens = micro_batch * tokens_per_sample
    one_layer = tokens * (4 * shape.hidden_size + 3 * shape.mlp_width_per_token) * BF16
    gathered = 2 * _layer_parameters(shape) * BF16
    if backward:
        inputs = shape.num_hidden_layers * tokens * shape.hidden_size * BF16
        logits = tokens * shape.vocab_size * 2 * BF16
        return _gib(inputs + one_layer + logits + gathered)
    logits = tokens * shape.vocab_size * (BF16 + FP32)
    return _gib(one_layer + logits + gathered)


def update_gib(plan: MemoryPlan) -> float:
    grads = 0 if plan.offload is Offload.ALL else FP32 * plan.shape.parameter_count / plan.shard_gpus
    return (resident_gib(plan) + _gib(grads) + VLLM_ASLEEP_GIB + OVERHEAD_GIB
            + activations_gib(plan.shape, plan.micro_batch, plan.tokens_per_sample, True))


def log_prob_gib(plan: MemoryPlan) -> float:
    return (resident_gib(plan) + VLLM_ASLEEP_GIB + OVERHEAD_GIB
            + activations_gib(plan.shape, plan.log_prob_micro_batch, plan.tokens_per_sample,
                              False))


def usable_gib(plan: MemoryPlan) -> float:
    """What a phase may plan for: the GPU's memory less MEMORY_MARGIN."""
    return plan.gpu_memory_gib * (1 - MEMORY_MARGIN)


def shortfalls(plan: MemoryPlan) -> list[tuple[str, float, float]]:
    """(phase, need GiB, have GiB) for every phase that does not fit; [] if all do. `have` is
    the usable memory (less MEMORY_MARGIN), or vLLM's own budget for vLLM."""
    found = []
    budget = vllm_budget_gib(plan)
    usable = usable_gib(plan)
    checks = (
        ("rollout", rollout_gib(plan), usable),
        ("vLLM", vllm_need_gib(plan), budget),
        ("update", update_gib(plan), usable),
        ("log-prob", log_prob_gib(plan), usable),
    )
    for phase, need, have in checks:
        if need > have:
            found.append((phase, need, have))
    return found


def fits(plan: MemoryPlan) -> bool:
    return not shortfalls(plan)
