"""The run's checks against the cluster and the model: what verl or vLLM would refuse hours
later on the GPUs, and what would not fit in their memory, each with its fix.

A problem that comes from a value the user did not set says so ("the default for this
cluster"): the defaults are derived (run_sizing.py) so that this does not happen, short of a
model that fits no setting on the cluster.
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from pydantic.alias_generators import to_camel

from components.facts.hardware import HardwareProfile
from components.forms.pulumi_forms import Key
from components.runspec.run_memory import MEMORY_MARGIN, MemoryPlan, Offload, fits, shortfalls
from components.runspec.run_sizing import divisors, shard_groups, tp_choices, vllm_context

if TYPE_CHECKING:
    from components.runspec.run_config import GrpoRunConfig

CONFIG_KEY = Key("job")  # `<project>:job`, under the project's name


def _key(field: str) -> str:
    return f"{CONFIG_KEY}.{to_camel(field)}"


def _divisors(n: int) -> str:
    found = [str(d) for d in range(1, n + 1) if n % d == 0]
    return ", ".join(found[:-1]) + f" or {found[-1]}" if len(found) > 1 else found[0]


def hardware_problems(
    run: GrpoRunConfig, profile: HardwareProfile, nodes: int, user_set: Set[str]
) -> list[str]:
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
            f"{_named(run, 'tensor_model_parallel_size', user_set)} must divide "
            f"the {gpus} GPUs per node of {target}: use {_divisors(gpus)}"
        )
    world = run.nnodes * run.n_gpus_per_node
    # verl builds a (world // fsdp_size, fsdp_size) device mesh (fsdp_workers.py:98-105), which
    # torch refuses unless the sizes multiply to the world size; 0 is no size at all.
    if run.fsdp_size == 0 or (0 < run.fsdp_size < world and world % run.fsdp_size):
        problems.append(
            f"{_named(run, 'fsdp_size', user_set)} must divide the run's {world} GPUs (HSDP "
            f"groups of equal size), or be -1 to shard over all: use -1 or "
            f"{', '.join(str(d) for d in divisors(world) if d < world)}"
        )
    return problems


def batch_problems(run: GrpoRunConfig, user_set: Set[str]) -> list[str]:
    """verl's batch-size checks for the FSDP strategies, with the numbers it will compute."""
    if str(run.extra_overrides.get("actor_rollout_ref.actor.use_dynamic_bsz")) == "True":
        return []  # verl skips these checks with dynamic batch sizes, so do we.
    problems = []
    n_gpus = run.nnodes * run.n_gpus_per_node
    samples = run.train_batch_size * run.rollout_n
    # verl/utils/config.py validate_config: real_train_batch_size % minimal_bsz (n_gpus) == 0.
    if samples % n_gpus:
        problems.append(
            f"{_named(run, 'train_batch_size', user_set)} x {_key('rollout_n')}="
            f"{run.rollout_n} = {samples} samples per step must be divisible by the {n_gpus} "
            f"GPUs of the run: use a multiple of {n_gpus} samples"
        )
    # verl/workers/config/actor.py ActorConfig.validate: train_batch_size >= ppo_mini_batch_size.
    if run.train_batch_size < run.ppo_mini_batch_size:
        problems.append(
            f"{_named(run, 'ppo_mini_batch_size', user_set)} exceeds "
            f"{_named(run, 'train_batch_size', user_set)}: use at most "
            f"{run.train_batch_size}"
        )
    # verl/workers/fsdp_workers.py ActorRolloutRefWorker.__init__ normalises the mini batch to
    # ppo_mini_batch_size * rollout.n // n_gpus per GPU, then asserts it is > 0 and divisible
    # by ppo_micro_batch_size_per_gpu.
    per_gpu = run.ppo_mini_batch_size * run.rollout_n // n_gpus
    if per_gpu == 0:
        problems.append(
            f"{_named(run, 'ppo_mini_batch_size', user_set)} x {_key('rollout_n')}="
            f"{run.rollout_n} leaves no sample for each of the {n_gpus} GPUs: use at least "
            f"{-(-n_gpus // run.rollout_n)}"
        )
    elif per_gpu % run.ppo_micro_batch_size_per_gpu:
        problems.append(
            f"{_named(run, 'ppo_micro_batch_size_per_gpu', user_set)} must "
            f"divide the per-GPU mini batch {_named(run, 'ppo_mini_batch_size', user_set)} x "
            f"rolloutN {run.rollout_n} // {n_gpus} GPUs = {per_gpu}: use "
            f"{_divisors(per_gpu)}"
        )
    return problems


def _named(run: GrpoRunConfig, field: str, user_set: Set[str]) -> str:
    """`key=value`, marked when the value is a default the user did not set."""
    value = getattr(run, field)
    text = f"{_key(field)}={getattr(value, 'value', value)}"
    return text if field in user_set else f"{text} (the default for this cluster)"


def memory_plan(run: GrpoRunConfig, profile: HardwareProfile, **changes) -> MemoryPlan:
    """The memory estimate's inputs for a resolved run with a known model."""
    gpus = run.nnodes * run.n_gpus_per_node
    shard = gpus if run.fsdp_size <= 0 or run.fsdp_size >= gpus else run.fsdp_size
    values = dict(
        shape=run.model, gpu_memory_gib=profile.gpu.memory_gib, shard_gpus=shard,
        tensor_parallel=run.tensor_model_parallel_size,
        gpu_memory_utilization=run.gpu_memory_utilization,
        micro_batch=run.ppo_micro_batch_size_per_gpu,
        log_prob_micro_batch=max(run.rollout_log_prob_micro_batch_size_per_gpu,
                                 run.ref_log_prob_micro_batch_size_per_gpu),
        tokens_per_sample=run.max_prompt_length + run.max_response_length,
        reference=run.use_kl_loss, offload=run.offload,
        context_tokens=vllm_context(run.model, run.max_prompt_length + run.max_response_length,
                                    run.extra_overrides),
    )
    return MemoryPlan(**{**values, **changes})


