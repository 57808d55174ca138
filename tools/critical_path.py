"""The critical path of `pulumi up`: the longest chain of waits to the GRPO job's first step.

    python -m tools.critical_path --stack a4 [--mode autopilot] [--warm-image]
        [--measured <stack outputs or timeline JSON> [--started <ISO time of `up`'s start>]]

The engine creates a resource once everything it depends on is created: its explicit
`depends_on`, the resources behind its inputs, and its provider (the offline plan records all
three, tools/plan.py). The longest chain through that graph, with a duration per resource, is
what `pulumi up` takes at best, however parallel the rest is.

A resource's duration is a list of phases, each a figure and its source (a citation, an
"estimate:" naming its figures, or an "assumption:" where no source exists). The three long
boxes are split where their parts are known: the GPU pool (capacity, VMs to registered), the
RayCluster (GPU driver, image, Ray start) and the run (imports, the weight read at the cluster
check's floor, FSDP, vLLM, validation, the first step from tools/step_model.py). The figures
come from what the plan contains (`Facts`): a pre-pull DaemonSet (PREPULL) starts the image
at node registration, an image-streaming prewarm (PREWARM) turns the first pull into a stream,
the cluster's default pool size sets its delete, the capacity mode and its timeouts set the
wait, and the code's own constants (the check's read floor, staging's parallelism) set the
read and staging. A lever the plan lacks costs what it would save: the figure says which.

`--measured` replaces the model's figures by the timestamps a real `up` recorded (the job's
`timeline` output, components/run/timeline.py): one measured segment per pair of milestones,
each replacing the phases it covers (docs/cost.md, "Expected timings").
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from components.facts import expectations
from components.storage import model_staging
from tools import cli, mockrun, plan
# The model's figures and phases, re-exported: bench/staging_bench.py, tools/cost.py and the
# tests name them from here.
from tools.path_figures import (  # noqa: F401
    FINAL, RAY_CLUSTER, GPU_POOL, CLUSTER, DAEMON_SET, PREPULL, PREWARM, CLUSTER_UP,
    REGISTERED, ALLOCATABLE, PULLED, RAY_READY, JOB_STARTED, FIRST_STEP, MILESTONES, Phase,
    Duration, MODEL_GB, HF_TRANSFER_MBPS, PIPELINE_CPU_S_PER_GB, PIPELINE_MBPS, NODE_MBPS,
    staging_mbps, staging_duration, CLUSTER_CHECK_SCRIPT, _script_defaults,
    cluster_check_duration, DEFAULT_ZONES, GPU_VMS, DRIVER, FIRST_PULL, STREAMED,
    PROVIDER_POOL_TIMEOUT_MIN, LAZY_READS, STAGING_JOB, CLUSTER_CHECK, DURATIONS,
)
from tools.path_phases import (  # noqa: F401
    Facts, _is_prepull, capacity_phase, cluster_duration, duration, facts, gpu_pool_duration,
    image_phase, is_autopilot, ray_cluster_duration, run_duration, streamed,
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


class Walk:
    """Finish times of every custom resource of a plan, and the chain behind each."""

    def __init__(self, recording: mockrun.Recording, f: Facts | None = None) -> None:
        self.recording = recording
        self.facts = f or facts(recording)
        self.custom = {r.urn: r for r in recording.resources if r.custom}
        self.finish: dict[str, float] = {}
        self.boxes: dict[str, Duration] = {}
        self.before: dict[str, str | None] = {}

    def done_at(self, urn: str) -> float:
        if urn not in self.finish:
            resource = self.custom[urn]
            deps = waits_for(resource, set(self.custom))
            latest = max(deps, key=self.done_at, default=None)
            self.before[urn] = latest
            started = self.done_at(latest) if latest else 0.0
            if resource.type == RAY_CLUSTER:
                box = ray_cluster_duration(
                    self.facts, started, self._end(lambda r: f"{r.type} {r.name}" == GPU_POOL),
                    self._end(_is_prepull_resource), self._end(lambda r: r.name == PREWARM))
            else:
                box = duration(resource, self.facts)
            self.boxes[urn] = box
            self.finish[urn] = round(started + box.minutes, 3)
        return self.finish[urn]

    def _end(self, match: Callable[[mockrun.Registered], bool]) -> float | None:
        found = [urn for urn, r in self.custom.items() if match(r)]
        return max((self.done_at(urn) for urn in found), default=None)

    def chain(self, final_type: str = FINAL, name: str | None = None) -> list[Step]:
        final = self.recording.one(final_type, name)
        self.done_at(final.urn)
        steps: list[Step] = []
        urn: str | None = final.urn
        while urn is not None:
            steps.append(Step(self.custom[urn], self.boxes[urn], self.finish[urn]))
            urn = self.before[urn]
        return list(reversed(steps))


def _is_prepull_resource(resource: mockrun.Registered) -> bool:
    return resource.type == DAEMON_SET and _is_prepull(resource)


def critical_path(recording: mockrun.Recording, final_type: str = FINAL,
                  f: Facts | None = None) -> list[Step]:
    """The longest chain of waits that ends at the resource of `final_type`."""
    return Walk(recording, f).chain(final_type)


def staging_step(recording: mockrun.Recording, f: Facts | None = None) -> Step | None:
    """The staging Job's step on its own branch (its duration, when it is done), or None when
    staging is skipped."""
    job, _, name = STAGING_JOB.partition(" ")
    if not any(r.name == name for r in recording.of_type(job)):
        return None
    return Walk(recording, f).chain(job, name)[-1]


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


def levers(f: Facts) -> list[str]:
    """Each lever the model reads, whether the plan has it, and what it moves."""
    read_s = MODEL_GB * 1e9 / (expectations.MIN_READ_MBPS * 2**20)
    rows = [
        f"{PREPULL} (DaemonSet): {'in the plan' if f.prepull else 'not in the plan'}: "
        + ("the GPU nodes pull the image from their registration, under the driver"
           + (", after its system-pool pod made the repository fetch it" if f.prepull_head
              else "") if f.prepull
           else "the pull starts only once the pods are scheduled, after the driver"),
        f"{PREWARM}: {'in the plan' if f.prewarm else 'not in the plan'}: "
        + ("the image is streamed from a prewarmed cache" if f.prewarm and f.streaming else
           "no stream on a fresh project: the image is pulled"),
        f"default pool: {f.default_pool_nodes} node(s) booted and deleted inside the cluster's "
        "create" if not f.autopilot else "default pool: none on Autopilot",
        f"read floor: expectations.MIN_READ_MBPS = {expectations.MIN_READ_MBPS:g} MiB/s bounds the "
        f"{MODEL_GB:g} GB weight read at {read_s / 60:.1f} min",
        f"staging: model_staging.DOWNLOAD_WORKERS = {model_staging.DOWNLOAD_WORKERS} files at "
        f"once, {staging_mbps():.0f} MB/s",
    ]
    if f.capacity == "spot":
        rows.append("spot: GPU pool create timeout "
                    + (f"{f.pool_timeout_min:g} min (the plan's)" if f.pool_timeout_min else
                       f"not set: the provider's {PROVIDER_POOL_TIMEOUT_MIN:g} min"))
    elif f.pool_timeout_min:
        rows.append(f"GPU pool create timeout: {f.pool_timeout_min:g} min (the plan's)")
    if f.capacity in ("flex-start", "autopilot") and f.ray_timeout_min:
        rows.append(f"RayCluster wait: {f.ray_timeout_min:g} min (pulumi.com/timeoutSeconds)")
    return rows


def report(stack: str, mode: str | None, chain: Iterable[Step], ray_ready: float,
           staging: Step | None = None, f: Facts | None = None) -> str:
    steps = list(chain)
    lines = [f"Critical path of `pulumi up` for {stack}{'/' + mode if mode else ''} "
             "(minutes after start; each phase with its figure and its source):", ""]
    for step in steps:
        lines.append(f"  {step.done_at:6.1f}  +{step.duration.minutes:<6g}{step.resource.type} "
                     f"{step.resource.name}")
        if len(step.duration.phases) > 1 or (step.duration.phases
                                              and step.duration.phases[0].what):
            for phase in step.duration.phases:
                lines.append(f"{'':17}+{phase.minutes:<6g}{phase.what}: {phase.source}")
        elif step.duration.phases and step.duration.minutes:
            lines.append(f"{'':23}{step.duration.phases[0].source}")
    total = steps[-1].done_at
    wait = f and capacity_phase(f)
    lines += [
        "",
        f"Estimate to the first training step: {total:.1f} min"
        + (f" with {f.capacity} capacity available" if wait else "")
        + f" (the RayCluster is ready after {ray_ready:.1f} min"
        + (f"; staging is done after {staging.done_at:.1f} min" if staging else "") + ").",
    ]
    if wait:
        lines.append(f"Capacity: {wait.source}.")
    if staging and staging.resource.urn not in {step.resource.urn for step in steps}:
        lines += ["", f"Staging, on its own branch: +{staging.duration.minutes:g} min, "
                      f"{staging.duration.source}"]
    if f is not None:
        lines += ["", "Levers read from the plan and the code:"]
        lines += [f"  - {row}" for row in levers(f)]
        opened = list(dict.fromkeys(
            f"{p.what or s.resource.name}: {p.minutes:g} min" for s in steps
            for p in s.duration.phases if p.minutes and p.source.startswith("assumption")))
        lines += ["", "Open assumptions on this path (to replace with a measured `up`, "
                      "docs/cost.md):"]
        lines += [f"  - {what}" for what in opened]
    return "\n".join(lines)


# --- Measured figures: the job's `timeline` output of a real `up`. ---


def read_timeline(path: Path) -> dict[str, str | None]:
    """The timeline from `pulumi stack output --json` (its `job.timeline`) or from a file
    holding the timeline itself."""
    document = json.loads(path.read_text())
    timeline = (document.get("job") or {}).get("timeline") if "job" in document else document
    if not isinstance(timeline, dict):
        raise cli.UsageError(f"{path}: no job.timeline in it; write it with `pulumi stack "
                             "output --json > outputs.json` after an `up` that reached the "
                             "first step")
    return timeline


def read_check_rate(path: Path) -> float | None:
    """The cluster check's measured read rate (MiB/s) from the stack's outputs, if there."""
    document = json.loads(path.read_text())
    return ((document.get("clusterCheck") or {}) if isinstance(document, dict) else {}).get(
        "readMbps")


def _at(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def measured_segments(chain: list[Step], timeline: dict[str, str | None],
                      started: datetime.datetime | None = None) -> list[dict[str, Any]]:
    """One row per milestone segment on the path: the model's minutes (the sum of its phases)
    and the measured minutes, where both ends were recorded. Without `started` the first
    segment (networks and control plane) keeps the model's figure and anchors the others."""
    phases = [p for step in chain for p in step.duration.phases if p.minutes or p.milestone]
    rows: list[dict[str, Any]] = []
    for milestone in MILESTONES:
        covered = [p for p in phases if p.milestone == milestone]
        rows.append({"milestone": milestone, "phases": [p.what or p.source for p in covered],
                     "model": round(sum(p.minutes for p in covered), 2), "measured": None})
    # Phases without a milestone (the system pool, staging, the check) fall in the segment
    # that ends at the next milestone; staging and the check end at jobStarted.
    rest = sum(p.minutes for p in phases if p.milestone is None)
    next(r for r in rows if r["milestone"] == JOB_STARTED)["model"] += round(rest, 2)
    previous = started
    for row in rows:
        now = _at(timeline.get(row["milestone"]))
        if now is not None and previous is not None:
            row["measured"] = round((now - previous).total_seconds() / 60, 2)
        previous = now if now is not None else None
    return rows


