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
