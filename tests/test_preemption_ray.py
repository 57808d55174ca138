"""Preemptions on a real Ray: a GPU worker node lost mid-run, as a reclaimed spot VM goes.

One private cluster for the module (tools/local_ray.py start_cluster): a head without GPUs and
worker nodes with logical GPUs, on which tests/fakes/gpu_trainer.py places its worker actor
while its driver stays on the head. The scenario runs once, in two module fixtures, and the
tests read what it left:
- `before_the_loss`: run S (for the supervisor's tick) and run P (the provider's `create`,
  following with waitFor succeeded and maxRetries 0, in a thread) reach step 1 with their
  actors on node w1; run X fails by itself there (exit 1), every node alive;
- `after_the_loss`: w1 is killed (SIGKILL to every process of the node at once, no goodbye to
  the GCS); S and P fail with it; a new node w2 joins, as KubeRay recreates a lost worker pod,
  and P's next attempt runs there to the end. X had ended before w1 died, within the settle
  window: the case protocol.classify waits for.
The tests of X's failure come first in the file (pytest runs a module's tests in file order), so
that they see every node alive. The module takes ~40 s and 26-31 CPU-seconds (a cpuacct cgroup
around pytest: the head ~6, each node ~2, each of the 5 attempts ~2.5-3, pytest ~4;
/usr/bin/time reports ~4, the Ray processes not being pytest's children).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from components.supervisor import protocol, supervisor
from components.run.job_provider import GrpoJobProvider
from components.supervisor.protocol import Submission
from components.run.ray_access import FixedDashboard, RayJobs
from components.supervisor.supervisor_io import RayHttp
from tools import local_ray
from tests.fakes.cluster import FileCluster
from tests.fakes.ray_jobs import FakeRay
from tests.models.ray_gcs import Gcs
from tests.test_supervisor_ray import POLICY, RAY_CLUSTER, provider_props, spec_for

FAKES = Path(__file__).parent / "fakes"
# The interpreter of the Ray the cluster runs: this one's, or another release's
# (VERL_GKE_TEST_RAY, tools/local_ray.py).
PYTHON = str(Path(local_ray.RAY).with_name("python")) if local_ray.OTHER_RAY else sys.executable
TRAINER = f"{PYTHON} {FAKES / 'gpu_trainer.py'}"
# How long classify waits here for a lost node to be recorded (production: protocol.SETTLE_S,
# for a GKE node's health checks). This cluster's health checks mark a killed node DEAD ~3 s
# after the kill (local_ray.CLUSTER_ENV); X ends a few seconds before the kill.
SETTLE_S = 15.0
# The provider's calls to Ray: the supervisor tests' policy, polling less often (each poll goes
# through the fake kubectl's relay), waiting SETTLE_S for a lost node.
POLICY = dataclasses.replace(POLICY, poll_min_s=0.5, poll_max_s=1.0, settle_s=SETTLE_S)
# What Ray says of a node whose health checks failed (ray-2.47.0 src/ray/gcs/gcs_server/
# gcs_node_manager.cc InferDeathInfo, UNEXPECTED_TERMINATION; the State API's state_message).
HEALTH_CHECKS_FAILED = "health check failed due to missing too many heartbeats"


@dataclass
class Scene:
    head: local_ray.LocalRay
    runs: dict[str, dict[str, Any]]  # S, P, X -> the run's spec (run.json)
    clusters: dict[str, FileCluster]  # run -> its state ConfigMap and RayCluster, in files
    hold: Path  # once it exists, an attempt runs through (gpu_trainer.py --hold-until)
    w1: local_ray.WorkerNode | None = None
    w2: local_ray.WorkerNode | None = None
    created: dict[str, Any] = field(default_factory=dict)  # P's create: "outs" or "error"
    settled: dict[str, Any] = field(default_factory=dict)  # X with settle: "ending" or "error"
    threads: list[threading.Thread] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    def sid(self, run: str, number: int = 0) -> str:
        return protocol.attempt_id(self.runs[run]["submission_id"], number)

    def info(self, run: str, number: int = 0) -> dict[str, Any] | None:
        reply = requests.get(f"{self.head.dashboard_url}/api/jobs/{self.sid(run, number)}",
                             timeout=10)
        return None if reply.status_code == 404 else reply.json()

    def log(self, run: str, number: int = 0) -> str:
        """The attempt's driver log and Ray's message, for assertions' explanations."""
        sid = self.sid(run, number)
        reply = requests.get(f"{self.head.dashboard_url}/api/jobs/{sid}/logs", timeout=10)
        text = reply.json()["logs"] if reply.ok else f"(no log: HTTP {reply.status_code})"
        return f"{text}\n{sid}: {(self.info(run, number) or {}).get('message')}"

    def clients(self, run: str, number: int = 0) -> list[protocol.Jobs]:
        """The attempt's two Ray clients: the supervisor's (urllib) and the provider's
        (requests)."""
        sid = self.sid(run, number)
        return [RayHttp(self.head.dashboard_url, sid),
                RayJobs(FixedDashboard(self.head.dashboard_url), sid, POLICY)]

    def actor_nodes(self, run: str, number: int = 0) -> set[str]:
        """The nodes of the attempt's actors, its Ray job's (JobDetails job_id)."""
        job_id = self.info(run, number)["job_id"]
        return {actor["node_id"] for actor in self.clients(run, number)[0].actors_of(job_id)}

    def node(self, node_id: str) -> dict[str, Any]:
        return next(row for row in self.clients("S")[0].nodes() if row["node_id"] == node_id)

    def tick(self, run: str) -> dict[str, Any]:
        """One supervisor tick of the run, as its CronJob makes it (supervisor.main)."""
        return supervisor.tick(self.runs[run], lambda sid: RayHttp(self.head.dashboard_url, sid),
                               self.clusters[run], self.said.append)


