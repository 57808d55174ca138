"""The critical path of `pulumi up`: the longest chain of waits to the GRPO job's first step.

    python -m tools.critical_path --stack a4 [--mode autopilot]

The engine creates a resource once everything it depends on is created: its explicit
`depends_on`, the resources behind its inputs, and its provider (the offline plan records all
three, tools/plan.py). With a duration per resource, the longest chain through that graph is
what `pulumi up` takes at best, however parallel the rest is. Durations come from DURATIONS
below; each says where its figure comes from, and most are assumptions to be replaced by
measurements of a real `pulumi up`.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Iterable

from tools import cli, mockrun, plan

FINAL = "pulumi-python:dynamic/verl-gke:GrpoRun"


@dataclass(frozen=True)
class Duration:
    minutes: float
    source: str  # a citation, or "assumption: <why>"


# By type, then by logical name where one type covers very different waits. Component resources
# take no time of their own; anything not listed takes DEFAULT.
DEFAULT = Duration(0.05, "assumption: an API call that returns at once")
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
    "kubernetes:batch/v1:Job staging-job": Duration(
        35, "assumption: first run; a ~25 GB image pull plus 66 GB of model to the bucket at "
        "about 50 MB/s through GCS FUSE, then GSM8K (README, expected timings)"
    ),
    "kubernetes:ray.io/v1:RayCluster": Duration(
        12, "assumption: the ~25 GB verl image pulled on every GPU node, then Ray starts"
    ),
    FINAL: Duration(
        15, "assumption: verl loads 66 GB of weights over GCS FUSE, vLLM starts, first step"
    ),
}


def duration(resource: mockrun.Registered) -> Duration:
    if not resource.custom:
        return Duration(0, "a component: no work of its own")
    return DURATIONS.get(
        f"{resource.type} {resource.name}", DURATIONS.get(resource.type, DEFAULT)
    )


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

    def done_at(urn: str) -> float:
        if urn not in finish:
            resource = custom[urn]
            deps = waits_for(resource, set(custom))
            latest = max(deps, key=done_at, default=None)
            before[urn] = latest
            finish[urn] = (done_at(latest) if latest else 0.0) + duration(resource).minutes
        return finish[urn]

    final = recording.one(final_type)
    done_at(final.urn)
    chain: list[Step] = []
    urn: str | None = final.urn
    while urn is not None:
        chain.append(Step(custom[urn], duration(custom[urn]), finish[urn]))
        urn = before[urn]
    return list(reversed(chain))


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


def report(stack: str, mode: str | None, chain: Iterable[Step], ray_ready: float) -> str:
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
        f"(the RayCluster, on the GPU branch, is ready after {ray_ready:.0f} min).",
        "",
              "Sources of the durations on this path:"]
    seen = set()
    for step in steps:
        source = step.duration.source
        key = re.sub(r"\s+", " ", f"{step.resource.type}: {source}")
        if step.duration.minutes and key not in seen:
            seen.add(key)
            lines.append(f"  - {key}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--mode", choices=["standard", "autopilot"])
    args = parser.parse_args(argv)
    _, recording = plan.run_program(args.stack, args.mode)
    ray_ready = critical_path(recording, RAY_CLUSTER)[-1].done_at
    print(report(args.stack, args.mode, critical_path(recording), ray_ready))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
