"""The run's state as a type (components/supervisor/run_state.py) and the one decision both
actors make after an attempt ended without success (components/supervisor/recovery.py).

No Ray is started: the supervisor's ticks run on tests/fakes/ray_jobs.py and
tests/fakes/cluster.py as in tests/test_supervisor_ticks.py, and the provider's `_wait` on the
same in-memory job table behind the few calls it makes of ray_access.RayJobs.
"""

from __future__ import annotations

import time

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from components.run import job_provider
from components.run.following import Progress
from components.run.ray_access import RayAccessError, RequestPolicy
from components.supervisor import protocol, recovery, run_state
from components.supervisor.protocol import Ending, attempt_id
from components.supervisor.recovery import (
    Actor, Budgets, Classify, Ended, GiveUp, KeepRunning, LeaveAlone, Live, Stop, Submit, Wait,
    decide, decide_live,
)
from components.supervisor.run_state import (
    MEANING, NEXT, EndReason, RunState, reason_of, state_of,
)
from tests.fakes.cluster import FileCluster
from tests.fakes.ray_jobs import FakeJobs, FakeRay
from tests.test_supervisor_ticks import RUN, spec, step, submit, tick

ROOT = Path(__file__).resolve().parent.parent
FAILED, PREEMPTED = Ending(False, "FAILED at step 7"), Ending(True, "preempted at step 7: ...")
UNKNOWN = Ending(False, "FAILED at step 7 (whether a node was lost is unknown: 500)", known=False)
TICK, UP = Actor.SUPERVISOR, Actor.PROVIDER


def ended(actor=TICK, attempt=1, status="FAILED", preempted=0, **more) -> Ended:
    return Ended(actor, attempt, status, preempted, **more)


@pytest.mark.parametrize("seen, budgets, expected", [
    # A stop the deciding actor did not make is a person's: left alone, whoever decides.
    (ended(status="STOPPED"), Budgets(3),
     LeaveAlone(EndReason.STOPPED_BY_SOMEONE, "stopped by someone else: left as it is")),
    (ended(UP, status="STOPPED"), Budgets(3),
     LeaveAlone(EndReason.STOPPED_BY_SOMEONE, "stopped by someone else: left as it is")),
    # Not classified yet: ask Ray first (a stall stop of its own is classified too).
    (ended(), Budgets(3), Classify()),
    (ended(status="STOPPED", stopped_here=True), Budgets(3), Classify()),
    # Within the failure budget: the next attempt, the reason carried, the preemptions kept.
    (ended(ending=FAILED, preempted=2), Budgets(1), Submit(2, "FAILED at step 7", 2)),
    (ended(ending=FAILED), Budgets(1),
     GiveUp(EndReason.RETRY_BUDGET, "retry budget of 1 spent")),
    # A preemption spends its own budget, never maxRetries.
    (ended(ending=PREEMPTED), Budgets(0), Submit(2, PREEMPTED.reason, 1)),
    (ended(ending=PREEMPTED, preempted=1), Budgets(5, max_preemptions=1),
     GiveUp(EndReason.PREEMPTION_BUDGET, "preemption budget of 1 spent")),
    # Ray could not say: a tick looks again next time, `up` (its user waiting) counts a failure.
    (ended(ending=UNKNOWN), Budgets(3),
     Wait(UNKNOWN.reason + "; the next tick looks again", classify_again=True)),
    (ended(ending=UNKNOWN, asked_before=True), Budgets(3), Submit(2, UNKNOWN.reason, 0)),
    (ended(UP, ending=UNKNOWN), Budgets(3), Submit(2, UNKNOWN.reason, 0)),
    # The deadline, from the run's first start, for an actor that knows it.
    (ended(ending=FAILED, first_start=0.0), Budgets(3, deadline_s=3600),
     GiveUp(EndReason.DEADLINE, "deadline of 1 h reached")),
    (ended(UP, ending=FAILED, first_start=0.0), Budgets(3), Submit(2, "FAILED at step 7", 0)),
    # No give-up while a `pulumi up` may be acting on the run: the next tick decides.
    (ended(ending=FAILED, mark_settled=False), Budgets(1),
     Wait("ended (FAILED at step 7); not giving up before the next tick: `pulumi up` may be "
          "acting on the run")),
    (ended(ending=FAILED, mark_settled=False), Budgets(3), Submit(2, "FAILED at step 7", 0)),
    # The export: every attempt a failure under maxRetries, no deadline, its own words.
    (ended(status="STOPPED", export=True), Budgets(3),
     LeaveAlone(EndReason.STOPPED_BY_SOMEONE, "export stopped by someone else: left as it is")),
    (ended(ending=Ending(False, "export FAILED"), export=True, first_start=0.0),
     Budgets(3, deadline_s=3600), Submit(2, "export FAILED", 0)),
    (ended(ending=Ending(False, "export FAILED"), export=True), Budgets(1),
     GiveUp(EndReason.EXPORT_FAILED, "export failed; retry budget of 1 spent")),
    (ended(ending=PREEMPTED, export=True), Budgets(1, max_preemptions=5),
     GiveUp(EndReason.EXPORT_FAILED, "export failed; retry budget of 1 spent")),
    (ended(ending=Ending(False, "export FAILED"), export=True, mark_settled=False), Budgets(1),
     Wait("ended (export FAILED); not giving up before the next tick: `pulumi up` may be "
          "acting on the run")),
    # Lost with the head: a failure, known without asking Ray.
    (ended(status="LOST", ending=Ending(False, "lost with the Ray head at step 3")), Budgets(3),
     Submit(2, "lost with the Ray head at step 3", 0)),
])
def test_the_decision_after_an_attempt_ended(seen, budgets, expected):
    """Invariant: one table says what follows an attempt that ended without success, for
    either actor; where they differ, it is an input (the actor, what it stopped itself, the
    deadline it knows, whether the provider's mark is settled), at 7200 s after the start."""
    assert decide(seen, budgets, 7200.0) == expected