# Named so that tests/conftest.py (pytest_collection_modifyitems) hands this file out with the
# other real-Ray files, first: they wait longest. Here it is a head of the module's own, which
# nodes can join, instead of the session's shared one.
@pytest.fixture(scope="module")
def shared_ray_head(tmp_path_factory):
    head = local_ray.start_cluster(tmp_path_factory.mktemp("preemption") / "head", num_cpus=2)
    try:
        yield head
    finally:
        local_ray.stop(head)


@pytest.fixture(scope="module")
def before_the_loss(shared_ray_head, tmp_path_factory):
    """S and P at step 1 on w1, P followed by the provider; X FAILED by itself on w1."""
    head, tmp = shared_ray_head, tmp_path_factory.mktemp("scene")
    hold = tmp / "w1-lost"
    runs = {
        "S": spec_for(head, f"{TRAINER} --hold-until {hold}", max_retries=0,
                      release_gpus=False, state="state-s", settle_s=SETTLE_S),
        "P": spec_for(head, f"{TRAINER} --hold-until {hold}", max_retries=0, state="state-p"),
        # Its tick looks once, at once: its test is about a failure with every node alive.
        "X": spec_for(head, f"{TRAINER} --fail", max_retries=0, release_gpus=False,
                      state="state-x", settle_s=0),
    }
    scene = Scene(head, runs, {run: FileCluster(tmp / "objects", spec["state"], RAY_CLUSTER)
                               for run, spec in runs.items()}, hold)
    with pytest.MonkeyPatch.context() as patch:
        # The provider reaches its state and its dashboard through the fake kubectl, which
        # it runs with this environment.
        patch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
        patch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{head.dashboard_port}")
        patch.setenv("FAKE_KUBECTL_SERVICE", "verl-ray-head-svc")
        patch.setenv("FAKE_KUBECTL_LOG", str(tmp / "kubectl.jsonl"))
        patch.setenv("FAKE_KUBECTL_OBJECTS", str(tmp / "objects"))
        try:
            scene.w1 = local_ray.add_node(head, "w1", num_gpus=3)
            _submit(scene, "S")
            _thread(scene, _create, scene)
            for run in ("S", "P"):
                _wait_log(scene, run, "step:1")
            _submit(scene, "X")
            x = _wait_status(scene, "X", {"FAILED"})
            _thread(scene, _settle, scene, x)  # X as its tick would classify it in production
            yield scene
        finally:
            for number in (0, 1):  # P's create returns once its attempt is STOPPED
                requests.post(f"{head.dashboard_url}/api/jobs/{scene.sid('P', number)}/stop",
                              timeout=10)
            for thread in scene.threads:
                thread.join(timeout=120)


