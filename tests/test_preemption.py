"""Preemptions against their own budget (issue 30 §2): how an ended attempt is classified
(protocol.lost_nodes, classify), the two budgets (budget_spent, counts), and the supervisor's
ticks on an in-memory Ray (tests/fakes/ray_jobs.py, whose node and actor rows
tests/test_preemption_ray.py checks against a real Ray). No Ray is started here.
"""

from __future__ import annotations

import time

import pytest

from components.run import job_provider
from components.supervisor import protocol
from components.supervisor.protocol import Ending, attempt_id
from tests.fakes.cluster import FileCluster
from tests.fakes.ray_jobs import FakeJobs, FakeRay
from tests.test_supervisor_ticks import RUN, spec, step, submit, tick

START, END = 1_000_000_000, 1_000_600_000  # an attempt's start_time and end_time (ms)


def node(node_id: str, state: str = "DEAD", end: int = END, head: bool = False) -> dict:
    return {"node_id": node_id, "node_ip": "10.0.0.3", "is_head_node": head, "state": state,
            "state_message": "Unexpected termination: health check failed",
            "end_time_ms": end if state == "DEAD" else 0}


INFO = {"start_time": START, "end_time": END, "driver_node_id": "head", "job_id": "02000000"}
ACTORS = [{"node_id": "gpu-1", "job_id": "02000000"}]


@pytest.mark.parametrize("row, lost", [
    (node("gpu-1"), True),
    (node("gpu-1", end=START + 1), True),
    # Up to SETTLE_S after the job's end: the GCS marks a node dead only after its health
    # checks failed, while the job may fail at once on a closed socket.
    (node("gpu-1", end=END + int(protocol.SETTLE_S * 1000)), True),
    (node("gpu-1", end=END + int(protocol.SETTLE_S * 1000) + 1), False),
    (node("gpu-1", end=START - 1), False),  # died before the attempt: not its loss
    (node("gpu-1", state="ALIVE"), False),
    (node("gpu-2"), False),  # a node the attempt never ran on
    (node("head", head=True), False),  # the head's loss takes the job table: a failure
])
def test_an_attempt_is_preempted_only_by_a_node_it_ran_on_dying_during_it(row, lost):
    """Invariant: a preemption is a non-head node that hosted the attempt's driver or one of
    its actors and died between the attempt's start and SETTLE_S after its end; nothing else."""
    assert bool(protocol.lost_nodes(INFO, ACTORS, [node("head", "ALIVE", head=True), row])) \
        is lost


def test_a_preemption_spends_its_own_budget_and_a_failure_the_retries():
    """Invariant: preemptions never spend maxRetries and failures never spend maxPreemptions;
    unset maxPreemptions is no limit. The failures before attempt N are the attempts before it
    that were not preemptions (attempt 3 after 2 preemptions: 1)."""
    preempted, failed = Ending(True, "preempted"), Ending(False, "FAILED")
    assert protocol.budget_spent(3, 2, failed, max_retries=2, max_preemptions=None) is None
    assert protocol.budget_spent(3, 1, failed, max_retries=2, max_preemptions=None) == (
        "retry budget of 2 spent")
    assert protocol.budget_spent(50, 50, preempted, max_retries=0, max_preemptions=None) is None
    assert protocol.budget_spent(5, 2, preempted, max_retries=0, max_preemptions=2) == (
        "preemption budget of 2 spent")
    assert protocol.counts(3, 2, {"attempt": 3, "preempted": True}) == {
        "preemptions": 3, "failures": 1}
    assert protocol.counts(3, 2, {"attempt": 2, "preempted": True}) == {
        "preemptions": 2, "failures": 1}  # how an older attempt ended is counted already


@pytest.fixture
def world(tmp_path):
    return FakeRay(), FileCluster(tmp_path / "objects", "grpo-supervisor-state", "rc")


