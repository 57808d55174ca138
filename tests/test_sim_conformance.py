"""The one Ray model (tests/models/ray_jobs.py) against the real Ray at the pin (2.49.0): each
scenario runs on both, and what it observes must be the same.

1. The REST script (the simulation's view: raw HTTP, the model in tests/sim/world.py's World).
The script does what the program relies on: submit; submit the same id ("already exists");
info of an unknown id (404); delete a live job ("non-terminal state"); stop it; delete it once
terminal; the job supervisor actors of an id (every attempt's, DEAD once ended); and a log read
by id after a second submission under the same id (Ray appends: both attempts' output). Each
step's observation (HTTP status, the error's key phrase, the job's status, what the log holds)
must be the same on both. Three real jobs (~1.4 CPU-s each on the shared test head).

2. The tick tests' view: the supervisor's own client (supervisor_io.RayHttp) on the real head,
and tests/fakes/ray_jobs.py's FakeRay (the same model in the hand world the tick tests use):
submit, a duplicate id, an unknown id, the status transitions of a job that succeeds, one that
fails and one that is stopped, a stop of an ended and of an unknown id, the list, the log tail,
the record's keys and messages, the head's node row. The real head runs each entrypoint; on
the model the test's hand does what it does (`echo` logs its words and exits 0, `false` exits
1, `sleep` runs until stopped). Three real jobs.

3. A head restart without GCS fault tolerance, on a head of its own (two head starts, ~16
CPU-s): a record of before is gone (404), the list is empty, the node table holds the new head
alone, and the old id can be submitted again.

4. The Kubernetes model (tests/models/kuberay.py) behind its fronts: the provider's kubectl calls
answered by the simulation's SimKube and by tests/fakes/kubectl over tests/fakes/cluster.py's
files give the same answers (no real API server is started: the rules are cited in the model).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import requests

from components.facts import pins
from components.supervisor.supervisor_io import RayHttp
from tests.fakes.cluster import FileCluster
from tests.fakes.ray_jobs import FakeRay
from tests.sim.world import World
from tools import local_ray

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
    for _ in range(150):  # the actors exit just after their drivers (job_supervisor.py:473)
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


# --- 2. The tick tests' view: the supervisor's client on both ---------------------------------

# The record keys the supervisor reads (protocol, supervisor.py), whose types must agree too.
READ_KEYS = ("status", "start_time", "end_time", "metadata", "driver_node_id", "message",
             "driver_exit_code", "entrypoint", "submission_id")


class RealHand:
    """Between calls on a real head: wait until what the entrypoint does has happened."""

    def __init__(self, client: Callable[[str], Any]) -> None:
        self.client = client

    def _until(self, sid: str, done: Callable[[str], bool]) -> None:
        for _ in range(300):
            info = self.client(sid).info()
            if info and done(info["status"]):
                return
            time.sleep(0.2)
        raise AssertionError(f"{sid}: still {info and info['status']} after 60 s")

    def runs(self, sid: str, entrypoint: str) -> None:
        if entrypoint.startswith("sleep "):
            self._until(sid, lambda status: status != "PENDING")
        else:
            self._until(sid, lambda status: status in TERMINAL)

    def settles(self, sid: str) -> None:
        self._until(sid, lambda status: status in TERMINAL)


class ModelHand:
    """Between calls on the model: the test's hand does what the entrypoint does."""

    def __init__(self, fake: FakeRay) -> None:
        self.fake = fake

    def runs(self, sid: str, entrypoint: str) -> None:
        self.fake.run(sid)
        if entrypoint.startswith("echo "):
            self.fake.log(sid, entrypoint[len("echo "):])
            self.fake.finish(sid, "SUCCEEDED")
        elif entrypoint == "false":
            self.fake.finish(sid, "FAILED")

    def settles(self, sid: str) -> None:
        pass  # what Ray does by itself happens at once in the hand world


TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def tick_script(client: Callable[[str], Any], hand: Any, suffix: str) -> list[tuple]:
    """What the supervisor's client sees, step by step (comparable across the two Rays)."""
    seen: list[tuple] = []
    echo, failing, sleeper = (f"conf-tick-{name}-{suffix}" for name in ("echo", "false", "sleep"))
    meta = {"verl-gke-attempt": "0", "t": "conf"}

    def record(step: str, sid: str) -> dict:
        info = client(sid).info()
        seen.append((step, info["status"], tuple(sorted(info)),
                     tuple((k, type(info[k]).__name__) for k in READ_KEYS)))
        return info

    def ended(step: str, sid: str) -> None:
        info = record(step, sid)
        heads = {row["node_id"] for row in client(sid).nodes() if row["is_head_node"]}
        seen.append((step + ": details", info["message"].split("\n")[0],
                     info["driver_exit_code"], info["end_time"] >= info["start_time"],
                     info["driver_node_id"] in heads, info["metadata"] == meta))

    for sid, entrypoint in ((echo, "echo first-attempt"), (failing, "false"),
                            (sleeper, "sleep 60")):
        seen.append(("submit " + entrypoint, client(sid).submit(entrypoint, {}, meta)))
        record("just submitted " + entrypoint, sid)
    seen.append(("submit a known id", client(echo).submit("echo again", {}, meta)))
    seen.append(("info of an unknown id", client(f"conf-tick-unknown-{suffix}").info()))
    for sid, entrypoint in ((echo, "echo first-attempt"), (failing, "false"),
                            (sleeper, "sleep 60")):
        hand.runs(sid, entrypoint)
    ended("succeeded", echo)
    ended("failed", failing)
    record("running", sleeper)
    seen.append(("list", sorted((job["submission_id"], job["status"], job["metadata"] == meta)
                                for job in client(echo).list_jobs()
                                if job["submission_id"] in (echo, failing, sleeper))))
    client(sleeper).stop()
    hand.settles(sleeper)
    ended("stopped", sleeper)
    client(echo).stop()  # an ended job: nothing changes
    record("stop after its end", echo)
    client(f"conf-tick-unknown-{suffix}").stop()  # a 404, which the client ignores
    seen.append(("submit a known id after its end", client(echo).submit("echo again", {}, meta)))
    seen.append(("log tail", "first-attempt" in client(echo).log_tail(50)))
    head = next(row for row in client(echo).nodes() if row["is_head_node"])
    seen.append(("head node", head["state"], head["state_message"], head["end_time_ms"],
                 tuple((k, type(v).__name__) for k, v in sorted(head.items())
                       if k not in ("resources_total", "labels"))))
    return seen


def test_the_tick_tests_ray_answers_the_supervisors_client_as_the_real_ray_does(ray_head):
    """Invariant: on every path the tick-level tests rely on (submit, a duplicate or unknown
    id, a job that succeeds, fails or is stopped, a stop of an ended or unknown job, the list,
    the log tail, the head's node row), the supervisor's client reads from tests/fakes/
    ray_jobs.py's FakeRay what it reads from a real head: statuses, record keys and their types,
    messages, exit codes, metadata."""
    suffix = uuid.uuid4().hex[:8]
    real = functools.partial(RayHttp, ray_head.dashboard_url, timeout_s=30)
    expected = tick_script(real, RealHand(real), suffix)
    fake = FakeRay()
    got = tick_script(fake, ModelHand(fake), suffix)
    assert [(g, e) for g, e in zip(got, expected) if g != e] == [] and len(got) == len(expected)
    # What the comparison stands on:
    assert ("submit a known id", False) in expected
    assert ("info of an unknown id", None) in expected
    assert [s for s in expected if s[0] == "stopped"][0][1] == "STOPPED"


# --- 3. A head restart ----------------------------------------------------------------------

def restart_script(call: Call, restart: Callable[[], Call], wait: Wait, suffix: str) -> list:
    """A record, a restart, what is left: the same observations on both."""
    sid = f"conf-restart-{suffix}"
    seen: list[tuple] = []
    body = {"entrypoint": "sleep 60", "submission_id": sid, "runtime_env": {}, "metadata": {}}
    seen.append(("submit", call("POST", "/api/jobs/", body)[0]))
    for _ in range(300):
        if json.loads(call("GET", f"/api/jobs/{sid}", None)[1])["status"] == "RUNNING":
            break
        wait(0.2)
    seen.append(("before", json.loads(call("GET", f"/api/jobs/{sid}", None)[1])["status"]))
    call = restart()
    code, text = call("GET", f"/api/jobs/{sid}", None)
    seen.append(("record after", code, tuple(p for p in PHRASES if p in text)))
    seen.append(("list after", json.loads(call("GET", "/api/jobs/", None)[1])))
    for _ in range(150):  # the new head's raylet registers with its GCS after the Jobs API is up
        nodes = json.loads(call("GET", "/api/v0/nodes?detail=true", None)[1])
        rows = nodes["data"]["result"]["result"]
        if rows:
            break
        wait(0.2)
    seen.append(("nodes after", [(row["is_head_node"], row["state"]) for row in rows]))
    seen.append(("submit again", call("POST", "/api/jobs/", body)[0]))
    return seen


