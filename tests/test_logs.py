"""`make logs`' follow loop (tools/logs.py), against a job whose log grows between reads.

The real path (stack outputs, kubectl port-forward, a real Ray job) is tested in
tests/test_curve.py next to `make curve`, which shares it; the error paths in
tests/test_cli_errors.py.
"""

from __future__ import annotations

import io

import pytest

from tools import cli, logs


class GrowingJob:
    """A RayJobs stand-in: each read returns the next (status, log) of a scripted run."""

    submission_id = "verl-gke-test"

    def __init__(self, states: list[tuple[str, str]]) -> None:
        self.states = states
        self.reads = 0

    def where(self) -> str:
        return f"Ray job {self.submission_id}"

    def info(self):
        status, _ = self.states[min(self.reads, len(self.states) - 1)]
        return None if status is None else {"status": status, "message": "done" if status == "SUCCEEDED" else ""}

    def logs(self) -> str:
        _, log = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        return log


def test_every_line_is_printed_once_until_the_job_ends():
    """New text only, in order, across reads; the terminal status ends following (no sleep
    after it) and is printed with Ray's message."""
    job = GrowingJob([("PENDING", ""), ("RUNNING", "a\n"), ("RUNNING", "a\nb\n"), ("SUCCEEDED", "a\nb\nc\n")])
    out, sleeps = io.StringIO(), []
    assert logs.follow(job, out, interval_s=7, sleep=sleeps.append) == "SUCCEEDED"
    assert out.getvalue() == "a\nb\nc\n\n[make logs] job verl-gke-test: SUCCEEDED (done)\n"
    assert sleeps == [7, 7, 7]


def test_a_restarted_driver_is_printed_from_its_start():
    """A log shorter than what was printed is a new driver's: printed whole, not skipped."""
    job = GrowingJob([("RUNNING", "old-1\nold-2\n"), ("RUNNING", "new\n"), ("FAILED", "new\nx\n")])
    out = io.StringIO()
    assert logs.follow(job, out, sleep=lambda _: None) == "FAILED"
    assert out.getvalue().startswith("old-1\nold-2\nnew\nx\n")


def test_no_follow_prints_the_log_so_far_once():
    job = GrowingJob([("RUNNING", "a\n"), ("RUNNING", "a\nb\n")])
    out = io.StringIO()
    assert logs.follow(job, out, once=True, sleep=pytest.fail) is None
    assert out.getvalue() == "a\n"


def test_a_job_ray_does_not_know_is_a_user_error():
    with pytest.raises(cli.UsageError, match="Ray does not know this job.*`pulumi up` submits it again"):
        logs.follow(GrowingJob([(None, "")]), io.StringIO())


class Cluster:
    """RayJobs.live_jobs stand-in: returns the jobs whose metadata holds all of `metadata`."""

    def __init__(self, jobs):
        self.jobs = jobs
        self.dashboard = type("D", (), {"describe": lambda self: "http://127.0.0.1:8265"})()

    def live_jobs(self, metadata):
        return [j for j in self.jobs if all(j["metadata"].get(k) == v for k, v in metadata.items())]


def test_without_a_submission_id_the_live_training_job_is_followed():
    """During the first `up` there are no outputs: `--address` alone picks the GrpoJob's live
    job (by the provider's metadata), the newest if Ray has two, never the cluster check."""
    from components.run.grpo_job import RESOURCE_KEY

    cluster = Cluster([
        {"submission_id": "check", "start_time": 9, "metadata": {RESOURCE_KEY: "cluster-check"}},
        {"submission_id": "old", "start_time": 1, "metadata": {RESOURCE_KEY: logs.TRAINING_RESOURCE}},
        {"submission_id": "new", "start_time": 5, "metadata": {RESOURCE_KEY: logs.TRAINING_RESOURCE}},
    ])
    assert logs.live_training_job(cluster) == "new"
    with pytest.raises(cli.UsageError, match="no training job is running at http://127.0.0.1:8265 yet"):
        logs.live_training_job(Cluster(cluster.jobs[:1]))


def test_the_training_resource_is_the_program_s_grpo_job():
    """TRAINING_RESOURCE is the GrpoJob's logical name in __main__.py (the provider records it)."""
    from tests.conftest import rendered

    _, recording = rendered("a4", "standard")
    assert recording.one("verl-gke:index:GrpoJob").name == logs.TRAINING_RESOURCE