def test_a_preempted_run_resumes_with_no_retries_left(world):
    """maxRetries 0: an attempt whose GPU node died is resumed as the next attempt, which
    carries the count (verl-gke-preemptions 1) and the reason; a later failure of the run
    itself then ends it, with one failure and one preemption counted."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    ray.log(a0, step(12))
    ray.lose_node(a0)
    record = tick(ray, cluster, spec(max_retries=0))
    a1 = attempt_id(RUN, 1)
    assert ray.submissions == [a0, a1]
    meta = ray.records[a1]["metadata"]
    assert meta[protocol.PREEMPTIONS_KEY] == "1"
    assert meta[protocol.LAST_FAILURE_KEY].startswith("preempted at step 12: Ray node 10.0.0.3")
    assert "Unexpected termination" in meta[protocol.LAST_FAILURE_KEY]
    assert "1 preempted" in record["state"]
    ray.run(a1)
    ray.finish(a1, "FAILED")
    record = tick(ray, cluster, spec(max_retries=0))
    assert ray.submissions == [a0, a1] and "retry budget of 0 spent" in record["state"]
    assert protocol.counts(record["attempt"], record["preempted"], record["ending"]) == {
        "preemptions": 1, "failures": 1}


def test_max_preemptions_ends_the_run_and_releases_the_gpus(world):
    """maxPreemptions 1: the second preemption gives the run up, and with releaseGpus the GPUs
    go back, the reason saying which budget was spent."""
    ray, cluster = world
    run_spec = spec(max_retries=5, max_preemptions=1)
    a0 = submit(ray)
    ray.run(a0)
    ray.lose_node(a0)
    tick(ray, cluster, run_spec)
    a1 = attempt_id(RUN, 1)
    ray.run(a1)
    ray.lose_node(a1)
    record = tick(ray, cluster, run_spec)
    assert ray.submissions == [a0, a1]
    assert record["released"] and cluster.suspended()
    assert record["released_reason"] == "preemption budget of 1 spent"


def test_a_head_loss_after_a_preemption_keeps_the_count_and_spends_a_retry(world):
    """The head's loss empties the job table: the lost attempt is a failure (the head is not a
    GPU node, and what took it cannot be told), and the next attempt still carries the
    preemptions before it, from the supervisor's record."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    ray.lose_node(a0)
    tick(ray, cluster, spec(max_retries=1))
    ray.run(attempt_id(RUN, 1))
    tick(ray, cluster, spec(max_retries=1))
    ray.restart_head()
    record = tick(ray, cluster, spec(max_retries=1))
    a2 = attempt_id(RUN, 2)
    assert list(ray.records) == [a2]
    assert ray.records[a2]["metadata"][protocol.PREEMPTIONS_KEY] == "1"
    assert protocol.counts(record["attempt"], record["preempted"], record.get("ending")) == {
        "preemptions": 1, "failures": 1}


def test_a_node_recorded_dead_after_the_job_failed_is_still_a_preemption(world, monkeypatch):
    """The job fails on a closed socket before the GCS marks the node dead (the order a real
    Ray showed): a tick that finds the job FAILED moments ago and no dead node yet looks again
    SETTLE_S after the job's end, and then classifies it a preemption."""
    ray, cluster = world
    ray.clock = time.time()
    a0 = submit(ray)
    ray.run(a0)
    ray.finish(a0, "FAILED")
    worker = ray.actors[ray.records[a0]["job_id"]][0]["node_id"]
    slept = []

    def sleep(seconds: float) -> None:  # the node's health checks fail meanwhile
        slept.append(seconds)
        for row in ray.nodes:
            if row["node_id"] == worker:
                row.update(state="DEAD", end_time_ms=int(ray.clock * 1000) + 20_000)

    monkeypatch.setattr(protocol.time, "sleep", sleep)
    record = tick(ray, cluster, spec(max_retries=0), now=time.time())
    assert slept and 0 < slept[0] <= protocol.SETTLE_S
    assert record["attempt"] == 1 and record["ending"]["preempted"]


def test_a_released_runs_outputs_count_both_kinds():
    """The outputs read from the supervisor's record once the cluster is released: failures
    and preemptions of the ended attempts, and the last one's reason."""
    record = {"attempt": 3, "preempted": 2, "status": "FAILED", "last_failure": "older",
              "ending": {"attempt": 3, "preempted": False, "reason": "FAILED at step 40"}}
    outs = job_provider._from_record(record, {})
    assert (outs["attempts"], outs["failures"], outs["preemptions"]) == (4, 2, 2)
    assert outs["last_failure"] == "FAILED at step 40"