@pytest.fixture(scope="module")
def after_the_loss(before_the_loss):
    """w1 killed; S and P FAILED with it; w2 joined; P's attempt 1 SUCCEEDED there."""
    scene = before_the_loss
    local_ray.kill_node(scene.head, scene.w1)
    for run in ("S", "P"):
        _wait_status(scene, run, {"FAILED"})
    scene.hold.touch()
    # P's attempt 1 waits for a GPU node with its driver attached to the head (see
    # local_ray.add_node: a driver that starts while a node joins may attach to it), unless the
    # provider gave up (its test says so).
    provider, deadline = scene.threads[0], time.monotonic() + 90  # P's create
    while provider.is_alive() and "Connected to Ray cluster" not in (
            scene.log("P", 1) if scene.info("P", 1) else ""):
        assert time.monotonic() < deadline, scene.log("P", 1)
        time.sleep(0.3)
    scene.w2 = local_ray.add_node(scene.head, "w2", num_gpus=1)
    for thread in scene.threads:
        thread.join(timeout=120)
    return scene


def _thread(scene: Scene, target, *args) -> None:
    thread = threading.Thread(target=target, args=args, daemon=True)
    scene.threads.append(thread)
    thread.start()


def _create(scene: Scene) -> None:
    """`pulumi up` creating run P: submit attempt 0, follow it until it SUCCEEDED."""
    try:
        provider = GrpoJobProvider(POLICY, say=scene.said.append)
        scene.created["outs"] = provider.create(provider_props(
            scene.runs["P"], wait_for="succeeded", timeout_s=360)).outs
    except Exception as error:  # noqa: BLE001 - the provider's test reports it
        scene.created["error"] = error


def _settle(scene: Scene, info: dict[str, Any]) -> None:
    """X classified from its end with the settle wait, through the supervisor's client."""
    try:
        scene.settled["ending"] = protocol.classify(
            scene.clients("X")[0], info, protocol.failure(info, 1), 1, settle_s=SETTLE_S)
    except Exception as error:  # noqa: BLE001 - the settle test reports it
        scene.settled["error"] = error


def _submit(scene: Scene, run: str) -> None:
    """Attempt 0 of the run, as `pulumi up` submits it (attempts.submit_or_adopt)."""
    spec = scene.runs[run]
    assert protocol.submit_attempt(lambda sid: RayHttp(scene.head.dashboard_url, sid),
                                   spec["submission_id"], 0, Submission.of(spec))


