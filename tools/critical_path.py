"""The critical path of `pulumi up`: the longest chain of waits to the GRPO job's first step.

    python -m tools.critical_path --stack a4 [--mode autopilot]

The engine creates a resource once everything it depends on is created: its explicit
`depends_on`, the resources behind its inputs, and its provider (the offline plan records all
three, tools/plan.py). With a duration per resource, the longest chain through that graph is
what `pulumi up` takes at best, however parallel the rest is. Durations come from DURATIONS
below; each says where its figure comes from. Staging and the cluster check are estimates built
from sourced figures (their functions below); most others are assumptions to be replaced by
measurements of a real `pulumi up`.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from components.facts.expectations import EXPECTATIONS, MIN_READ_MBPS
from components.storage import model_staging
from tools import cli, mockrun, plan

FINAL = "pulumi-python:dynamic/verl-gke:GrpoRun"


@dataclass(frozen=True)
class Duration:
    minutes: float
    source: str  # a citation, or "assumption: <why>", or "estimate: <its figures and theirs>"


# --- Staging (components/storage/model_staging.py), an estimate from sourced figures. ---
# The default model, Qwen2.5-32B-Instruct: "about 66 GB" (TUTORIAL.md, "Model and data staging").
MODEL_GB = 66.0
# hf_transfer's own ceiling: "a power user tool, to go beyond ~500MB/s on very high bandwidth
# network" (huggingface/hf_transfer README). A figure the tool is built for, not a guarantee of
# the Hugging Face CDN.
HF_TRANSFER_MBPS = 500.0
# gcsfuse uploads an out-of-order written file in one stream when it is closed (the sidecar
# stages it first, model_staging.SIDECAR_ANNOTATIONS), so a worker downloads a file, then
# uploads it. Google publishes no per-stream figure; gcsfuse's benchmarks (GoogleCloudPlatform/
# gcsfuse docs/benchmarks.md) reach GB/s only with a hundred writers on an n2-standard-96.
GCS_STREAM_MBPS = 100.0
# The script's own pipeline (listing, thread pool, out-of-order writes, renames, marker) costs at
# most this much CPU per GB: `make bench` (bench/staging_bench.py) measures it with a fake hub and
# a local sink, script and hub together (0.5-1.8 s/GB, medians on this project's shared 2-core
# machine), and fails above this bound, so the figure stays true. CPU per GB, not the wall-clock
# rate, because the rate on a shared machine says more about its neighbours than about the script.
PIPELINE_CPU_S_PER_GB = 3.0
# What that CPU cost allows on the staging container's CPU request; TLS (hf_transfer) and the
# upload (the gcsfuse sidecar, its own CPU limit) are not in it.
PIPELINE_MBPS = (
    int(model_staging.CONTAINER_RESOURCES["requests"]["cpu"]) / PIPELINE_CPU_S_PER_GB * 1000
)
# The system pool's c2-standard-16 egress cap, 32 Gbps (cloud.google.com/compute/docs/
# network-bandwidth, per-VM maximum egress bandwidth), which the uploads to GCS count against:
# never the bound here, listed so it is seen to have been checked.
NODE_MBPS = 32_000 / 8


def staging_mbps(workers: int = model_staging.DOWNLOAD_WORKERS) -> float:
    """The staging Job's model throughput: `workers` files at once, each downloaded at its share
    of hf_transfer's ceiling and then uploaded in one GCS stream, capped by the node and by the
    script's own measured pipeline."""
    per_file = 1 / (1 / (HF_TRANSFER_MBPS / workers) + 1 / GCS_STREAM_MBPS)
    return min(workers * per_file, NODE_MBPS, PIPELINE_MBPS)


# Before the model: the ~0.4 GB python image from the in-region mirror, pip's pinned wheels
# from PyPI, verl's blobless clone and GSM8K (7.5k rows).
STAGING_SETUP = Duration(
    2, "assumption: image pull from the mirror, pinned wheels, verl clone, GSM8K"
)
# On Autopilot the pod first needs a node (no system pool waits for it), like a CPU pool's.
AUTOPILOT_NODE = Duration(
    5, "assumption: Autopilot provisions a general-purpose node, as a CPU pool boots"
)


def staging_duration(autopilot: bool) -> Duration:
    mbps = staging_mbps()
    model = MODEL_GB * 1000 / mbps / 60
    extra = AUTOPILOT_NODE.minutes if autopilot else 0.0
    return Duration(
        round(STAGING_SETUP.minutes + extra + model, 1),
        f"estimate: {STAGING_SETUP.minutes:g} min setup ({STAGING_SETUP.source})"
        + (f", {extra:g} min for a node ({AUTOPILOT_NODE.source})" if extra else "")
        + f", then {MODEL_GB:g} GB at {mbps:.0f} MB/s: {model_staging.DOWNLOAD_WORKERS} files at "
        f"once, each at 1/{model_staging.DOWNLOAD_WORKERS} of hf_transfer's ~{HF_TRANSFER_MBPS:g} "
        f"MB/s (huggingface/hf_transfer README) then one GCS upload stream at "
        f"{GCS_STREAM_MBPS:g} MB/s (assumption: no published per-stream figure); the script's "
        f"own pipeline allows {PIPELINE_MBPS:.0f} MB/s at its measured CPU cost (make bench) "
        "and the node "
        f"{NODE_MBPS:g} MB/s (cloud.google.com/compute/docs/network-bandwidth)",
    )


