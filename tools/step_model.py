"""A step-time and GPU-hour model of a default GRPO run, per stack and node count: an ESTIMATE.

    python -m tools.step_model [--stack a4|<any stack with a Pulumi.<stack>.yaml>] [--nodes 2 8 32]

For each stack and node count it prints two rows: the tutorial's settings (as the tutorial
gives them for its own cluster, refused where verl would refuse them) and this program's
defaults (components/runspec/run_sizing.py), with the modelled time per step of rollout, compute,
collectives and checkpoint writes, and the GPU-hours of a default run (GSM8K, 2 epochs). It is
the justification of the defaults, not a benchmark: every rate is a datasheet peak times a stated
efficiency, every count follows verl's code, and nothing here was measured on a GPU.

Formulas (per step; P parameters, S = train batch x n samples, G GPUs, s = S / G per GPU):
- rollout: vLLM decodes max_response_length steps per wave of at most max_num_seqs sequences
  per replica (G / TP replicas); a decode step reads the weight shard (2P / TP bytes) and the
  batch's KV cache from HBM, or is compute-bound at 2P x batch / TP FLOPs, whichever is longer,
  plus two TP all-reduces per layer at ALLREDUCE_LATENCY_S. Prefill is 2P x prompt FLOPs.
- compute: 2P FLOPs per token forward, 8P for a trained token (forward, backward, and the
  recompute of gradient checkpointing); attention's own FLOPs (~3% at 1k tokens) are left out.
  Passes: old log-probs, reference log-probs (with the KL loss), the update.
- collectives (FSDP2 reshards after every forward and verl has no gradient accumulation, so
  every micro batch gathers the whole model): per forward an all-gather of 2P bytes over the
  sharding group, per backward one more and a reduce-scatter of 4P bytes of fp32 gradients,
  with HSDP an all-reduce of the group's gradient shard across groups; a ring moves (g-1)/g of
  the data through each GPU's slowest link: NVLink inside its domain (a node; an NVL72 rack
  with MNNVL); across domains the node's RDMA NICs, one channel each, so a rank's share runs at
  nics x the line rate (components/facts/expectations.py network_busbw_bound_gbs), capped by
  NVLink. Each phase takes the longer of its compute and its
  collectives (FSDP prefetches the next layer's gather during this layer's compute).
- weight sync: one all-gather of 2P bytes per step, FSDP to vLLM.
- checkpoint: every rank saves its own shard of the fp32 weights and Adam ("every rank will
  save its own model and optim shard", verl/utils/checkpoint/fsdp_checkpoint_manager.py:258-266
  at the pinned ref), 12P / shard bytes each; under HSDP the G / shard groups hold the same
  state, so a save is 12P x G / shard bytes (TRAINING-REVIEW-2.md finding 8: 1.57 TB at 8 a4
  nodes), and each node writes 12P / shard x its GPUs at CHECKPOINT_GBPS_PER_NODE, all nodes at
  once, every save_freq steps. Only a whole-cluster shard (fsdpSize -1) spreads one copy.
- run: floor(7,473 GSM8K train prompts / train batch) steps per epoch (verl drops the last
  partial batch, verl/trainer/ppo/v1/trainer_base.py:568), 2 epochs; GPU-hours = steps x step
  time x G; optimizer updates = steps x train batch / mini batch.
- a MoE model: weights, gathers and checkpoints count every expert (P); per-token FLOPs count
  the parameters a token passes through (ModelShape.active_parameter_count).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from components.facts.expectations import EXPECTATIONS
from components.facts.hardware import PROFILES, HardwareProfile, Target, profile
from components.facts.models import DEFAULT_MODEL, ModelShape
from components.runspec.run import GrpoRunConfig, ResolvedRun, resolve_run
from components.runspec.run_env import runtime_env
from components.runspec.run_memory import kv_bytes_per_token

NODE_COUNTS = (2, 8, 32)
# Assumptions, each an efficiency on a datasheet peak (components/facts/hardware.py GpuFacts).
MFU = 0.40  # training and log-prob passes: typical FSDP dense-model utilisation
DECODE_HBM_EFFICIENCY = 0.6  # vLLM decode reaches ~60% of HBM bandwidth on weight reads
DECODE_MFU = 0.3  # when a large decode batch is compute-bound instead
COLLECTIVE_EFFICIENCY = 0.85  # ring all-gather / reduce-scatter bus bandwidth vs line rate
ALLREDUCE_LATENCY_S = 15e-6  # one small NVLink all-reduce inside a node (TP > 1)
CHECKPOINT_GBPS_PER_NODE = 1.5  # the review's 1-2 GB/s per node through the gcsfuse sidecar
# GSM8K: 7,473 training problems (openai/gsm8k, main/train); tokens per sample as the review
# takes them: a ~150-token chat prompt and a ~300-token answer (responses cap at 512).
DATASET_PROMPTS = 7473
MEAN_TOKENS = 450
MEAN_PROMPT_TOKENS = 150
# vLLM's per-replica batch: verl's rollout.max_num_seqs (verl/trainer/config/
# _generated_ppo_trainer.yaml:265 at the pinned ref; 256 at b178a3cd5).
MAX_NUM_SEQS = 1024


@dataclass(frozen=True)
class Settings:
    """What the model needs of a run, resolved."""

    train_batch: int
    mini_batch: int
    rollout_n: int
    micro: int
    log_prob_micro: int
    ref_micro: int
    tp: int
    shard: int  # FSDP group size
    kl: bool
    save_freq: int
    epochs: int
    response_len: int
    mnnvl: bool  # A4X FSDP collectives over multi-node NVLink (NCCL cuMem on)


def tutorial(hw: HardwareProfile) -> GrpoRunConfig:
    """The tutorial's job for the target (its row's `tutorial_job`; TUTORIAL.md, "GrpoJob"):
    FSDP over every GPU, no offload, vLLM at 0.6 of the GPU, on every target."""
    job = hw.tutorial_job
    return GrpoRunConfig(
        train_batch_size=job.train_batch_size, ppo_mini_batch_size=job.ppo_mini_batch_size,
        ppo_micro_batch_size_per_gpu=job.ppo_micro_batch_size_per_gpu,
        tensor_model_parallel_size=job.tensor_model_parallel_size,
        rollout_log_prob_micro_batch_size_per_gpu=job.rollout_log_prob_micro_batch_size_per_gpu,
        ref_log_prob_micro_batch_size_per_gpu=job.ref_log_prob_micro_batch_size_per_gpu,
        use_kl_loss=job.use_kl_loss, fsdp_size=-1, offload="none", gpu_memory_utilization=0.6,
    )


def program_mnnvl(hw: HardwareProfile) -> bool:
    """Whether the program's job runs FSDP over multi-node NVLink: its runtime env turns NCCL's
    cuMem on (components/runspec/run_env.py, NCCL_CUMEM_ENABLE=1 for a row whose NVLink domain
    spans nodes), without which NCCL does not use MNNVL (verl up to v0.7 set it off)."""
    env = runtime_env(hw, hw.default_nodes)["env_vars"]
    return env.get("NCCL_CUMEM_ENABLE") == "1"


def settings(run: ResolvedRun, mnnvl: bool) -> Settings:
    r = run.settings
    gpus = run.world_size
    shard = gpus if r.fsdp_size <= 0 or r.fsdp_size >= gpus else r.fsdp_size
    return Settings(r.train_batch_size, r.ppo_mini_batch_size, r.rollout_n, r.ppo_micro_batch_size_per_gpu,
                    r.rollout_log_prob_micro_batch_size_per_gpu,
                    r.ref_log_prob_micro_batch_size_per_gpu, r.tensor_model_parallel_size,
                    shard, r.use_kl_loss, r.save_freq, r.total_epochs, r.max_response_length,
                    mnnvl)


def _link_gbs(hw: HardwareProfile, group: int, mnnvl: bool) -> float:
    """Per-GPU bandwidth of a ring over `group` GPUs: NVLink inside a domain, else RDMA."""
    domain = hw.gpu.nvlink_domain_gpus if (mnnvl or hw.gpu.nvlink_domain_gpus <= hw.gpus_per_node) \
        else hw.gpus_per_node
    if group <= min(domain, hw.gpu.nvlink_domain_gpus):
        return hw.gpu.nvlink_gbs * COLLECTIVE_EFFICIENCY
    return min(hw.gpu.nvlink_gbs, EXPECTATIONS[hw.target].network_busbw_gbs) * COLLECTIVE_EFFICIENCY


def _ring_s(nbytes: float, group: int, gbs: float) -> float:
    return 0.0 if group <= 1 else nbytes * (group - 1) / group / (gbs * 1e9)


def step(hw: HardwareProfile, nodes: int, s: Settings, shape: ModelShape) -> dict[str, float]:
    """Seconds per step by part (an estimate; see the module docstring)."""
    p = shape.parameter_count
    active = shape.active_parameter_count
    gpus = nodes * hw.gpus_per_node
    samples = s.train_batch * s.rollout_n
    per_gpu = samples / gpus
    flops = hw.gpu.bf16_dense_tflops * 1e12
    # rollout
    replicas = gpus // s.tp
    seqs = samples / replicas
    waves = math.ceil(seqs / MAX_NUM_SEQS)
    batch = min(seqs, MAX_NUM_SEQS)
    context = MEAN_PROMPT_TOKENS + s.response_len / 2
    read = (2 * p / s.tp + batch * context * kv_bytes_per_token(shape, s.tp))
    decode = max(read / (hw.gpu.hbm_tbps * 1e12 * DECODE_HBM_EFFICIENCY),
                 2 * active * batch / s.tp / (flops * DECODE_MFU))
    decode += 2 * shape.num_hidden_layers * ALLREDUCE_LATENCY_S if s.tp > 1 else 0
    prefill = 2 * active * seqs * MEAN_PROMPT_TOKENS / s.tp / (flops * MFU)
    rollout = waves * s.response_len * decode + prefill
    # compute and collectives, per phase
    tokens = per_gpu * MEAN_TOKENS
    gbs = _link_gbs(hw, s.shard, s.mnnvl)
    gather = _ring_s(2 * p, s.shard, gbs)
    scatter = _ring_s(4 * p, s.shard, gbs)
    replicas_dp = gpus // s.shard
    across = _link_gbs(hw, gpus, s.mnnvl)
    sync = 2 * _ring_s(4 * p / s.shard, replicas_dp, across)  # all-reduce = 2 x ring
    phases = {
        "log_prob": (2 * active * tokens / (flops * MFU), per_gpu / s.log_prob_micro * gather),
        "ref": ((2 * active * tokens / (flops * MFU), per_gpu / s.ref_micro * gather) if s.kl
                else (0.0, 0.0)),
        "update": (8 * active * tokens / (flops * MFU),
                   per_gpu / s.micro * (2 * gather + scatter + sync)),
    }
    compute = sum(c for c, _ in phases.values())
    comm = sum(m for _, m in phases.values()) + gather  # + the weight sync to vLLM
    overlapped = sum(max(c, m) for c, m in phases.values()) + gather
    per_node = 12 * p / s.shard * hw.gpus_per_node
    save_s = per_node / (CHECKPOINT_GBPS_PER_NODE * 1e9)
    return {"rollout": rollout, "compute": compute, "collectives": comm,
            "checkpoint": save_s / s.save_freq, "save_s": save_s,
            "save_bytes": 12 * p * gpus / s.shard,
            "step": rollout + overlapped + save_s / s.save_freq}


def run_row(hw: HardwareProfile, nodes: int, run: GrpoRunConfig, mnnvl: bool,
            shape: ModelShape = DEFAULT_MODEL) -> dict:
    """The step model of `run` on `nodes` of `hw` for a model of `shape` (`row_of`)."""
    return row_of(resolve_run(run, hw, nodes, shape=shape), mnnvl)


def row_of(run: ResolvedRun, mnnvl: bool) -> dict:
    """The step model of a resolved run, for its model (the default model's shape if unknown),
    or the first reason it is refused."""
    if run.problems:
        return {"refused": run.problems[0]}
    hw, nodes = run.profile, run.nodes
    s = settings(run, mnnvl)
    times = step(hw, nodes, s, run.model or DEFAULT_MODEL)
    steps = DATASET_PROMPTS // s.train_batch * s.epochs
    gpus = nodes * hw.gpus_per_node
    return {**times, "settings": s, "steps": steps,
            "updates": steps * (s.train_batch // s.mini_batch),
            "gpu_hours": steps * times["step"] * gpus / 3600,
            "hours": steps * times["step"] / 3600}


def counts(hw: HardwareProfile, wanted: tuple[int, ...]) -> list[int]:
    """The wanted node counts the target accepts, its default, and its maximum if one of the
    wanted counts is beyond it."""
    found = {n for n in wanted if n <= hw.max_nodes} | {hw.default_nodes}
    if any(n > hw.max_nodes for n in wanted):
        found.add(hw.max_nodes)
    return sorted(found)


def stack_config(stack: str, inputs=None):
    """The validated config of any stack (`Pulumi.<stack>.yaml`, or `inputs` already read from
    it): its target, node count and job, as the program would read them. StackFileError for a
    missing file and ConfigError for bad config, each naming the key and the fix (exit 2)."""
    from components.schema import config as config_module
    from tools import plan

    inputs = inputs or plan.stack_inputs(stack)
    return config_module.load(inputs.config, inputs.secret_keys, stack, plan.project_name())


def stack_row(config, nodes: int | None = None) -> dict:
    """The step model of a stack's own job (`stack_config`) at its node count (or `nodes`), with
    multi-node NVLink where its runtime env turns it on: what `make step-model STACK=` prints
    and `make cost` multiplies. At its own node count, the stack's run as the config resolved it
    (StackConfig.runs); at another, that run resolved for those nodes."""
    hw = config.hardware
    (run,) = config.runs.values()
    if nodes not in (None, config.nodes):
        run = resolve_run(run.config, hw, nodes, run.model_revision)
    return row_of(run, program_mnnvl(hw))


def _line(stack: str, nodes: int, hw: HardwareProfile, label: str, row: dict) -> str:
    head = f"{stack:5} {nodes:>5} {nodes * hw.gpus_per_node:>4} {label:9}"
    if "refused" in row:
        return f"{head} refused: {row['refused']}"  # whole: the reason ends with its fix
    s = row["settings"]
    return (
        f"{head} {s.train_batch:>5} {s.micro:>5} {s.log_prob_micro:>3} {s.tp:>2} "
        f"{s.shard:>5} {row['rollout']:>8.1f} {row['compute']:>8.1f} "
        f"{row['collectives']:>7.1f} {row['checkpoint']:>5.1f} {row['step']:>7.1f} "
        f"{row['steps']:>5} {row['updates']:>5} {row['save_bytes'] / 1e12:>6.2f} "
        f"{row['gpu_hours']:>7.1f}"
    )


def report(stacks: list[str], nodes: tuple[int, ...], configs: dict | None = None) -> str:
    """The table for `stacks`. A stack with a config in `configs` (stack -> `stack_config`) is
    its own job on its target, at `nodes` if given, else at its node count; any other stack is a
    target's name, its tutorial job and the defaults at `nodes` (and its default count)."""
    configs = configs or {}
    lines = [
        "ESTIMATE - a model from datasheet peaks, stated efficiencies and verl's pass counts,",
        f"not a measurement (tools/step_model.py says where each figure comes from). Model: "
        f"{DEFAULT_MODEL.model_id}, GSM8K, the job's epochs (default 2).",
        "",
        f"{'stack':5} {'nodes':>5} {'GPUs':>4} {'settings':9} {'batch':>5} {'micro':>5} "
        f"{'lp':>3} {'TP':>2} {'shard':>5} {'rollout':>8} {'compute':>8} {'comm':>7} "
        f"{'ckpt':>5} {'step s':>7} {'steps':>5} {'upd':>5} {'TB/sv':>6} {'GPU-h':>7}",
    ]
    for stack in stacks:
        if stack in configs:
            config = configs[stack]
            for n in nodes or (config.nodes,):
                lines.append(_line(stack, n, config.hardware, "stack", stack_row(config, n)))
            continue
        hw = profile(stack)
        mnnvl = program_mnnvl(hw)
        variants = [("tutorial", tutorial(hw), False), ("default", GrpoRunConfig(), mnnvl)]
        if mnnvl:
            variants.append(("no-mnnvl", GrpoRunConfig(), False))
        for n in counts(hw, nodes or NODE_COUNTS):
            for label, run, with_mnnvl in variants:
                lines.append(_line(stack, n, hw, label, run_row(hw, n, run, with_mnnvl)))
    lines += [
        "",
        "tutorial: the tutorial's job as written for 2 x 8 / 4 x 4 GPUs, with "
        "NCCL_CUMEM_ENABLE=0 as verl up to v0.7 set it (A4X FSDP over RDMA).",
        "default: this program's derived defaults; A4X with NCCL_CUMEM_ENABLE=1 (FSDP over "
        "multi-node NVLink).",
        "no-mnnvl: the defaults with NCCL_CUMEM_ENABLE=0 (A4X), as verl up to v0.7 set it.",
        "stack: the stack file's own job (its target, `job` settings and, unless NODES is given, "
        "its node count), as `make cost` models it.",
        "step s = rollout + per phase max(compute, comm) + weight sync + checkpoint share.",
        "upd = optimizer updates in the run (steps x batch / mini batch); TB/sv = bytes of one "
        "save, every rank's shard (x GPUs / shard under HSDP).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append",
                        help="a stack (repeatable): any Pulumi.<stack>.yaml, modelled with its own "
                        "target, node count and job; default: every target's tutorial job and "
                        "defaults")
    parser.add_argument("--nodes", type=int, nargs="+",
                        help=f"node counts; default: a stack's own, else {NODE_COUNTS}")
    args = parser.parse_args(argv)
    stacks = args.stack or [t.value for t in PROFILES]
    # A stack file (`dev`) is read and checked as the program would read it; StackFileError and
    # ConfigError (exit 2, tools/cli.py) name the file or key and the fix.
    configs = {stack: stack_config(stack) for stack in args.stack or ()}
    print(report(stacks, tuple(args.nodes or ()), configs))
    return 0


if __name__ == "__main__":
    from tools import cli

    sys.exit(cli.run(main))