def test_an_up_during_the_ticks_wait_keeps_the_gpus_for_the_attempt_it_submitted(
        world, monkeypatch):
    """While a tick waits for a lost node's death to be recorded, `pulumi up --refresh`
    marks the run and submits its next attempt (the user's decision); the tick, finding the
    attempt a failure with no retry left, gives up but must not suspend the cluster under the
    attempt up submitted: the mark changed since the tick began. The next tick follows it."""
    ray, cluster = world
    ray.clock = time.time()
    cluster.mark({"run": RUN, "at": 1.0, "ended": None})
    a0 = submit(ray)
    ray.run(a0)
    run_spec = spec(max_retries=0)
    tick(ray, cluster, run_spec, now=time.time())  # a tick that saw the mark, a0 running
    ray.finish(a0, "FAILED")
    a1 = attempt_id(RUN, 1)

    up = []
    read_state = cluster.state

    def sleep(_: float) -> None:  # `pulumi up --refresh` meanwhile marks the run (update)...
        cluster.mark({"run": RUN, "at": 2.0, "ended": None})
        up.append("marked")

    def state() -> dict:  # ... and submits once the tick has listed the live jobs
        if up == ["marked"]:
            assert protocol.submit_attempt(ray, RUN, 1, protocol.Submission.of(spec()))
            ray.run(a1)
            up.append("submitted")
        return read_state()

    monkeypatch.setattr(protocol.time, "sleep", sleep)
    monkeypatch.setattr(cluster, "state", state)
    record = tick(ray, cluster, run_spec, now=time.time())
    assert up == ["marked", "submitted"]
    assert not cluster.suspended() and not record.get("released")
    assert ray.records[a1]["status"] == "RUNNING"
    record = tick(ray, cluster, run_spec, now=time.time())
    assert record["attempt"] == 1 and not record.get("ended") and not cluster.suspended()


def test_a_give_up_waits_for_a_tick_that_saw_the_same_mark(world):
    """A `pulumi up --refresh` that found the attempt ended writes its mark, then waits (for a
    lost node's death to be recorded) before it resubmits: a tick in between must not give the
    run up and release the GPUs under the attempt about to come. It gives up only once a tick
    has seen the same mark before (one tick later, when no up came)."""
    ray, cluster = world
    cluster.mark({"run": RUN, "at": 1.0, "ended": None})
    a0 = submit(ray)
    ray.run(a0)
    run_spec = spec(max_retries=0)
    tick(ray, cluster, run_spec)
    ray.finish(a0, "FAILED")
    cluster.mark({"run": RUN, "at": 2.0, "ended": None})  # `pulumi up --refresh` began
    record = tick(ray, cluster, run_spec)
    assert not record.get("ended") and not cluster.suspended()
    record = tick(ray, cluster, run_spec)  # that up never submitted: the run ends now
    assert "retry budget of 0 spent" in record["state"] and cluster.suspended()


@pytest.mark.parametrize("outage_ticks", [1, 2])
def test_a_state_api_failure_is_asked_again_before_it_counts_as_a_failure(
        world, monkeypatch, outage_ticks):
    """Ray's State API failing (a 500 from the node listing) makes the tick look again on the
    next one instead of deciding: a preemption seen then is resumed under maxRetries 0. Only
    when the next tick cannot tell either does the ending count as a failure (maxRetries
    bounds it), so that an outage never stops the run for good."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    ray.lose_node(a0)
    failing = [outage_ticks]
    nodes = FakeJobs.nodes

    def flaky(jobs: FakeJobs) -> list:
        if failing[0]:
            raise RuntimeError("listing nodes answered HTTP 500")
        return nodes(jobs)

    monkeypatch.setattr(FakeJobs, "nodes", flaky)
    run_spec = spec(max_retries=0)
    record = tick(ray, cluster, run_spec)
    assert ray.submissions == [a0] and not record.get("ended")
    failing[0] -= 1
    record = tick(ray, cluster, run_spec)
    if outage_ticks == 1:
        assert record["attempt"] == 1 and record["ending"]["preempted"]
    else:
        assert ray.submissions == [a0] and "retry budget of 0 spent" in record["state"]
        assert "whether a node was lost is unknown" in record["ending"]["reason"]