def cluster_check_duration() -> Duration:
    """The check's all-reduce and read at their floors, plus Ray starting its ranks."""
    defaults = _script_defaults(CLUSTER_CHECK_SCRIPT)
    # busbw = algbw x 2(n-1)/n (nccl-tests), so one all-reduce of S bytes at the floor takes
    # S x 2(n-1)/n / floor, less than 2 S / floor for any n.
    # The lowest floor of any target (one table of durations serves every stack): an upper
    # bound for each, and the text says whose floor it is.
    floor, lowest = min((e.min_busbw_gbs, t.value) for t, e in EXPECTATIONS.items())
    size_gb = defaults["size-mb"] * 2**20 / 1e9
    all_reduce_s = (defaults["iters"] + 2) * 2 * size_gb / floor  # two warm-ups
    read_s = defaults["read-mb"] / MIN_READ_MBPS
    startup = 1.0
    minutes = startup + (all_reduce_s + read_s) / 60
    return Duration(
        round(minutes, 1),
        f"estimate: {startup:g} min for Ray to start one rank per GPU and NCCL to connect "
        f"(assumption), {defaults['iters']}+2 all-reduces of {defaults['size-mb']} MiB at the "
        f"{floor:g} GB/s floor, the lowest of any target ({lowest}'s; "
        f"components/facts/expectations.py) = {all_reduce_s:.0f} s, and "
        f"{defaults['read-mb']} MiB read at the {MIN_READ_MBPS:g} MiB/s floor = {read_s:.0f} s "
        f"(components/check/cluster_check_script.py defaults): at most, a healthy cluster is "
        "faster",
    )


CLUSTER_CHECK_SCRIPT = (
    Path(__file__).resolve().parents[1] / "components/check/cluster_check_script.py"
)