def measured_report(chain: list[Step], timeline: dict[str, str | None],
                    started: datetime.datetime | None, read_mbps: float | None = None) -> str:
    rows = measured_segments(chain, timeline, started)
    lines = ["", "Measured (the job's timeline output) against the model, segment by segment:", ""]
    total = 0.0
    for row in rows:
        used = row["measured"] if row["measured"] is not None else row["model"]
        total += used
        figure = (f"measured {row['measured']:g} min (model {row['model']:g})"
                  if row["measured"] is not None else
                  f"model {row['model']:g} min (not measured: "
                  + ("`--started` not given)" if row["milestone"] == CLUSTER_UP and not started
                     else "a missing timestamp)"))
        lines.append(f"  to {row['milestone']:<19} {figure}")
    lines += ["", f"Estimate with the measured segments: {total:.1f} min to the first step."]
    if read_mbps:
        bound = MODEL_GB * 1e9 / (expectations.MIN_READ_MBPS * 2**20) / 60
        at_rate = MODEL_GB * 1e9 / (read_mbps * 2**20) / 60
        lines.append(f"The weight read at the check's measured {read_mbps:g} MiB/s "
                     f"(clusterCheck.readMbps): {at_rate:.1f} min, against the model's bound of "
                     f"{bound:.1f} min at the {expectations.MIN_READ_MBPS:g} MiB/s floor.")
    return "\n".join(lines)


