"""Ray's answers in races that a real head shows only by chance, replayed by a stub dashboard.

When a record is deleted while another actor uses it (the ClusterCheck's resubmission of a
finished check, or a person's `ray job delete`; a run's attempts are never deleted,
components/supervisor/protocol.py):
- between the Ray head's lookup of the record and its job agent's, the head answers 500 with the
  agent's 404 inside (ray/dashboard/modules/job/job_head.py JobAgentSubmissionClient._raise_error
  around job_agent.py's "Job <id> does not exist"); tests/test_supervisor_ray.py's concurrency
  test met it about once in a few runs, and the provider failed the `up` where it should have
  adopted the other actor's attempt;
- while Ray lists the job table, the list answers aiohttp's bare 500 (common.py get_all_jobs
  reads each listed key, job_head.py list_jobs fails on the one gone); the suite met it once
  in tests/test_grpo_job_lifecycle.py.
The stub answers what Ray 2.47 answers there, word for word, and only that; everything else
about the provider against Ray is tested against a real head.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from typing import Any, Iterator

import pytest

from components.run import ray_access
from components.supervisor import supervisor
from components.run.ray_access import FixedDashboard, RayAccessError, RayJobs, RequestPolicy

SID = "verl-gke-test-grpo-abc123-0123456789ab"
# What the head writes for a failed forward: the traceback of its RuntimeError (job_head.py).
WRAPPED_404 = (
    "Traceback (most recent call last):\n"
    '  File ".../ray/dashboard/modules/job/job_head.py", line 167, in delete_job_internal\n'
    "    await self._raise_error(resp)\n"
    "RuntimeError: Request failed with status code 404: Job {sid} does not exist.\n"
)
# What aiohttp answers when a handler raises (aiohttp/web_protocol.py handle_error).
BARE_500 = "500 Internal Server Error\n\nServer got itself in trouble"
POLICY = RequestPolicy(timeout_s=5, attempts=1, backoff_s=0.1, poll_min_s=0.01)



@contextlib.contextmanager
def stub_dashboard(answers: dict[tuple[str, str], Any]) -> Iterator[str]:
    """An HTTP server answering (method, path without query) with (status, body), or with each
    of a list of them in turn, the last one from then on; 599 for anything else."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            answer = answers.get((self.command, self.path.split("?")[0]), (599, "unexpected"))
            if isinstance(answer, list):
                answer = answer.pop(0) if len(answer) > 1 else answer[0]
            status, body = answer
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def dead_supervisor_and_failed_record() -> dict[tuple[str, str], tuple[int, str]]:
    """A FAILED record whose supervisor actor is dead: what delete waits for before it deletes."""
    actors = {"data": {"result": {"result": [{"state": "DEAD"}]}}}
    return {
        ("GET", f"/api/jobs/{SID}"): (200, json.dumps({"submission_id": SID, "status": "FAILED"})),
        ("GET", "/api/v0/actors"): (200, json.dumps(actors)),
    }


@pytest.fixture(autouse=True)
def no_monitor_wait(monkeypatch):
    """delete waits two of Ray's job-monitor periods before it deletes; a stub has no monitor."""
    monkeypatch.setattr(ray_access, "_JOB_MONITOR_PERIOD_S", 0.0)


def test_a_record_deleted_by_another_actor_meanwhile_is_not_an_error():
    """delete() says False ("not removed by this call"), as for the head's own 404, so that the
    resubmission loop (protocol.py) adopts the other actor's attempt instead of failing up."""
    answers = dead_supervisor_and_failed_record()
    answers["DELETE", f"/api/jobs/{SID}"] = (500, WRAPPED_404.format(sid=SID))
    with stub_dashboard(answers) as url:
        assert RayJobs(FixedDashboard(url), SID, POLICY).delete() is False


def test_a_job_deleted_meanwhile_needs_no_stop():
    """Stopping a job whose record went between the head's lookup and the agent's is done."""
    body = WRAPPED_404.format(sid=SID).replace("delete_job_internal", "stop_job_internal")
    with stub_dashboard({("POST", f"/api/jobs/{SID}/stop"): (500, body)}) as url:
        jobs = RayJobs(FixedDashboard(url), SID, POLICY)
        jobs.stop()
        jobs.stop_other(SID)


@pytest.mark.parametrize("method, path, call", [
    ("DELETE", f"/api/jobs/{SID}", lambda jobs: jobs.delete()),
    ("POST", f"/api/jobs/{SID}/stop", lambda jobs: jobs.stop()),
])
def test_any_other_server_error_still_fails_with_rays_words(method, path, call):
    """Only the agent's 404 is forgiven: another 500 (here the GCS timing out) fails the call
    with Ray's text, naming the job."""
    answers = dead_supervisor_and_failed_record()
    answers[method, path] = (500, "RuntimeError: GCS call timed out")
    with stub_dashboard(answers) as url:
        with pytest.raises(RayAccessError, match=f"{SID}.*answered HTTP 500: RuntimeError: GCS call timed out"):
            call(RayJobs(FixedDashboard(url), SID, POLICY))


def test_a_job_list_that_failed_on_a_record_deleted_meanwhile_is_asked_again():
    """live_jobs (create's check for a stray run of the same resource) reads the next list
    instead of failing the `up` on Ray's bare 500."""
    job = {"submission_id": SID, "status": "RUNNING", "metadata": {"verl-gke-resource": "grpo"}}
    answers = {("GET", "/api/jobs/"): [(500, BARE_500), (200, json.dumps([job]))]}
    with stub_dashboard(answers) as url:
        jobs = RayJobs(FixedDashboard(url), SID, RequestPolicy(attempts=2, poll_min_s=0.01))
        assert jobs.live_jobs({"verl-gke-resource": "grpo"}) == [job]


def test_a_job_list_that_keeps_failing_fails_with_rays_words():
    """Past the policy's attempts the 500 is an error, with Ray's text and the job's name."""
    with stub_dashboard({("GET", "/api/jobs/"): (500, BARE_500)}) as url:
        jobs = RayJobs(FixedDashboard(url), SID, RequestPolicy(attempts=2, poll_min_s=0.01))
        with pytest.raises(RayAccessError, match=f"{SID}.*listing jobs answered HTTP 500: 500 Internal"):
            jobs.live_jobs({})


def test_the_supervisor_asks_for_the_job_list_again_too():
    """The in-cluster supervisor's client (standard library only) does the same."""
    job = {"submission_id": SID, "status": "PENDING", "metadata": {"verl-gke-resource": "grpo"}}
    answers = {("GET", "/api/jobs/"): [(500, BARE_500), (200, json.dumps([job]))]}
    with stub_dashboard(answers) as url:
        assert supervisor.RayHttp(url, SID).list_jobs() == [job]