def _script_defaults(path: Path) -> dict[str, int]:
    """The integer defaults of a script's `--flag` arguments, read from its source (not imported:
    the check script imports torch and ray)."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            first = node.args[0] if node.args else None
            flag = first.value if isinstance(first, ast.Constant) else None
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            value = default.value if isinstance(default, ast.Constant) else None
            if isinstance(flag, str) and isinstance(value, int):
                found[flag.lstrip("-")] = value
    return found


# By type, then by logical name where one type covers very different waits. Component resources
# take no time of their own; anything not listed takes DEFAULT.
DEFAULT = Duration(0.05, "assumption: an API call that returns at once")
STAGING_JOB = "kubernetes:batch/v1:Job staging-job"
CLUSTER_CHECK = "pulumi-python:dynamic/verl-gke:ClusterCheckRun"
DURATIONS: dict[str, Duration] = {
    "gcp:container/cluster:Cluster": Duration(
        10, "assumption: a regional Standard or Autopilot control plane, typically 8-12 min"
    ),
    "gcp:container/nodePool:NodePool": Duration(
        5, "assumption: CPU nodes boot and join in about 5 min"
    ),
    "gcp:container/nodePool:NodePool gpu-pool": Duration(
        15, "assumption: GPU VMs from a reservation, GPU driver installation and local-SSD RAID"
    ),
    "gcp:projects/iAMMember:IAMMember": Duration(
        2, "IAM: access changes typically take effect within 2 minutes "
        "(cloud.google.com/iam/docs/access-change-propagation)"
    ),
    "gcp:storage/bucketIAMMember:BucketIAMMember": Duration(
        2, "IAM: access changes typically take effect within 2 minutes "
        "(cloud.google.com/iam/docs/access-change-propagation)"
    ),
    "gcp:compute/routerNat:RouterNat": Duration(1, "assumption: NAT configuration on the router"),
    "gcp:compute/network:Network": Duration(0.5, "assumption: a global VPC operation"),
    "gcp:compute/subnetwork:Subnetwork": Duration(0.5, "assumption: a regional operation"),
    "gcp:compute/resourcePolicy:ResourcePolicy": Duration(0.5, "assumption: a regional operation"),
    "kubernetes:helm.sh/v3:Release": Duration(
        2, "assumption: chart install with the provider waiting for its workloads"
    ),
    "kubernetes:yaml/v2:ConfigFile": Duration(
        1, "assumption: the NCCL installer DaemonSet, applied (its pods run once GPU nodes exist)"
    ),
    STAGING_JOB: staging_duration(autopilot=False),
    CLUSTER_CHECK: cluster_check_duration(),
    "kubernetes:ray.io/v1:RayCluster": Duration(
        12, "assumption: the ~25 GB verl image pulled on every GPU node, then Ray starts"
    ),
    FINAL: Duration(
        15, "assumption: verl loads 66 GB of weights over GCS FUSE, vLLM starts, first step"
    ),
}


def duration(resource: mockrun.Registered, autopilot: bool = False) -> Duration:
    if not resource.custom:
        return Duration(0, "a component: no work of its own")
    key = f"{resource.type} {resource.name}"
    if key == STAGING_JOB and autopilot:
        return staging_duration(autopilot=True)
    if resource.type == RAY_CLUSTER and autopilot:
        # No GPU pool is created first: Autopilot provisions the GPU nodes for the pending pods.
        gpus, ray = DURATIONS["gcp:container/nodePool:NodePool gpu-pool"], DURATIONS[RAY_CLUSTER]
        return Duration(gpus.minutes + ray.minutes, f"{gpus.source}; then {ray.source}")
    return DURATIONS.get(key, DURATIONS.get(resource.type, DEFAULT))


def is_autopilot(recording: mockrun.Recording) -> bool:
    """Autopilot plans have no node pools of their own."""
    return not recording.of_type("gcp:container/nodePool:NodePool")


def waits_for(resource: mockrun.Registered, custom: set[str]) -> set[str]:
    """The custom resources the engine must have created before it creates `resource`."""
    edges = set(resource.dependencies)
    if resource.options.provider:
        edges.add(resource.options.provider)
    return edges & custom


@dataclass(frozen=True)
class Step:
    resource: mockrun.Registered
    duration: Duration
    done_at: float  # minutes after `pulumi up` starts


RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"


def critical_path(recording: mockrun.Recording, final_type: str = FINAL) -> list[Step]:
    """The longest chain of waits that ends at the resource of `final_type`."""
    custom = {r.urn: r for r in recording.resources if r.custom}
    finish: dict[str, float] = {}
    before: dict[str, str | None] = {}
    autopilot = is_autopilot(recording)

    def done_at(urn: str) -> float:
        if urn not in finish:
            resource = custom[urn]
            deps = waits_for(resource, set(custom))
            latest = max(deps, key=done_at, default=None)
            before[urn] = latest
            started = done_at(latest) if latest else 0.0
            finish[urn] = started + duration(resource, autopilot).minutes
        return finish[urn]

    final = recording.one(final_type)
    done_at(final.urn)
    chain: list[Step] = []
    urn: str | None = final.urn
    while urn is not None:
        chain.append(Step(custom[urn], duration(custom[urn], autopilot), finish[urn]))
        urn = before[urn]
    return list(reversed(chain))


def staging_step(recording: mockrun.Recording) -> Step | None:
    """The staging Job's step on its own branch (its duration, when it is done), or None when
    staging is skipped."""
    job, _, name = STAGING_JOB.partition(" ")
    if not any(r.name == name for r in recording.of_type(job)):
        return None
    return critical_path(recording, job)[-1]


def staging_done_at(recording: mockrun.Recording) -> float | None:
    """When the staging Job's branch ends, or None when staging is skipped."""
    step = staging_step(recording)
    return step.done_at if step else None


def depends_transitively(recording: mockrun.Recording, urn: str, on: str) -> bool:
    """Whether creating `urn` waits, directly or not, for `on`."""
    custom = {r.urn: r for r in recording.resources if r.custom}
    seen: set[str] = set()
    frontier = [urn]
    while frontier:
        current = frontier.pop()
        for dep in waits_for(custom[current], set(custom)):
            if dep == on:
                return True
            if dep not in seen:
                seen.add(dep)
                frontier.append(dep)
    return False


def report(
    stack: str,
    mode: str | None,
    chain: Iterable[Step],
    ray_ready: float,
    staging: Step | None = None,
) -> str:
    steps = list(chain)
    lines = [f"Critical path of `pulumi up` for {stack}{'/' + mode if mode else ''} "
             "(minutes after start):", ""]
    for step in steps:
        lines.append(
            f"  {step.done_at:6.1f}  +{step.duration.minutes:<5g} {step.resource.type} "
            f"{step.resource.name}"
        )
    lines += [
        "",
        f"Estimate to the first training step: {steps[-1].done_at:.0f} min "
        f"(the RayCluster, on the GPU branch, is ready after {ray_ready:.0f} min"
        + (f"; staging is done after {staging.done_at:.0f} min" if staging else "")
        + ").",
        "",
              "Sources of the durations on this path:"]
    seen = set()
    for step in steps:
        source = step.duration.source
        key = re.sub(r"\s+", " ", f"{step.resource.type}: {source}")
        if step.duration.minutes and key not in seen:
            seen.add(key)
            lines.append(f"  - {key}")
    if staging and staging.resource.urn not in {step.resource.urn for step in steps}:
        lines += ["", f"Staging, on its own branch: +{staging.duration.minutes:g} min, "
                      f"{staging.duration.source}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--mode", choices=["standard", "autopilot"])
    args = parser.parse_args(argv)
    _, recording = plan.run_program(args.stack, args.mode)
    ray_ready = critical_path(recording, RAY_CLUSTER)[-1].done_at
    chain = critical_path(recording)
    print(report(args.stack, args.mode, chain, ray_ready, staging_step(recording)))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
