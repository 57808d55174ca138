"""Benchmark: GrpoJob provider create -> RUNNING against Ray's own ways of doing the same.

Three ways to submit one job and wait until Ray reports it RUNNING, on one private local Ray
head (tools/local_ray.py), with the same entrypoint:
- the provider's `create` with waitFor=running (default request policy; includes its check for
  another live job of the run, its final status and log-tail read, as `pulumi up` would);
- the tutorial's way: `ray job submit --no-wait`, then `ray job status` polled through the CLI;
- raw `JobSubmissionClient.submit_job` and `get_job_status` calls.
Each is repeated a few times; medians and the provider's ratio to each are printed. Every job
is stopped before the next one starts so they never compete for the head.

Then create -> first step (waitFor first-step, the default) with the stand-in trainer
(tests/fakes/verl_trainer.py, its first step after STEP_S), against the raw client polling the
job's whole log for verl's first step line: what `pulumi up` adds on top of the job's own
start-up is the difference.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from components.ray.grpo_job import PROVIDER_VERSION, GrpoJobProvider
from tools.local_ray import RAY, LocalRay, local_ray

REPETITIONS = 5
# The provider may cost at most this much more than the raw client (issue 10): its extra work
# (looking for another live job of the run first, reading the log tail for metrics) must not
# show in what a user waits for.
TARGET_RATIO = 1.1
# The CLI and raw-client loops poll at a fixed 0.25 s. The provider starts at 0.1 s and polls
# every tenth of the time waited (RequestPolicy): it sees RUNNING sooner, at a similar request
# count for a start-up of a few seconds.
POLL_S = 0.25
TRAINER = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "verl_trainer.py"
ENTRYPOINT = f"{sys.executable} {TRAINER} --steps 30 --sleep 1"
STEP_S = 1.0  # the stand-in's time to its first step, after its start
FIRST_STEP = f"{sys.executable} {TRAINER} --steps 30 --sleep {STEP_S}"


def _provider(ray: LocalRay, submission_id: str) -> None:
    GrpoJobProvider(say=_quiet).create(_inputs(ray, submission_id, ENTRYPOINT))


def _provider_first_step(ray: LocalRay, submission_id: str) -> None:
    props = {**_inputs(ray, submission_id, FIRST_STEP), "wait_for": "first-step"}
    outs = GrpoJobProvider(say=_quiet).create(props).outs
    assert outs["metrics"].get("step"), outs


def _raw_first_step(ray: LocalRay, submission_id: str) -> None:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray.dashboard_url)
    client.submit_job(entrypoint=FIRST_STEP, submission_id=submission_id)
    while " step:1 - " not in client.get_job_logs(submission_id):
        time.sleep(POLL_S)


def _inputs(ray: LocalRay, submission_id: str, entrypoint: str) -> dict:
    return {
        "submission_id": submission_id,
        "entrypoint": entrypoint,
        "runtime_env": {"env_vars": {}},
        "staged": None,
        # The stack and resource keys make create look for another live job of the same run
        # first, as it does in a stack.
        "metadata": {"verl-gke-stack": "bench", "verl-gke-resource": "grpo"},
        "wait_for": "running",
        "timeout_s": 120,
        "max_retries": 0,
        "access": {"address": ray.dashboard_url},
        "checkpoint_uri": "gs://bench/checkpoints/grpo-16gpu-0123456789ab",
        "run_dir": "grpo-16gpu-0123456789ab",
        "version": PROVIDER_VERSION,
        "job_state": "",
    }


def _quiet(_line: str) -> None:
    """Progress lines are not part of what is measured."""


def _cli(ray: LocalRay, submission_id: str) -> None:
    address = ["--address", ray.dashboard_url]
    subprocess.run(
        [RAY, "job", "submit", *address, "--submission-id", submission_id, "--no-wait", "--",
         *ENTRYPOINT.split()],
        check=True, capture_output=True,
    )
    while "RUNNING" not in subprocess.run(
        [RAY, "job", "status", *address, submission_id], check=True, capture_output=True,
        text=True,
    ).stdout:
        time.sleep(POLL_S)


def _raw_client(ray: LocalRay, submission_id: str) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(ray.dashboard_url)
    client.submit_job(entrypoint=ENTRYPOINT, submission_id=submission_id)
    while client.get_job_status(submission_id) != JobStatus.RUNNING:
        time.sleep(POLL_S)


def _refresh_times(ray: LocalRay, log_mb: int) -> list[float]:
    """`pulumi refresh` of a finished job whose driver log is `log_mb` MB: the provider's read."""
    provider = GrpoJobProvider(say=_quiet)
    props = _inputs(ray, f"bench-{uuid.uuid4().hex[:10]}",
                    f"{sys.executable} {TRAINER} --steps 2 --sleep 0 --log-mb {log_mb}")
    created = provider.create({**props, "wait_for": "succeeded"})
    timings = []
    for _ in range(REPETITIONS):
        started = time.perf_counter()
        provider.read(created.id, created.outs)
        timings.append(time.perf_counter() - started)
    return timings


def _time(ray: LocalRay, way: Callable[[LocalRay, str], None]) -> list[float]:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray.dashboard_url)
    timings = []
    for _ in range(REPETITIONS):
        submission_id = f"bench-{uuid.uuid4().hex[:10]}"
        started = time.perf_counter()
        way(ray, submission_id)
        timings.append(time.perf_counter() - started)
        client.stop_job(submission_id)
        while not client.get_job_status(submission_id).is_terminal():
            time.sleep(POLL_S)
    return timings


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as temp, local_ray(Path(temp)) as ray:
        _time(ray, _raw_client)  # warm-up: the first job on a fresh head pays worker start-up
        results = {
            "provider create -> RUNNING": _time(ray, _provider),
            "ray CLI submit --no-wait + status polling": _time(ray, _cli),
            "raw JobSubmissionClient": _time(ray, _raw_client),
        }
        refresh = {mb: _refresh_times(ray, mb) for mb in (0, 101)}
        first_step = {
            "provider create -> first step": _time(ray, _provider_first_step),
            "raw client submit -> first step in the log": _time(ray, _raw_first_step),
        }
    print(f"GrpoJob create -> RUNNING, median of {REPETITIONS} (same entrypoint, same local Ray):")
    medians = {name: statistics.median(times) for name, times in results.items()}
    for name, median in medians.items():
        spread = ", ".join(f"{t:.2f}" for t in results[name])
        print(f"  {name:<45} {median:6.2f} s  ({spread})")
    provider, cli, raw = medians.values()
    print(f"  provider / CLI: {provider / cli:.2f}x")
    ratio = provider / raw
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(f"  provider / raw client: {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")
    print("GrpoJob refresh (read: status, log tail, export status), median of "
          f"{REPETITIONS}:")
    for mb, times in refresh.items():
        print(f"  driver log of {mb:>3} MB: {statistics.median(times):6.3f} s")
    print(f"GrpoJob create -> first step, median of {REPETITIONS} (stand-in trainer, first "
          f"step {STEP_S:g} s after it starts):")
    for name, times in first_step.items():
        spread = ", ".join(f"{t:.2f}" for t in times)
        print(f"  {name:<45} {statistics.median(times):6.2f} s  ({spread})")
    ours, theirs = (statistics.median(t) for t in first_step.values())
    print(f"  provider / raw client: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