def test_a_head_restart_empties_the_tables_on_the_model_as_on_a_real_head(tmp_path):
    """Invariant: a head restart without GCS fault tolerance (a head container restarted)
    leaves, on the model as on a real head, no record of before (404), an empty list, a node
    table of the new head alone, and the old id free for a new submission."""
    suffix = uuid.uuid4().hex[:8]
    session = requests.Session()
    heads = [local_ray.start(tmp_path / "first")]

    def on(head: local_ray.LocalRay) -> Call:
        def call(method: str, path: str, body: Any) -> tuple[int, str]:
            reply = session.request(method, head.dashboard_url + path, json=body, timeout=30)
            return reply.status_code, reply.text
        return call

    def restart_real() -> Call:
        local_ray.stop(heads[0])  # the head's pod is gone: GCS, job table and driver with it
        heads[0] = local_ray.start(tmp_path / "second")
        return on(heads[0])

    try:
        expected = restart_script(on(heads[0]), restart_real, time.sleep, suffix)
    finally:
        local_ray.stop(heads[0])
    world = World()
    world.kuberay.workers_up = False  # a head alone, as the local one

    def simulated(method: str, path: str, body: Any) -> tuple[int, str]:
        world.clock.sleep(0.02)
        reply = world.ray.handle(method, "http://sim" + path,
                                 json.dumps(body).encode() if body is not None else None)
        return reply.status, reply.text

    def restart_model() -> Call:
        world.ray.lose_head()
        world.ray.head_back()
        return simulated

    try:
        world.ray.worker_id = None  # no worker node, as on the local head
        world.ray.gcs.nodes = {k: v for k, v in world.ray.gcs.nodes.items()
                               if v["is_head_node"]}
        got = restart_script(simulated, restart_model, world.clock.sleep, suffix)
    finally:
        world.close()
    assert got == expected
    assert ("record after", 404, ("does not exist",)) in expected


# --- 4. The Kubernetes model's fronts -------------------------------------------------------

def kube_script(kubectl: Callable[[list[str]], tuple[int, str, str]]) -> list[tuple]:
    """The provider's kubectl calls (components/run/kube.py) and a stale conditional patch."""
    base = ["kubectl", "--kubeconfig", "k", "-n", "verl"]
    state, cluster = ["configmap", "grpo-supervisor-state"], ["raycluster", "verl-ray"]

    def run(*args: str) -> tuple:
        code, out, err = kubectl([*base, *args])
        return code, out.strip() if code == 0 and "-o" not in args else out, \
            err.split(":")[0]

    def data() -> dict:
        return json.loads(kubectl([*base, "get", *state, "-o", "json"])[1]).get("data") or {}

    version = json.loads(kubectl([*base, "get", *state, "-o", "json"])[1])["metadata"][
        "resourceVersion"]
    return [
        run("patch", *state, "--type", "merge", "-p", json.dumps({"data": {"a": "1", "b": "2"}})),
        ("data", data()),
        run("patch", *state, "--type", "merge", "-p", json.dumps({"data": {"a": None}})),
        ("data", data()),
        run("patch", *state, "--type", "merge", "-p", json.dumps(
            {"metadata": {"resourceVersion": version}, "data": {"c": "3"}})),
        ("data", data()),
        run("get", "configmap", "gone", "-o", "json"),
        run("get", *cluster, "-o", "jsonpath={.spec.suspend}"),
        run("patch", *cluster, "--type", "merge", "-p", '{"spec": {"suspend": true}}'),
        run("get", *cluster, "-o", "jsonpath={.spec.suspend}"),
        run("get", *cluster, "-o", "jsonpath={.status.state}"),
    ]


def test_the_kubernetes_model_answers_the_same_behind_every_front(tmp_path, monkeypatch):
    """Invariant: the provider's kubectl calls get the same answers from the simulation's
    SimKube and from tests/fakes/kubectl over the files tests/fakes/cluster.py keeps (one model,
    tests/models/kuberay.py): merge patches, a 409 on a stale resourceVersion, NotFound, the
    jsonpath prints, a suspend's status.state."""
    world = World()
    try:
        world.kuberay.create_configmap("grpo-supervisor-state")
        simulated = kube_script(world.kuberay.kubectl)
    finally:
        world.close()
    FileCluster(tmp_path, "grpo-supervisor-state", "verl-ray")
    monkeypatch.setenv("FAKE_KUBECTL_OBJECTS", str(tmp_path))
    fake = str(Path(__file__).parent / "fakes" / "kubectl")

    def files(argv: list[str]) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, fake, *argv[1:]], capture_output=True,
                              text=True, timeout=30)
        return done.returncode, done.stdout, done.stderr

    assert kube_script(files) == simulated
    assert (1, "", "Error from server (Conflict)") in simulated  # the stale patch refused
