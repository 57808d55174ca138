"""The training curve: reward and verl's other per-step metrics against the step, as a PNG.

    python -m tools.curve --log job.log [--out curve.png]
    python -m tools.curve --address http://127.0.0.1:8265 --submission-id <id>
    python -m tools.curve --stack a4          # a deployed stack: reads its outputs

The log is read from a file, or from Ray through the job provider's own transport
(components/run/ray_access.py: a configured address, or `kubectl port-forward` to the head
Service with the stack's kubeconfig; every request with a timeout and retries). Ray's Jobs API
serves the driver log whole; the curve needs every step line from the first, so a tail would
not do. Step lines are parsed by the provider's parser (grpo_job.last_metrics), one line at a
time; a step logged twice (a run resumed from a checkpoint) keeps its last values. NaN values
are not plotted.

The PNG has a title, a panel per metric with labelled axes and a legend, and carries the
plotted series as JSON in its `verl-gke:series` text chunk, so that a reader (or a test) can
check what was drawn.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from components.run.grpo_job import last_metrics
from tools import cli, plan

# verl keys, panel titles and units; reward first.
PANELS: dict[str, tuple[str, str]] = {
    "critic/score/mean": ("Reward (critic/score/mean)", "score"),
    "response_length/mean": ("Response length (response_length/mean)", "tokens"),
    "timing_s/step": ("Step time (timing_s/step)", "seconds"),
    "perf/throughput": ("Throughput (perf/throughput)", "tokens/s/GPU"),
}
# One distinct colour per series, so a reader of the PNG can tell (and find) each one.
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
SERIES_KEY = "verl-gke:series"


def step_series(log: str) -> dict[str, list[tuple[int, float]]]:
    """{verl key: [(step, value), ...] sorted by step} for the keys in PANELS."""
    by_step: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        metrics = last_metrics(line)
        if "step" in metrics:
            by_step[int(metrics["step"])] = metrics  # a repeated step keeps its last line
    return {
        key: [(step, values[key]) for step, values in sorted(by_step.items()) if key in values]
        for key in PANELS
    }


def series_color(key: str) -> str:
    return COLORS[list(PANELS).index(key)]


def plot(series: dict[str, list[tuple[int, float]]], title: str, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    drawn = {key: points for key, points in series.items() if points}
    if not drawn:
        raise cli.UsageError(
            "the log has no verl step line with a plottable metric (e.g. `step:1 - "
            "critic/score/mean:0.1`): the job has not finished its first step yet, or this is "
            "not a verl job's driver log; try again after the first step"
        )
    figure, axes = plt.subplots(len(drawn), 1, figsize=(9, 3 * len(drawn)), sharex=True)
    axes = axes if len(drawn) > 1 else [axes]
    for axis, (key, points) in zip(axes, drawn.items()):
        name, unit = PANELS[key]
        steps, values = zip(*points)
        axis.plot(steps, values, marker="o", color=series_color(key), label=key)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(name)
        axis.set_ylabel(unit)
        axis.legend(loc="best")
        axis.grid(True, alpha=0.3)
    axes[-1].set_xlabel("step")
    figure.suptitle(title)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", metadata={SERIES_KEY: json.dumps(drawn), "Title": title})
    plt.close(figure)
    return out


def log_from_ray(access: dict[str, Any], submission_id: str) -> str:
    """The job's driver log through the GrpoJob provider's transport."""
    from components.run.ray_access import RayJobs, RequestPolicy, open_dashboard

    policy = RequestPolicy()
    with open_dashboard(access, policy) as dashboard:
        return RayJobs(dashboard, submission_id, policy).logs()


def stack_outputs(stack: str) -> dict[str, Any]:
    """A deployed stack's outputs, secrets shown, from `pulumi stack output` (the CLI's own
    login and backend); UsageError when there is no CLI or it cannot answer."""
    command = ["pulumi", "stack", "output", "--json", "--show-secrets", "--stack", stack]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except FileNotFoundError:
        raise cli.UsageError(
            f"STACK={stack!r}: reading a deployed stack needs the Pulumi CLI, and `pulumi` is "
            "not on PATH: install it (https://www.pulumi.com/docs/iac/download-install/) and "
            "`pulumi login`, or pass a saved job log (`make curve LOG=job.log`)"
        ) from None
    if done.returncode != 0:
        raise cli.UsageError(
            f"STACK={stack!r}: `{' '.join(command[:-2])} --stack {stack}` failed "
            f"({done.stderr.strip() or f'exit {done.returncode}'}): run it where the stack is "
            "deployed and you are logged in, or pass a saved job log (LOG=job.log)"
        )
    try:
        return json.loads(done.stdout or "{}")
    except json.JSONDecodeError as error:
        raise cli.UsageError(f"`pulumi stack output --json` printed no JSON ({error})") from None


def access_from_stack(stack: str) -> tuple[dict[str, Any], str]:
    """(access, submission id) of a deployed stack's job, from its outputs: the same access
    (kubeconfig, head Service, port) the GrpoJob provider uses."""
    outputs = stack_outputs(stack)
    try:
        ray = outputs["rayCluster"]
        access = {
            "kubeconfig": outputs["kubeconfig"], "namespace": ray["namespace"],
            "service": ray["headService"], "port": ray["dashboardPort"],
        }
        # The run's newest attempt is its own Ray job, `<run id>-a<N>` (components/supervisor/protocol.py),
        # which job.dashboardPath (`/#/jobs/<attempt id>`) names.
        path = outputs["job"].get("dashboardPath") or ""
        submission_id = path.rsplit("/", 1)[-1] or outputs["job"]["submissionId"]
    except (KeyError, TypeError) as error:
        raise cli.UsageError(
            f"STACK={stack!r} has no output {error} yet: the stack has not been deployed, or "
            f"its first `pulumi up` has not reached the job; run `pulumi up --stack {stack}` "
            "(the outputs are written when it ends), or pass a saved job log (LOG=job.log)"
        ) from None
    if not submission_id:
        raise cli.UsageError(f"STACK={stack!r}: the job has no submission id yet: run `pulumi up`")
    return access, submission_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--log", type=Path, help="a saved job log")
    source.add_argument("--stack", help="a deployed stack: its job, through kubectl port-forward")
    source.add_argument("--address", help="a Ray dashboard address (needs --submission-id)")
    parser.add_argument("--submission-id", help="the Ray job (with --address)")
    parser.add_argument("--out", type=Path, default=Path("curve.png"))
    parser.add_argument("--title", help="default: the log's source")
    args = parser.parse_args(argv)
    if args.log:
        if not args.log.is_file():
            raise cli.UsageError(f"LOG={str(args.log)!r} (--log) is not a file: pass a saved job "
                                 "log (`ray job logs <submissionId> > job.log`)")
        log, where = args.log.read_text(errors="replace"), str(args.log)
    elif args.stack:
        plan.stack_file(args.stack)  # the same check, and message, as every other target
        access, submission_id = access_from_stack(args.stack)
        log, where = log_from_ray(access, submission_id), f"{args.stack}: {submission_id}"
    else:
        if not args.submission_id:
            parser.error("--address needs --submission-id")
        log = log_from_ray({"address": args.address}, args.submission_id)
        where = args.submission_id
    out = plot(step_series(log), args.title or f"verl GRPO training curve ({where})", args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