@pytest.mark.parametrize("seen, budgets, expected", [
    # Within the deadline and stepping: left running.
    (Live(0, first_start=0.0, progress=7000.0, step=12), Budgets(3, deadline_s=9000, stall_s=600),
     KeepRunning()),
    # Past the deadline from the run's first attempt (not this one's start): the run ends.
    (Live(3, first_start=0.0, progress=7190.0, step=40), Budgets(3, deadline_s=3600, stall_s=600),
     Stop("deadline of 1 h reached", EndReason.DEADLINE)),
    # No new step for stall_s: stopped, and `decide` follows it as a stop of the tick's own.
    (Live(0, first_start=0.0, progress=6000.0, step=12), Budgets(3, deadline_s=9000, stall_s=600),
     Stop("no new step for 10 min after step 12")),
    (Live(1, first_start=0.0, progress=6000.0), Budgets(3, deadline_s=9000, stall_s=600),
     Stop("no new step for 10 min before its first step")),
    # The deadline first: a stalled run past it ends, it is not resubmitted.
    (Live(0, first_start=0.0, progress=0.0), Budgets(3, deadline_s=3600, stall_s=600),
     Stop("deadline of 1 h reached", EndReason.DEADLINE)),
    # An actor not given a budget does not apply it.
    (Live(0, first_start=0.0, progress=0.0), Budgets(3), KeepRunning()),
])
def test_the_decision_about_a_live_attempt(seen, budgets, expected):
    """Invariant: one function says whether a live attempt is stopped (the deadline ends the
    run; a stall is a stop of the supervisor's own that `decide` then follows), at 7200 s."""
    assert decide_live(seen, budgets, 7200.0) == expected


def test_a_policy_changed_in_recovery_decide_live_changes_the_tick(tmp_path, monkeypatch):
    """The tick follows a live attempt through recovery.decide_live alone: a policy that stops
    a run that steps well (here: after step 3) is followed with no change to the tick, and the
    STOPPED attempt is then its own stop, resubmitted through `decide`."""
    shipped = recovery.decide_live

    def stop_after_step_3(seen, budgets, now):
        if seen.step is not None and seen.step >= 3:
            return Stop("stopped after step 3 by a policy of the test's own")
        return shipped(seen, budgets, now)

    monkeypatch.setattr(recovery, "decide_live", stop_after_step_3)
    ray = FakeRay()
    cluster = FileCluster(tmp_path, "grpo-supervisor-state", "rc")
    a0 = submit(ray)
    ray.run(a0)
    run = spec(max_retries=2, release_gpus=False)
    ray.log(a0, step(2))
    assert tick(ray, cluster, run)["state"].startswith("RUNNING")
    ray.log(a0, step(3))
    record = tick(ray, cluster, run)
    assert record["stopped"]["reason"] == "stopped after step 3 by a policy of the test's own"
    assert ray.records[a0]["status"] == "STOPPED"
    record = tick(ray, cluster, run)
    assert record["last_failure"] == "stopped after step 3 by a policy of the test's own"
    assert ray.submissions == [a0, attempt_id(RUN, 1)]