def _wait_status(scene: Scene, run: str, statuses: set[str], timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = scene.info(run)
        if info and info["status"] in statuses:
            return info
        time.sleep(0.3)
    raise AssertionError(f"{run} never reached {statuses}:\n{scene.log(run)}")


def _wait_log(scene: Scene, run: str, text: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log = scene.log(run)
        if text in log:
            return
        info = scene.info(run)  # None: not submitted yet (P's create runs in a thread)
        assert info is None or info["status"] not in protocol.TERMINAL, log
        time.sleep(0.3)
    raise AssertionError(f"{run} never printed {text!r}:\n{scene.log(run)}")


def _stop(scene: Scene, sid: str) -> None:
    requests.post(f"{scene.head.dashboard_url}/api/jobs/{sid}/stop", timeout=10)


# --- An attempt that failed by itself, every node alive -----------------------------------------

def test_an_attempt_that_failed_by_itself_with_every_node_alive_is_a_failure(before_the_loss):
    """An attempt that exits 1 by itself, its actor on a worker node that is alive, is a
    failure through both clients: the reason is the failure's own, nothing about nodes."""
    scene = before_the_loss
    info = scene.info("X")
    assert info["status"] == "FAILED" and "step:1" in scene.log("X"), scene.log("X")
    assert scene.actor_nodes("X") == {scene.w1.node_id}
    assert scene.node(scene.w1.node_id)["state"] == "ALIVE"
    why = protocol.failure(info, 1)
    for jobs in scene.clients("X"):
        assert protocol.classify(jobs, info, why, 1, settle_s=0) == protocol.Ending(False, why)


def test_after_a_failure_with_no_retries_left_the_tick_gives_up(before_the_loss):
    """maxRetries 0 and an attempt that failed by itself: the tick records it as a failure,
    gives up saying that the retry budget is spent (on the second tick: the first of a run
    never gives up, a `pulumi up` may be acting on it), and submits nothing."""
    scene = before_the_loss
    record = scene.tick("X")
    assert not record.get("ended") and record["ending"]["preempted"] is False, record
    record = scene.tick("X")
    assert record["attempt"] == 0 and "retry budget of 0 spent" in record["state"], record
    assert record["ending"] == {"attempt": 0, "preempted": False,
                                "reason": protocol.failure(scene.info("X"), 1)}
    assert scene.info("X", 1) is None


# --- Attempts whose GPU node was lost -------------------------------------------------------------

def test_an_attempt_whose_gpu_node_was_lost_is_a_preemption_through_both_clients(
    after_the_loss
):
    """An attempt whose worker actor's node was killed mid-run (and that FAILED with it) is a
    preemption through the supervisor's client and the provider's alike; the reason names the
    node (its IP) and Ray's own word for its death (the node row's state_message)."""
    scene = after_the_loss
    info = scene.info("S")
    assert info["status"] == "FAILED"
    lost = scene.node(scene.w1.node_id)
    assert lost["state"] == "DEAD" and HEALTH_CHECKS_FAILED in lost["state_message"], lost
    assert scene.actor_nodes("S") == {scene.w1.node_id} != {info["driver_node_id"]}
    assert lost["node_ip"] != scene.node(info["driver_node_id"])["node_ip"]  # names w1 alone
    for jobs in scene.clients("S"):
        ending = protocol.classify(jobs, info, protocol.failure(info, 1), 1, settle_s=0)
        assert ending == protocol.Ending(True, f"preempted at step 1: Ray node "
                                               f"{lost['node_ip']} died ({lost['state_message']})")


def test_a_node_death_recorded_after_the_attempt_ended_is_found_by_settling(after_the_loss):
    """An attempt that ended before Ray marked its node DEAD (a failure at its end, every node
    alive: the first test) is a preemption once classify has waited out the settle window
    from its end: the death falls within [start, end + SETTLE_S]. With the real rows moved in
    time, a death past that window or before the attempt's start is not its loss."""
    scene = after_the_loss
    info = scene.info("X")
    lost = scene.node(scene.w1.node_id)
    assert lost["end_time_ms"] > info["end_time"]  # the job ended first
    assert scene.settled.get("ending") == protocol.Ending(
        True, f"preempted at step 1: Ray node {lost['node_ip']} died "
              f"({lost['state_message']})"), scene.settled

    jobs = scene.clients("X")[0]
    actors, nodes = jobs.actors_of(info["job_id"]), jobs.nodes()
    death, window = lost["end_time_ms"], int(protocol.SETTLE_S * 1000)
    for start, end, found in [(info["start_time"], death - window, True),
                              (info["start_time"], death - window - 1, False),
                              (death + 1, death + 2, False)]:
        moved = {**info, "start_time": start, "end_time": end}
        assert bool(protocol.lost_nodes(moved, actors, nodes)) is found, (start, end)


def test_after_a_preemption_one_tick_submits_the_next_attempt_as_a_preemption(after_the_loss):
    """maxRetries 0 and a preempted attempt: one tick submits attempt 1, whose metadata counts
    one preemption before it and gives the preemption as the last failure (preemptions have a
    budget of their own, maxRetries is untouched)."""
    scene = after_the_loss
    record = scene.tick("S")
    try:
        assert record["attempt"] == 1 and record["preempted"] == 1, (record, scene.said[-5:])
        assert record["ending"]["attempt"] == 0 and record["ending"]["preempted"] is True
        metadata = scene.info("S", 1)["metadata"]
        assert metadata[protocol.ATTEMPT_KEY] == "1"
        assert metadata[protocol.PREEMPTIONS_KEY] == "1"
        assert metadata[protocol.LAST_FAILURE_KEY] == record["ending"]["reason"]
        assert metadata[protocol.LAST_FAILURE_KEY].startswith("preempted at step 1: Ray node ")
    finally:
        _stop(scene, scene.sid("S", 1))


def test_the_provider_resubmits_a_preempted_attempt_and_follows_the_next_to_success(
    after_the_loss
):
    """`pulumi up` following a run (waitFor succeeded, maxRetries 0) whose attempt 0 is
    preempted: it submits attempt 1, which places its actor on the node that replaced the lost
    one, and returns once attempt 1 SUCCEEDED, counting one preemption and no failure."""
    scene = after_the_loss
    assert "error" not in scene.created, f"{scene.created.get('error')}\n{scene.log('P', 1)}"
    outs = scene.created["outs"]
    assert outs["status"] == "SUCCEEDED" and outs["attempts"] == 2, outs
    assert (outs["preemptions"], outs["failures"]) == (1, 0)
    assert outs["last_failure"].startswith("preempted at step 1: Ray node ")
    assert scene.info("P", 1)["metadata"][protocol.PREEMPTIONS_KEY] == "1"
    assert scene.actor_nodes("P", 1) == {scene.w2.node_id}
    assert "step:2" in scene.log("P", 1)


def test_refresh_says_how_many_attempts_of_each_kind_ended_and_the_last_reason(after_the_loss):
    """`pulumi refresh` (the provider's read) reports the ended attempts of each kind and the
    last reason: P, SUCCEEDED on attempt 1 after a preemption, from attempt 1's metadata; X,
    FAILED, classified at the refresh (its node died within its window: the settle test), so
    one preemption, and the preview's reason (jobState) is that preemption."""
    scene = after_the_loss
    provider = GrpoJobProvider(POLICY, say=scene.said.append)
    for run, status, attempts in (("P", "SUCCEEDED", 2), ("X", "FAILED", 1)):
        sid = scene.runs[run]["submission_id"]
        outs = provider.read(sid, provider_props(scene.runs[run])).outs
        assert (outs["status"], outs["attempts"]) == (status, attempts), outs
        assert (outs["preemptions"], outs["failures"]) == (1, 0), outs
        assert outs["last_failure"].startswith("preempted at step 1: Ray node "), outs
    assert outs["job_state"] == outs["last_failure"]


# --- The fake Ray's rows against the real ones ----------------------------------------------------

def test_the_fake_rays_node_and_actor_rows_carry_what_the_real_ones_do(after_the_loss):
    """Every key of a FakeRay node or actor row (tests/fakes/ray_jobs.py) and of the
    simulation's (tests/models/ray_gcs.py), and each job record key classify reads, is in the
    real row of the same kind (an alive node, a dead one, an actor, an attempt that ended),
    with a value of the same type: each fake is a claim about Ray 2.47, and this holds it to
    one."""
    scene = after_the_loss
    gcs = Gcs(0)
    sim_alive = gcs.nodes[gcs.new_worker(1)]
    sim_dead = dict(gcs.nodes[gcs.new_worker(2)])
    gcs.dead(sim_dead["node_id"], 3)
    sim_dead = gcs.nodes[sim_dead["node_id"]]
    sim_actor = gcs.actor("WorkerDict", "", gcs.next_job(), sim_dead["node_id"], "ns")
    fake = FakeRay()
    jobs = fake("run-a0")
    jobs.submit("true", {}, {})
    fake.run("run-a0")
    alive = jobs.nodes()[-1]
    fake.lose_node("run-a0")
    record = jobs.info()
    info = scene.info("S")
    pairs = {
        "alive node": (alive, scene.node(scene.w2.node_id)),
        "dead node": (jobs.nodes()[-1], scene.node(scene.w1.node_id)),
        "actor": (jobs.actors_of(record["job_id"])[0],
                  scene.clients("S")[0].actors_of(info["job_id"])[0]),
        "ended attempt": ({key: record[key] for key in
                           ("job_id", "driver_node_id", "start_time", "end_time")}, info),
        "the simulation's alive node": (sim_alive, scene.node(scene.w2.node_id)),
        "the simulation's dead node": (sim_dead, scene.node(scene.w1.node_id)),
        "the simulation's actor": (sim_actor, scene.clients("S")[0].actors_of(info["job_id"])[0]),
    }
    for kind, (fake_row, real_row) in pairs.items():
        missing = set(fake_row) - set(real_row)
        assert not missing, f"{kind}: the real row has no {sorted(missing)}: {real_row}"
        types = {key: (type(value).__name__, type(real_row[key]).__name__)
                 for key, value in fake_row.items() if type(value) is not type(real_row[key])}
        assert not types, f"{kind}: (fake, real) types differ: {types}"