def model_problems(run: GrpoRunConfig, profile: HardwareProfile, user_set: Set[str]) -> list[str]:
    """The run against the model's shape (known only once the model check has read it)."""
    problems = []
    if "kl_coef" in user_set and not run.use_kl_loss:
        problems.append(
            f"{_key('kl_coef')}={run.kl_coef} has no effect with {_key('use_kl_loss')}=false: "
            "GRPO's KL is the actor's KL loss (verl dp_actor.py), the only thing klCoef weighs. "
            f"Set {_key('use_kl_loss')} to true, or remove {_key('kl_coef')}"
        )
    shape = run.model
    if shape is None:
        return problems
    tp = run.tensor_model_parallel_size
    valid = tp_choices(shape, min(run.n_gpus_per_node, profile.gpus_per_node))
    if tp not in valid and run.n_gpus_per_node % tp == 0:
        # vLLM refuses it at start: "Total number of attention heads (28) must be divisible by
        # tensor parallel size (8)" (vllm/config ModelConfig.verify_with_parallel_config).
        problems.append(
            f"{_named(run, 'tensor_model_parallel_size', user_set)} does not divide "
            f"{shape.model_id}'s {shape.num_attention_heads} attention heads and "
            f"{shape.num_key_value_heads} KV heads, which vLLM requires: use "
            f"{', '.join(map(str, valid))}"
        )
        return problems
    tokens = run.max_prompt_length + run.max_response_length
    if shape.max_position_embeddings and tokens > shape.max_position_embeddings:
        # vLLM refuses a max_model_len past the model's (vllm/config "User-specified
        # max_model_len ... is greater than the derived max_model_len"), and verl asks for
        # prompt + response.
        problems.append(
            f"{_key('max_prompt_length')}={run.max_prompt_length} + "
            f"{_key('max_response_length')}={run.max_response_length} = {tokens} tokens exceed "
            f"{shape.model_id}'s context of {shape.max_position_embeddings}: shorten them"
        )
        return problems
    plan = memory_plan(run, profile)
    short = shortfalls(plan)
    if short:
        problems.append(_memory_problem(run, profile, plan, short, user_set))
    return problems


def _memory_problem(run, profile, plan, short, user_set) -> str:
    phases = "; ".join(f"{phase} needs ~{need:.0f} GiB of {have:.0f}" for phase, need, have in short)
    fixes = []
    change = _smallest_change(run, profile, plan)
    if change:
        fixes.append("set " + " and ".join(f"{_key(k)}: {v}" for k, v in change.items()))
    gpus = run.nnodes * run.n_gpus_per_node
    for group in shard_groups(gpus, run.n_gpus_per_node):
        if group > plan.shard_gpus and fits(memory_plan(run, profile, shard_gpus=group)):
            fixes.append(f"set {_key('fsdp_size')}: {-1 if group == gpus else group}")
            break
    fixes.append(f"add nodes ({Key('gpuNodes')}): FSDP shards the weights and Adam over every GPU")
    return (
        f"{plan.shape.model_id} ({plan.shape.parameter_count / 1e9:.1f}B parameters) does not "
        f"fit on {gpus} x {profile.gpu.name} ({profile.gpu.memory_gib:g} GiB) with "
        f"{_named(run, 'offload', user_set)}, {_named(run, 'fsdp_size', user_set)}, "
        f"{_named(run, 'ppo_micro_batch_size_per_gpu', user_set)}, "
        f"{_named(run, 'gpu_memory_utilization', user_set)} (estimate, keeping "
        f"{MEMORY_MARGIN:.0%} of the GPU free: {phases}; docs/training.md): " + ", or ".join(fixes)
    )


def _smallest_change(run, profile, plan) -> dict[str, object] | None:
    """The first of: smaller micro batches, a smaller vLLM share, more offload (in that order of
    preference, combined as needed) with which every phase fits; None if none does."""
    levels = list(Offload)[list(Offload).index(plan.offload):]
    shares = [plan.gpu_memory_utilization] + [
        u / 100 for u in range(int(plan.gpu_memory_utilization * 100) - 5, 29, -5)
    ]
    micros = [d for d in sorted(divisors(plan.micro_batch), reverse=True)]
    log_probs = [d for d in sorted(divisors(plan.log_prob_micro_batch), reverse=True)]
    for offload in levels:
        for share in shares:
            for micro in micros:
                log_prob = next((d for d in log_probs if fits(memory_plan(
                    run, profile, offload=offload, gpu_memory_utilization=share,
                    micro_batch=micro, log_prob_micro_batch=d))), None)
                if log_prob is None:
                    continue
                change = {
                    "offload": offload.value if offload is not plan.offload else None,
                    "gpu_memory_utilization": share if share != plan.gpu_memory_utilization
                    else None,
                    "ppo_micro_batch_size_per_gpu": micro if micro != plan.micro_batch else None,
                }
                if log_prob != plan.log_prob_micro_batch:
                    change["rollout_log_prob_micro_batch_size_per_gpu"] = log_prob
                    change["ref_log_prob_micro_batch_size_per_gpu"] = log_prob
                return {k: v for k, v in change.items() if v is not None} or None
    return None
