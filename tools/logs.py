"""`make logs STACK=<stack>`: follow a deployed stack's training job log from the terminal.

    python -m tools.logs --stack a4 [--no-follow] [--interval 10]
    python -m tools.logs --address http://127.0.0.1:8265 [--submission-id <id>]

Reads the stack's outputs (`pulumi stack output`, as `make curve` does: tools/curve.py) and
reaches Ray the way the GrpoJob provider does (components/run/ray_access.py: `kubectl
port-forward` to the head Service with the stack's kubeconfig, written mode 600 and removed
after; every request with a timeout and retries). The dashboard never leaves localhost.
During the first `up` the stack has no outputs yet: `up` prints the port-forward command, and
`--address` without `--submission-id` follows the GrpoJob's live job on that Ray cluster.

Ray's Jobs API serves the driver log whole (GET /api/jobs/<id>/logs); its streaming tail is a
websocket the provider's client does not speak. So this polls: every --interval seconds it
reads the log and prints what is new, until the job reaches a terminal status, then prints the
status and exits 0 (SUCCEEDED) or 1 (FAILED, STOPPED). Ctrl-C stops following; the job goes on.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, TextIO

from tools import cli, curve, plan

DEFAULT_INTERVAL_S = 10.0


def follow(
    jobs: Any,
    out: TextIO = sys.stdout,
    interval_s: float = DEFAULT_INTERVAL_S,
    once: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Print the job's log as it grows; return its terminal status (None: stopped following
    with `once`, or the job is unknown to Ray). `jobs` is a ray_access.RayJobs."""
    from components.run.ray_access import TERMINAL_STATUSES

    printed = 0
    while True:
        info = jobs.info()  # before the log: a terminal status then means the log is complete
        if info is None:
            raise cli.UsageError(
                f"{jobs.where()}: Ray does not know this job (the RayCluster was recreated, or "
                "the job was deleted); `pulumi up` submits it again"
            )
        log = jobs.logs()
        if len(log) < printed:
            printed = 0  # a new driver (Ray restarted the job): its log from the start
        out.write(log[printed:])
        out.flush()
        printed = len(log)
        status = info.get("status")
        if status in TERMINAL_STATUSES:
            message = f" ({info['message']})" if info.get("message") else ""
            out.write(f"\n[make logs] job {jobs.submission_id}: {status}{message}\n")
            return status
        if once:
            return None
        sleep(interval_s)


# The GrpoJob's logical name in __main__.py, which its provider records in the job's metadata.
TRAINING_RESOURCE = "grpo"


def live_training_job(jobs: Any) -> str:
    """The submission id of the GrpoJob's unfinished job on this Ray cluster (found by the
    metadata its provider submits it with), or UsageError."""
    from components.run.grpo_job import RESOURCE_KEY

    live = jobs.live_jobs({RESOURCE_KEY: TRAINING_RESOURCE})
    if not live:
        raise cli.UsageError(
            f"no training job is running at {jobs.dashboard.describe()} yet (`pulumi up` submits "
            "it after staging and the cluster check): try again then, or pass --submission-id"
        )
    return max(live, key=lambda job: job.get("start_time") or 0)["submission_id"]


def main(argv: list[str] | None = None) -> int:
    from components.run.ray_access import RayAccessError, RayJobs, RequestPolicy, open_dashboard

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="a deployed stack: its job, through kubectl port-forward")
    source.add_argument("--address", help="a Ray dashboard address (needs --submission-id)")
    parser.add_argument("--submission-id",
                        help="the Ray job (with --address; default: the live training job)")
    parser.add_argument("--no-follow", action="store_true", help="print the log so far and exit")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S,
                        help=f"seconds between reads (default {DEFAULT_INTERVAL_S:g})")
    args = parser.parse_args(argv)
    if args.stack:
        plan.stack_file(args.stack)  # the same check, and message, as every other target
        access, submission_id = curve.access_from_stack(args.stack)
    else:
        access, submission_id = {"address": args.address}, args.submission_id
    policy = RequestPolicy()
    try:
        with open_dashboard(access, policy) as dashboard:
            if not submission_id:
                submission_id = live_training_job(RayJobs(dashboard, "", policy))
            status = follow(RayJobs(dashboard, submission_id, policy), interval_s=args.interval,
                            once=args.no_follow)
    except RayAccessError as error:
        raise cli.UsageError(str(error)) from None
    except KeyboardInterrupt:
        print(f"\n[make logs] stopped following; the job goes on ({submission_id})", file=sys.stderr)
        return 130
    return 0 if status in (None, "SUCCEEDED") else 1


if __name__ == "__main__":
    sys.exit(cli.run(main))