def test_every_end_reason_says_whether_it_gives_the_gpus_back():
    """A run the supervisor gave up releases the GPUs; one a person stopped or Pulumi ended
    keeps them (docs/run-lifecycle.md section 3)."""
    assert {reason for reason in EndReason if reason.releases} == {
        EndReason.RETRY_BUDGET, EndReason.PREEMPTION_BUDGET, EndReason.DEADLINE,
        EndReason.EXPORT_FAILED}


# --- records written before the type existed ---------------------------------------------------

# The records the supervisor of 789f86a (before run_state.py) saved, one per state a run can be
# in, made by ticks on tests/fakes (tests/data/supervisor_records_789f86a.py says how).
BEFORE = json.loads((ROOT / "tests" / "data" / "supervisor-records-789f86a.json").read_text())
EXPECTED = {
    "pending": (RunState.PENDING, None), "running": (RunState.RUNNING, None),
    "failed-resubmitted": (RunState.PENDING, None), "lost-resubmitted": (RunState.PENDING, None),
    "preempted-resubmitted": (RunState.PENDING, None),
    "failed-waiting-for-next-tick": (RunState.FAILED, None),
    "unknown-ending": (RunState.FAILED, None),
    "lost-waiting-for-mark": (RunState.LOST, None),
    "stall-stop-saved": (RunState.STOPPING, None),
    "stalled-waiting-for-mark": (RunState.STOPPED, None),
    "submit-intent": (RunState.SUBMITTING, None),
    "succeeded-kept": (RunState.SUCCEEDED, None),
    "exporting": (RunState.EXPORTING, None), "export-intent": (RunState.EXPORTING, None),
    "release-intent": (RunState.RELEASING, None),
    "exported-released": (RunState.RELEASED, None),
    "budget-kept": (RunState.ENDED, EndReason.RETRY_BUDGET),
    "budget-released": (RunState.RELEASED, EndReason.RETRY_BUDGET),
    "preemption-budget-released": (RunState.RELEASED, EndReason.PREEMPTION_BUDGET),
    "deadline-stopped": (RunState.RELEASED, EndReason.DEADLINE),
    "deadline-released": (RunState.RELEASED, EndReason.DEADLINE),
    "export-failed-released": (RunState.RELEASED, EndReason.EXPORT_FAILED),
    "stopped-by-someone": (RunState.ENDED, EndReason.STOPPED_BY_SOMEONE),
    "export-stopped-by-someone": (RunState.ENDED, EndReason.STOPPED_BY_SOMEONE),
    "ended-by-pulumi": (RunState.ENDED, EndReason.BY_PULUMI),
    "superseded": (RunState.ENDED, EndReason.BY_PULUMI),
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_record_written_before_the_type_has_its_state_and_reads_the_same(name):
    """Records in real clusters were written by the code before run_state.py: each has a state
    and, once ended, a reason, and `protocol.describe` (job.state) still says what it said."""
    record = BEFORE[name]["record"]
    assert (state_of(record), reason_of(record)) == EXPECTED[name]
    assert protocol.describe(record) == record["state"]


@pytest.fixture
def world(tmp_path):
    return FakeRay(), FileCluster(tmp_path / "objects", "grpo-supervisor-state", "rc")


def test_a_tick_finishes_what_a_tick_before_the_type_started(world):
    """A dead tick's intent saved by the code before run_state.py is finished by the new code:
    its submission is made once, its release without Ray, an ending Ray could not tell is asked
    again."""
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "FAILED")
    cluster.save(BEFORE["submit-intent"]["record"])
    tick(ray, cluster, spec())
    tick(ray, cluster, spec())
    assert ray.submissions == [a0, attempt_id(RUN, 1)]

    ray, cluster = FakeRay(), FileCluster(cluster.directory.parent / "b", "s", "rc")
    cluster.save(BEFORE["release-intent"]["record"])
    ray.down = True  # the head went with the suspension
    assert tick(ray, cluster, spec())["released"] and cluster.suspended()

    ray, cluster = FakeRay(), FileCluster(cluster.directory.parent / "c", "s", "rc")
    a0 = submit(ray)
    ray.run(a0)
    ray.lose_node(a0)
    cluster.save(BEFORE["unknown-ending"]["record"])
    record = tick(ray, cluster, spec(max_retries=0))
    assert record["attempt"] == 1 and record["ending"]["preempted"]