# --- docs/cost.md's "Expected timings": the model's output for the shipped stacks. ---

COST_PAGE = Path(__file__).resolve().parents[1] / "docs" / "cost.md"
TIMINGS_BLOCK = re.compile(
    r"(<!-- timings-table:[^\n]*-->\n)(.*?)(\n<!-- /timings-table -->)", re.S)
SEGMENT_NAMES = {
    CLUSTER_UP: "networks, control plane",
    REGISTERED: "default pool, capacity, GPU VMs to registered",
    ALLOCATABLE: "GPU driver",
    PULLED: "image",
    RAY_READY: "IMEX, postStart, Ray start",
    JOB_STARTED: "what else is on the path (PV/PVC, staging if later, the cluster check)",
    FIRST_STEP: "the run: imports, weight read, FSDP, vLLM, validation, first step",
}


def docs_report(stack_modes: Iterable[tuple[str, str]] | None = None, render=None) -> str:
    """The table of docs/cost.md's "Expected timings" for the shipped stacks, each phase's
    figure and source, and the open assumptions: what `--update-docs` writes there."""
    from tools import stacks, step_model

    render = render or (lambda stack, mode: plan.run_program(stack, mode))
    columns, phases = [], {}
    for stack, mode in stack_modes or stacks.STACK_MODES:
        inputs, recording = render(stack, mode)
        f = facts(recording, step_model.stack_config(stack, inputs))
        walk = Walk(recording, f)
        chain = walk.chain()
        staging = staging_step(recording, f)
        columns.append((f"{stack}" + (" Autopilot" if mode == "autopilot" else ""),
                        measured_segments(chain, {}), chain[-1].done_at,
                        walk.chain(RAY_CLUSTER)[-1].done_at, staging.done_at if staging else None))
        for step in [*chain, *([staging] if staging else [])]:
            for phase in step.duration.phases:
                if phase.minutes:
                    phases.setdefault((phase.what or step.resource.type, phase.source),
                                      set()).add(f"{phase.minutes:g}")
    lines = ["| to milestone (timeline output) | what | "
             + " | ".join(name for name, *_ in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for index, milestone in enumerate(MILESTONES):
        cells = " | ".join(f"{rows[index]['model']:.1f}" for _, rows, *_ in columns)
        lines.append(f"| `{milestone}` | {SEGMENT_NAMES[milestone]} | {cells} |")
    lines += [
        "| **first step** | | " + " | ".join(f"**{total:.1f}**" for _, _, total, *_ in columns)
        + " |",
        "| RayCluster ready | | " + " | ".join(f"{ray:.1f}" for *_, ray, _ in columns) + " |",
        "| staging done | | " + " | ".join(
            f"{done:.1f}" if done is not None else "skipped" for *_, done in columns) + " |",
        "",
        "Each phase on these paths, its figure(s) in minutes and its source:",
        "",
    ]
    opened = []
    for (what, source), minutes in phases.items():
        figure = "/".join(sorted(minutes, key=float))
        lines.append(f"- {what}: {figure} min. {source}")
        if source.startswith("assumption") and what not in [w for w, _ in opened]:
            opened.append((what, figure))
    lines += ["", "Open assumptions (no source; each to be replaced by a measured `up`): "
              + "; ".join(f"{what} ({figure} min)" for what, figure in opened) + "."]
    return "\n".join(lines)


def update_docs(render=None) -> None:
    text = COST_PAGE.read_text()
    block = docs_report(render=render)
    COST_PAGE.write_text(TIMINGS_BLOCK.sub(lambda m: m.group(1) + block + m.group(3), text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", help="any stack with a Pulumi.<stack>.yaml")
    parser.add_argument("--update-docs", action="store_true",
                        help="rewrite docs/cost.md's timings table from the shipped stacks")
    parser.add_argument("--mode", choices=["standard", "autopilot"])
    parser.add_argument("--warm-image", action="store_true",
                        help="an earlier pull in the project filled the image-streaming cache")
    parser.add_argument("--measured", type=Path,
                        help="`pulumi stack output --json` of a real `up` (or its job.timeline)")
    parser.add_argument("--started", help="when that `up` started (ISO 8601; `pulumi stack "
                        "history --json` gives it), to measure the control plane too")
    args = parser.parse_args(argv)
    if args.update_docs:
        update_docs()
        return 0
    if not args.stack:
        parser.error("--stack is required (or --update-docs)")
    from tools import step_model

    inputs, recording = plan.run_program(args.stack, args.mode)
    f = facts(recording, step_model.stack_config(args.stack, inputs), args.warm_image)
    walk = Walk(recording, f)
    ray_ready = walk.chain(RAY_CLUSTER)[-1].done_at
    chain = walk.chain()
    staging = staging_step(recording, f)
    print(report(args.stack, args.mode, chain, ray_ready, staging, f))
    if args.measured:
        started = _at(args.started) if args.started else None
        print(measured_report(chain, read_timeline(args.measured), started,
                              read_check_rate(args.measured)))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
