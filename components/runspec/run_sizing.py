"""The run's batch and parallelism defaults, derived from the GPU count and the model.

The tutorial's values hold for its own cluster (2 x 8 or 4 x 4 GPUs, a 32B model). Here they
are the starting point and the floors; what grows with the cluster is derived so that every node
count the program accepts plans, and a GPU keeps enough samples per step to stay busy
(../shared/reference/TRAINING-REVIEW.md findings 2 and 10; `make step-model` shows the effect).
Only unset fields are derived: a value the user sets is kept and checked (run_checks.py).

Order, each step using the ones before it:
1. FSDP sharding group (HSDP) beyond 16 GPUs, the smallest group of whole nodes that fits;
2. vLLM's share of the GPU, the tutorial's 0.6 unless FSDP's resident state leaves less, and
   offload only when no share from 0.6 down to 0.3 fits without it;
3. rollout TP, the smallest that divides the heads, the KV heads and the node, and leaves half
   of vLLM's budget for the KV cache;
4. the batch (at least SAMPLES_PER_GPU_FLOOR samples per GPU), the mini batch (the tutorial's
   size, so the optimizer updates per epoch stay the tutorial's as the batch grows), then the
   micro batches: the largest that divide the per-GPU batch, fit in memory and stay at or
   below MICRO_BATCH_CAP.

The scale rule: what grows with the cluster is the rollout (samples per step); what learning
needs, the optimizer updates per epoch, stays fixed. The train batch grows with the GPUs (at
least 64 samples each), the mini batch stays the tutorial's 256 prompts (64 on a4x), so a GSM8K
epoch makes about 29 updates (116 on a4x) at every node count instead of 29 at 2 nodes and 3 at
32 (TRAINING-REVIEW-2.md finding 11); a larger cluster makes more updates per RL step (8 at 32
a4 nodes), the later ones on slightly older samples, which PPO's clipping bounds, as in verl's
recipes of several mini batches per step. At the default node count nothing changes.

Memory checks see vLLM's whole context (`vllm_context`): verl starts each vLLM server with the
model's max_position_embeddings unless rollout.max_model_len is set (components/facts/verl.py).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from components.facts import verl
from components.facts.hardware import HardwareProfile
from components.facts.models import DEFAULT_MODEL, ModelShape
from components.runspec.run_memory import MemoryPlan, Offload, fits, vllm_need_gib

if TYPE_CHECKING:
    from components.runspec.run_config import GrpoRunConfig

# The tutorial's batch: 256 prompts x 8 responses = 2048 samples, 128 per GPU on its clusters.
BASE_TRAIN_BATCH = 256
# Below this many samples per GPU and step, each micro batch's all-gather of the whole model
# dominates its compute (the review's finding 2: 2048 samples on 64 nodes = 4 per GPU). 64 keeps
# two micro batches of 32 per GPU; GSM8K's 7,473 prompts then still make 3 steps per epoch at
# 32 a4 nodes. A floor, not a target: more samples per GPU only help the GPUs.
SAMPLES_PER_GPU_FLOOR = 64
# The mini batch is the tutorial's for the target (HardwareProfile.tutorial_job: 256 of 256 on
# a4/a3u, 64 of 256 on a4x) at every node count: the optimizer updates per epoch stay the
# tutorial's however large the train batch grows (the scale rule above).
# The tutorial's largest micro batch (a4/a3u: 64). Past it the per-micro-batch all-gather is
# already a small share of the step (tools/step_model.py); bigger only costs memory.
MICRO_BATCH_CAP = 64
# FSDP shards over every GPU up to this many; beyond, over groups of whole nodes of at least
# this many GPUs (HSDP), replicated across groups, so a micro batch's gathers stay inside a
# group instead of crossing every node. Chosen with the checkpoint in view: every rank saves
# its shard (verl/utils/checkpoint/fsdp_checkpoint_manager.py:258-266), so a save is
# GPUs / group copies of the 12 bytes per parameter of state and each node writes 12P / group x
# its GPUs. A group of 16 (this value until TRAINING-REVIEW-2.md finding 8) made a 32B save
# 1.57 TB at 8 a4 nodes and 6.3 TB at 32, 131 s of writing per save on every node, 13 s of a
# ~32 s step at saveFreq 10 (`make step-model`); a group of 64 GPUs (8 a4/a3u nodes, 16 a4x)
# writes a quarter of that per node (33 s per save) and one copy up to 64 GPUs. The ring's
# bandwidth per rank is the node's NICs whatever the group (tools/step_model.py), so the larger
# group costs the gathers only the latency of a longer ring, which the step model leaves out.
HSDP_MIN_GPUS = 64
# The tutorial's vLLM share (gpu_memory_utilization), and the lowest worth trying: below it
# the KV cache of 256 sequences per replica no longer fits a 32B model's TP shard.
GPU_MEMORY_UTILIZATION = 0.6
MIN_GPU_MEMORY_UTILIZATION = 0.3
# The rollout TP leaves at least this share of vLLM's budget for the KV cache.
KV_SHARE = 0.5


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_choices(shape: ModelShape, gpus_per_node: int) -> list[int]:
    """TP sizes vLLM accepts for this model on one node: dividing the node's GPUs, the
    attention heads and the KV heads (vllm/config: "Total number of attention heads must be
    divisible by tensor parallel size"; KV heads below TP are replicated, above it divided)."""
    return [
        t for t in divisors(gpus_per_node)
        if shape.num_attention_heads % t == 0
        and (shape.num_key_value_heads % t == 0 or t % shape.num_key_value_heads == 0)
    ]


def shard_groups(gpus: int, gpus_per_node: int) -> list[int]:
    """HSDP group sizes in increasing order: whole nodes, dividing the GPUs; the last is all."""
    if gpus <= HSDP_MIN_GPUS:
        return [gpus]
    groups = [g for g in divisors(gpus) if g % gpus_per_node == 0 and g >= HSDP_MIN_GPUS]
    return groups or [gpus]


def prompts_per_step(gpus: int, rollout_n: int) -> int:
    """The default train batch: the tutorial's 256 prompts, or enough for the floor per GPU,
    rounded up so that the samples divide over the GPUs (verl validate_config)."""
    step = gpus // math.gcd(gpus, rollout_n)
    wanted = max(BASE_TRAIN_BATCH, -(-SAMPLES_PER_GPU_FLOOR * gpus // rollout_n))
    return -(-wanted // step) * step


def mini_batch(train_batch: int, gpus: int, rollout_n: int, optimizer_steps: int) -> int:
    """The tutorial's mini batch (its BASE_TRAIN_BATCH / optimizer steps per RL step), whatever
    the train batch: the smallest size at least that large whose samples divide over the GPUs
    and which divides the train batch; the train batch if none does."""
    step = gpus // math.gcd(gpus, rollout_n)
    target = max(1, BASE_TRAIN_BATCH // optimizer_steps)
    return next((m for m in range(-(-target // step) * step, train_batch, step)
                 if train_batch % m == 0), train_batch)


def vllm_context(shape: ModelShape, tokens: int, extra_overrides: dict) -> int:
    """The context vLLM is started with: rollout.max_model_len if the run sets it, else the
    model's max_position_embeddings (verl's default), else prompt + response."""
    given = extra_overrides.get(verl.ROLLOUT_MAX_MODEL_LEN)
    if given is not None and str(given).isdigit():
        return int(given)
    return shape.max_position_embeddings or tokens


def largest_divisor(n: int, cap: int, ok=lambda d: True) -> int:
    """The largest divisor of n at most cap for which ok holds; 1 if none does."""
    return next((d for d in sorted(divisors(n), reverse=True) if d <= cap and ok(d)), 1)


def derive(
    fields: dict, profile: HardwareProfile, gpus: int, gpus_per_node: int, shape: ModelShape
) -> dict:
    """Values for the unset (None) sizing fields of `fields`; set ones are kept as they are."""
    out = dict(fields)
    tokens = out["max_prompt_length"] + out["max_response_length"]
    n = out["rollout_n"]
    memory = profile.gpu.memory_gib
    if out["train_batch_size"] is None:
        out["train_batch_size"] = prompts_per_step(gpus, n)
    if out["ppo_mini_batch_size"] is None:
        out["ppo_mini_batch_size"] = mini_batch(
            out["train_batch_size"], gpus, n, profile.tutorial_job.optimizer_steps
        )
    per_gpu_mini = max(1, out["ppo_mini_batch_size"] * n // gpus)
    per_gpu_samples = max(1, out["train_batch_size"] * n // gpus)
    tps = tp_choices(shape, gpus_per_node) or [1]

    def plan(**changes) -> MemoryPlan:
        base = MemoryPlan(
            shape=shape, gpu_memory_gib=memory,
            shard_gpus=_shard(out["fsdp_size"], gpus),
            tensor_parallel=out["tensor_model_parallel_size"] or tps[-1],
            gpu_memory_utilization=out["gpu_memory_utilization"] or GPU_MEMORY_UTILIZATION,
            micro_batch=out["ppo_micro_batch_size_per_gpu"] or 1,
            log_prob_micro_batch=max(out["rollout_log_prob_micro_batch_size_per_gpu"] or 1,
                                     out["ref_log_prob_micro_batch_size_per_gpu"] or 1),
            tokens_per_sample=tokens, reference=bool(out["use_kl_loss"]),
            offload=out["offload"] or Offload.NONE, context_tokens=out["context_tokens"],
        )
        return replace(base, **changes)

    if out["fsdp_size"] is None:
        groups = shard_groups(gpus, gpus_per_node)
        group = next((g for g in groups if fits(plan(shard_gpus=g))), groups[-1])
        out["fsdp_size"] = -1 if group == gpus else group
    if out["offload"] is None or out["gpu_memory_utilization"] is None:
        # Prefer a smaller vLLM share to offloading: offload moves FSDP's state over PCIe on
        # every phase change, a smaller share only shrinks a KV cache the default run does not
        # fill (the review's appendix: 0.26M tokens in flight per replica of 1.5M-3.1M).
        steps = int(round((GPU_MEMORY_UTILIZATION - MIN_GPU_MEMORY_UTILIZATION) / 0.05)) + 1
        shares = ([out["gpu_memory_utilization"]] if out["gpu_memory_utilization"] else
                  [round(GPU_MEMORY_UTILIZATION - 0.05 * i, 2) for i in range(steps)])
        offloads = [out["offload"]] if out["offload"] else list(Offload)
        chosen = next(
            ((o, u) for o in offloads for u in shares
             if fits(plan(offload=o, gpu_memory_utilization=u))),
            (offloads[0], shares[0]),
        )
        out["offload"], out["gpu_memory_utilization"] = chosen
    if out["tensor_model_parallel_size"] is None:
        def roomy(t: int) -> bool:
            p = plan(tensor_parallel=t)
            return vllm_need_gib(p) <= KV_SHARE * p.gpu_memory_utilization * memory
        out["tensor_model_parallel_size"] = next((t for t in tps if roomy(t)), tps[-1])
    if out["ppo_micro_batch_size_per_gpu"] is None:
        out["ppo_micro_batch_size_per_gpu"] = largest_divisor(
            per_gpu_mini, MICRO_BATCH_CAP, lambda d: fits(plan(micro_batch=d))
        )
    for key in ("rollout_log_prob_micro_batch_size_per_gpu",
                "ref_log_prob_micro_batch_size_per_gpu"):
        if out[key] is None:
            out[key] = largest_divisor(
                per_gpu_samples, MICRO_BATCH_CAP,
                lambda d: fits(plan(log_prob_micro_batch=d)),
            )
    return out


def _shard(fsdp_size: int | None, gpus: int) -> int:
    return gpus if fsdp_size is None or fsdp_size <= 0 or fsdp_size >= gpus else fsdp_size


# The tutorial's values where a4/a3u and a4x differ, read from the target's row
# (HardwareProfile.tutorial_job). None means "the tutorial leaves the key out": it is not passed,
# so verl's own default applies.
PER_TARGET_DEFAULTS = ("val_before_train",)
# Derived from the cluster and the model when unset (`derive`).
SIZED_FIELDS = (
    "train_batch_size", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu",
    "rollout_log_prob_micro_batch_size_per_gpu", "ref_log_prob_micro_batch_size_per_gpu",
    "tensor_model_parallel_size", "gpu_memory_utilization", "fsdp_size", "offload",
)


def resolve(run: GrpoRunConfig, profile: HardwareProfile, nodes: int) -> GrpoRunConfig:
    """The run with every unset field filled from the tutorial, the hardware and the model."""
    unset = {
        key: getattr(profile.tutorial_job, key)
        for key in PER_TARGET_DEFAULTS
        if getattr(run, key) is None
    }
    gpus_per_node = run.n_gpus_per_node or profile.gpus_per_node
    nnodes = run.nnodes or nodes
    hardware = {"nnodes": nnodes, "n_gpus_per_node": gpus_per_node}
    fields = {key: getattr(run, key) for key in (
        *SIZED_FIELDS, "max_prompt_length", "max_response_length", "rollout_n", "use_kl_loss",
    )}
    shape = run.model or DEFAULT_MODEL
    fields["context_tokens"] = vllm_context(
        shape, run.max_prompt_length + run.max_response_length, run.extra_overrides)
    sized = derive(fields, profile, nnodes * gpus_per_node, min(gpus_per_node,
                   profile.gpus_per_node), shape)
    resolved = run.model_copy(update={**unset, **hardware, **{k: sized[k] for k in SIZED_FIELDS}})
    resolved._model = run.model
    return resolved