# --- the state table of docs/run-lifecycle.md -------------------------------------------------


def _doc_table() -> dict[str, tuple[str, set[str]]]:
    text = (ROOT / "docs" / "run-lifecycle.md").read_text()
    table = text.split("**The run's state**", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = (cells[1], set(re.findall(r"`([A-Z_]+)`", cells[2])))
    return rows


def test_the_state_table_in_the_docs_is_the_code():
    """docs/run-lifecycle.md's table of states names every RunState, with its meaning and the
    states a tick can take it to, as run_state.py says them (MEANING, NEXT)."""
    documented = _doc_table()
    assert list(documented) == [state.value for state in RunState]
    for state in RunState:
        meaning, following = documented[state.value]
        assert meaning == MEANING[state]
        assert following == {other.value for other in NEXT[state]}, state


def test_every_transition_a_tick_makes_is_one_the_table_allows(world, monkeypatch):
    """Each write of the record is a named transition (run_state.set_*), and each change of
    state one of them makes, over a run that fails, stalls, is resumed, succeeds, exports and
    is released, and over one a person stops, is one NEXT (or a move open to many states)
    allows. (Run over tests/test_supervisor_ticks.py and tests/test_preemption.py too when
    run_state.py was written: no other change.)"""
    changes: set[tuple[RunState, RunState, str]] = set()
    for name in [name for name in dir(run_state) if name.startswith("set_")] + ["clear_intent"]:
        def traced(record, *args, _write=getattr(run_state, name), _name=name, **kwargs):
            before = state_of(record)
            _write(record, *args, **kwargs)
            changes.add((before, state_of(record), _name))
        monkeypatch.setattr(run_state, name, traced)

    ray, cluster = world
    run_spec = spec(max_retries=2, stall_s=60, export={"entrypoint": "merge"})
    a0 = submit(ray)
    ray.run(a0)
    ray.log(a0, step(3))
    tick(ray, cluster, run_spec)
    ray.finish(a0, "FAILED")
    for _ in range(2):
        tick(ray, cluster, run_spec)
    a1 = attempt_id(RUN, 1)
    ray.run(a1)
    tick(ray, cluster, run_spec, now=ray.clock + 100)  # stalled: stopped, then resumed
    tick(ray, cluster, run_spec, now=ray.clock + 101)
    a2 = attempt_id(RUN, 2)
    ray.run(a2)
    ray.finish(a2, "SUCCEEDED")
    tick(ray, cluster, run_spec)
    ray.finish(attempt_id(protocol.export_run(RUN), 0), "SUCCEEDED")
    record = tick(ray, cluster, run_spec)
    assert record["released"] and ray.submissions[:3] == [a0, a1, a2]

    ray, cluster = FakeRay(), FileCluster(cluster.directory.parent / "b", "s", "rc")
    ray.finish(submit(ray), "STOPPED")
    tick(ray, cluster, run_spec)

    path = [(before, after) for before, after, _ in changes if before is not after]
    assert [(b, a) for b, a in path if not run_state.may_follow(b, a)] == []
    assert {(RunState.STOPPING, RunState.STOPPED), (RunState.STOPPED, RunState.SUBMITTING),
            (RunState.SUCCEEDED, RunState.EXPORTING), (RunState.RELEASING, RunState.RELEASED),
            (RunState.NEW, RunState.STOPPED), (RunState.STOPPED, RunState.ENDED)} <= set(path)


# --- one decision, two actors ---------------------------------------------------------------


class ProviderJobs:
    """The calls job_provider._wait makes of ray_access.RayJobs, on the fake job table; an
    attempt it submits starts running at once (the next attempt of a run that failed)."""

    def __init__(self, ray: FakeRay, submission_id: str) -> None:
        self.ray, self.submission_id = ray, submission_id
        self.policy = RequestPolicy(poll_min_s=0.01, poll_max_s=0.01, confirm_running_s=0.0,
                                    settle_s=0.0)
        self._jobs = FakeJobs(ray, submission_id)

    def for_id(self, submission_id: str) -> "ProviderJobs":
        return ProviderJobs(self.ray, submission_id)

    def submit(self, *args, **kwargs) -> bool:
        if not self._jobs.submit(*args, **kwargs):
            return False
        self.ray.run(self.submission_id)
        return True

    def where(self) -> str:
        return f"Ray job {self.submission_id}"

    def __getattr__(self, name):  # info, list_jobs, log_tail, nodes, actors_of
        return getattr(self._jobs, name)


def _provider_waits(ray: FakeRay, deadline_s: float | None = None) -> str:
    """`up` following attempt 0 (waitFor running, maxRetries 2): what it did."""
    jobs = ProviderJobs(ray, RUN)
    props = {"wait_for": "running", "timeout_s": 5, "max_retries": 2, "max_preemptions": None,
             "deadline_s": deadline_s,
             **{key: spec()[key] for key in ("entrypoint", "runtime_env", "metadata")}}
    progress = Progress(jobs, jobs.policy, lambda _: None)
    try:
        attempt, info = job_provider._wait(jobs, 0, props, jobs.policy, progress,
                                           lambda *_: None)
    except RayAccessError as error:
        return str(error).split(" (", 1)[0]
    return f"{attempt.submission_id} {info['status']}"


def _supervisor_ticks(ray: FakeRay, cluster: FileCluster) -> str:
    """Two ticks (the second sees the same mark) after attempt 0 failed: what they did."""
    for _ in range(2):
        record = tick(ray, cluster, spec(max_retries=2, release_gpus=False))
    return record["state"]


@pytest.mark.parametrize("policy", ["as shipped", "no retry after a failure"])
def test_a_policy_changed_in_recovery_decide_changes_both_actors(tmp_path, monkeypatch, policy):
    """The decision after a failure is made in one place: a policy that gives up where the
    shipped one resubmits (here: never retry a failure) is followed by the supervisor's tick and
    by `up`'s wait alike, with no change to either actor."""
    if policy == "no retry after a failure":
        shipped = recovery.decide

        def no_retry(seen, budgets, now):
            decision = shipped(seen, budgets, now)
            if isinstance(decision, Submit) and not seen.ending.preempted:
                return GiveUp(EndReason.RETRY_BUDGET, "no retry after a failure")
            return decision

        monkeypatch.setattr(recovery, "decide", no_retry)
    outcomes = []
    for actor in ("supervisor", "provider"):
        ray = FakeRay()
        cluster = FileCluster(tmp_path / actor, "grpo-supervisor-state", "rc")
        a0 = submit(ray)
        ray.run(a0)
        ray.finish(a0, "FAILED")
        outcomes.append(_supervisor_ticks(ray, cluster) if actor == "supervisor"
                        else _provider_waits(ray))
        outcomes.append(ray.submissions)
    if policy == "as shipped":
        assert outcomes == ["PENDING, attempt 2", [a0, attempt_id(RUN, 1)],
                            f"{attempt_id(RUN, 1)} RUNNING", [a0, attempt_id(RUN, 1)]]
    else:
        assert outcomes == ["FAILED, no retry after a failure", [a0],
                            f"Ray job {a0} ended FAILED before its first step; no retry after "
                            "a failure", [a0]]


def test_ended_is_a_value():
    """Ended and the decisions are frozen values: `decide` has no state of its own."""
    seen = ended(ending=FAILED)
    with pytest.raises(AttributeError):
        seen.attempt = 2  # type: ignore[misc]
    assert replace(seen, attempt=2).attempt == 2 and seen.attempt == 1


def test_up_gives_a_run_past_its_deadline_up_as_a_tick_does(tmp_path):
    """Past job.deadlineHours (from the run's first attempt) a failed attempt is not followed by
    another, whichever actor sees it: the provider's wait is given the deadline too (before,
    `up` resubmitted it and the supervisor stopped that attempt at its next tick)."""
    outcomes = []
    for actor in ("supervisor", "provider"):
        ray = FakeRay()
        a0 = submit(ray)
        ray.run(a0)
        ray.finish(a0, "FAILED")
        time.sleep(0.01)  # the attempt started before `now`, past a deadline of 1 ms
        if actor == "supervisor":
            cluster = FileCluster(tmp_path / actor, "grpo-supervisor-state", "rc")
            for _ in range(2):
                record = tick(ray, cluster, spec(max_retries=2, release_gpus=False,
                                                 deadline_s=0.001))
            outcomes.append(record["ended"]["cause"])
        else:
            outcomes.append(_provider_waits(ray, deadline_s=0.001))
        outcomes.append(ray.submissions)
    assert outcomes == ["deadline", [a0],
                        f"Ray job {a0} ended FAILED before its first step; deadline of 0.001 s reached",
                        [a0]]
