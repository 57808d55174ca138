"""The simulated Ray (tests/models/ray_jobs.py) against the real Ray 2.47.0: one script, both.

The script does what the program relies on: submit; submit the same id ("already exists");
info of an unknown id (404); delete a live job ("non-terminal state"); stop it; delete it once
terminal; the job supervisor actors of an id (every attempt's, DEAD once ended); and a log read
by id after a second submission under the same id (Ray appends: both attempts' output). Each
step's observation (HTTP status, the error's key phrase, the job's status, what the log holds)
must be the same on both. Three real jobs (~1.4 CPU-s each on the shared test head).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable

import requests

from components.facts import pins
from tests.sim.world import World

Call = Callable[[str, str, Any], tuple[int, str]]
Wait = Callable[[float], None]
PHRASES = ("already exists", "does not exist", "non-terminal state")


def script(call: Call, wait: Wait, suffix: str) -> list[tuple]:
    """The operations, and what each showed (comparable across the two Rays)."""
    seen: list[tuple] = []
    one, two = f"conf-echo-{suffix}", f"conf-sleep-{suffix}"

    def note(step: str, status: int, text: str) -> None:
        seen.append((step, status, tuple(p for p in PHRASES if p in text)))

    def status_of(sid: str, want: set[str], timeout_s: float = 60) -> str:
        for _ in range(int(timeout_s / 0.2)):
            code, text = call("GET", f"/api/jobs/{sid}", None)
            if code == 200 and json.loads(text)["status"] in want:
                return json.loads(text)["status"]
            wait(0.2)
        return "timeout"

    def submit(sid: str, entrypoint: str) -> tuple[int, str]:
        return call("POST", "/api/jobs/", {"entrypoint": entrypoint, "submission_id": sid,
                                           "runtime_env": {}, "metadata": {"t": "conf"}})

    note("submit", *submit(one, "echo first-attempt"))
    note("submit same id", *submit(one, "echo first-attempt"))
    note("info unknown id", *call("GET", f"/api/jobs/conf-unknown-{suffix}", None))
    seen.append(("ended", status_of(one, {"SUCCEEDED", "FAILED"})))
    note("submit sleeper", *submit(two, "sleep 60"))
    seen.append(("running", status_of(two, {"RUNNING"})))
    note("delete live", *call("DELETE", f"/api/jobs/{two}", None))
    code, text = call("POST", f"/api/jobs/{two}/stop", None)
    seen.append(("stop", code, json.loads(text).get("stopped") if code == 200 else None))
    seen.append(("stopped", status_of(two, {"STOPPED", "FAILED", "SUCCEEDED"})))
    note("delete terminal", *call("DELETE", f"/api/jobs/{two}", None))
    note("info deleted", *call("GET", f"/api/jobs/{two}", None))
    note("delete first", *call("DELETE", f"/api/jobs/{one}", None))
    note("resubmit same id", *submit(one, "echo second-attempt"))
    seen.append(("ended again", status_of(one, {"SUCCEEDED", "FAILED"})))
    states: list[str] = []
    for _ in range(50):  # the actors exit just after their drivers (job_supervisor.py:473)
        code, text = call("GET", "/api/v0/actors?filter_keys=name&filter_predicates=%3D"
                          f"&filter_values=_ray_internal_job_actor_{one}", None)
        states = sorted(a["state"] for a in json.loads(text)["data"]["result"]["result"])
        if set(states) == {"DEAD"}:
            break
        wait(0.2)
    seen.append(("actors of the id", states))
    node = json.loads(call("GET", f"/api/jobs/{one}", None)[1])["driver_node_id"]
    code, text = call("GET", f"/api/v0/logs/file?submission_id={one}&node_id={node}"
                      "&lines=50", None)
    seen.append(("log by id", code, "first-attempt" in text, "second-attempt" in text,
                 text.count("Runtime env is setting up.")))
    return seen


def test_the_simulated_ray_answers_the_script_as_the_real_ray_does(ray_head):
    """Invariant: for every operation the program relies on, the simulated Ray gives the real
    Ray's status code, error phrase, job status, actor states and log contents."""
    suffix = uuid.uuid4().hex[:8]
    session = requests.Session()

    def real(method: str, path: str, body: Any) -> tuple[int, str]:
        reply = session.request(method, ray_head.dashboard_url + path, json=body, timeout=30)
        return reply.status_code, reply.text

    world = World()
    try:
        def simulated(method: str, path: str, body: Any) -> tuple[int, str]:
            world.clock.sleep(0.02)
            data = json.dumps(body).encode() if body is not None else None
            reply = world.ray.handle(method, "http://sim" + path, data)
            return reply.status, reply.text

        expected = script(real, time.sleep, suffix)
        got = script(simulated, world.clock.sleep, suffix)
    finally:
        world.close()
    assert got == expected
    # The head is the release every RayCluster states (pins.RAY_VERSION, which
    # requirements-dev.txt pins), whose Jobs API answers its version (job_head.py:419).
    version = session.get(ray_head.dashboard_url + "/api/version", timeout=10).json()["ray_version"]
    assert version == pins.RAY_VERSION, version
    # What the comparison stands on (so that two equally wrong answers cannot pass):
    assert ("submit same id", 500, ("already exists",)) in expected
    assert ("delete live", 500, ("non-terminal state",)) in expected
    assert expected[-1][2:4] == (True, True)  # the second attempt appended to the first's log
