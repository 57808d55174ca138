"""The run's lifecycle in the simulated world (tests/sim/): the program's real provider and
supervisor against Ray, KubeRay, the CronJob and the engine, with the invariants of
tests/sim/invariants.py checked after every step.

- One replayed sequence per finding of the review (../shared/reference/RUN-LIFECYCLE-REVIEW.md):
  the shortest sequence `make explore` found for it (or a shorter one written from it), run as
  the state machine runs it. On the code before the protocol's fixes each breaks exactly the
  invariant named (xfail(strict=True, raises=that invariant's type): any other failure fails).
- A fixed-seed exploration (derandomized, small): random sequences over every rule.
- The world itself: deterministic (one sequence twice gives the same history).
`make explore` runs the long exploration (tests/sim/explore.py).
"""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.sim.invariants import Violation, violation_type
from tests.sim.machine import DEADLINES_H, LifecycleMachine, met
from tests.sim.world import EPOCH

SETUP = dict(max_retries=1, max_preemptions=None, export=False, release=False, keep=2,
             wait_for="first-step", linger=0.2, phase=7.0)


def replay(setup: dict, *steps: tuple, prefer: str | None = None,
           happened=lambda _: True) -> LifecycleMachine:
    """Run `steps` ((rule, kwargs) pairs) as hypothesis would: the invariant `prefer` is
    checked after each step (so that the finding's own violation is the one reported), every
    invariant after the last."""
    machine = LifecycleMachine()
    machine.PREFER = prefer
    try:
        machine.setup(**{**SETUP, **setup})
        machine.holds()
        for name, kwargs in steps:
            getattr(machine, name)(**kwargs)
            machine.world.observer.check(prefer, only=prefer is not None)
        machine.holds()
        assert happened(machine), "the sequence no longer reaches the situation it is about"
        return machine
    finally:
        machine.teardown()


def step(name: str, **kwargs) -> tuple:
    return name, kwargs


WAIT_600 = step("wait", seconds=600.0)


def attempts(m: LifecycleMachine) -> list:
    return [j for j in m.world.ray.submissions if m.world.kind_of(j) == "train"]


# (finding, the invariant it breaks, setup, steps, what shows the sequence did what it is
# about: so that a sequence cannot pass because it no longer reaches its situation)
FINDINGS = [
    ("1: destroy after a release port-forwards to a head with no pod", "destroy",
     dict(max_retries=0, release=True), [step("up"), WAIT_600, step("destroy")],
     lambda m: m.world.kuberay.suspends and m.gone),
    ("2: the old run's supervisor resubmits its export during the new run's up",
     "ended-run-idle", dict(max_retries=0, export=True, release=True),
     [step("up"), step("attempt_does", kind="succeed"), step("wait", seconds=60.0),
      step("replace", check_too=False), WAIT_600],
     lambda m: len(m.world.runs) == 2 and any(
         run is m.world.runs[0] and at > run.ended_at for at, run, _ in m.world.cron.history)),
    ("3: a head restart empties the job table and the run is never resumed", "resume-lost",
     {}, [step("up"), step("head_restart"), WAIT_600],
     lambda m: "lost" in m.world.observer.causes and len(attempts(m)) >= 2),
    ("4: a tick dying between DELETE and the resubmission abandons the run",
     "resume-failed", {}, [step("up"), step("attempt_does", kind="fail"),
                           step("tick_dies", n=1, kind="kill"), WAIT_600],
     lambda m: any(o == "died" for _, _, o in m.world.cron.history) and len(attempts(m)) >= 2),
    ("5: up reports the previous attempt's phases and first step", "up-reports",
     dict(max_retries=0), [step("up"), step("attempt_does", kind="fail"),
                           step("up_refresh")],
     lambda m: len(attempts(m)) >= 2),
    ("6: a given-up run keeps the GPUs", "release", dict(max_retries=0, release=True),
     [step("up"), step("attempt_does", kind="fail"), WAIT_600],
     lambda m: m.world.kuberay.suspend is True),
    ("7: keepCheckpoints 1 prunes the step the tracker names", "tracker", dict(keep=1),
     [step("up"), WAIT_600],
     lambda m: any("keep" in r.lower() for r in m.refusals) or any(
         b.tracker for b in m.engine.buckets.values())),
    ("8: a delete removes the other actor's fast-failing next attempt", "budget-failures",
     dict(max_retries=2, linger=3.0),
     [step("up"), step("next_attempts", kind="crash"), step("attempt_does", kind="fail"),
      step("wait", seconds=60.0), step("wait", seconds=60.0), step("wait", seconds=2.0),
      step("wait", seconds=2.0), step("wait", seconds=0.5), step("up_refresh"), WAIT_600],
     lambda m: len(attempts(m)) >= 3),
]
# The findings the protocol's fixes (branch `protocol`, merged) close. A finding not listed
# breaks its invariant here (xfail), and the fixed-seed exploration meets one of them; on the
# code before the fixes (7f47822) every one does (set FIXED to set() to see it).
FIXED: set[str] = {"1", "2", "3", "4", "5", "6", "7", "8"}
ALL_FIXED = FIXED >= {case[0].split(":")[0] for case in FINDINGS}


@pytest.mark.parametrize(
    ("finding", "invariant", "setup", "steps", "happened"),
    [pytest.param(*case, id=case[0].split(":")[0], marks=[] if case[0][0] in FIXED else
                  pytest.mark.xfail(strict=True, raises=violation_type(case[1]),
                                    reason=f"review finding {case[0]}"))
     for case in FINDINGS])
def test_a_finding_of_the_review_no_longer_breaks_its_invariant(finding, invariant, setup,
                                                                steps, happened):
    """Invariant: the sequence that exposed the finding keeps every invariant, and still
    reaches the situation it is about (a release before the destroy, a tick of the old spec
    during the new run's up, a lost attempt, a killed tick, ...)."""
    replay(setup, *steps, prefer=invariant, happened=happened)


# Found by `make explore` after the protocol's merge (seeds 81 and 101): attempts that the head
# lost were not counted. A tick that found no attempt of its run (the head restarted before the
# supervisor's first tick) submitted attempt 0 again; an `up` after a head restart started the
# run's attempts from 0 again. Fixed by the provider's note of each attempt it submits, kept in
# the state ConfigMap (protocol.SUBMITTED_KEY, lost_attempt), which the head does not take along.
LOST = [
    ("a head loss before the first tick spends the budget of maxRetries 0", "budget",
     dict(max_retries=0), [step("up"), step("head_restart"), step("wait", seconds=130.0)],
     lambda m: len(attempts(m)) == 1 and m.world.clock.now >= 130.0),
    ("after a head loss before the first tick, the next attempt is 1", "budget",
     dict(max_retries=1), [step("up"), step("head_restart"), step("wait", seconds=130.0)],
     lambda m: [j.sid.rsplit("-", 1)[1] for j in attempts(m)] == ["a0", "a1"]),
    ("an up after a head loss continues the attempts, it does not reset the budget", "budget",
     dict(max_retries=1),
     [step("up"), step("next_attempts", kind="crash"), step("replace", check_too=False),
      step("head_restart"), step("up")],
     lambda m: len(attempts(m)) >= 4),
    # Found by the long exploration (seed 11) once the deadline was drawn: the first create
    # failed (its notes had no state ConfigMap to go to: the supervisor was created after the
    # job), the head then lost a0 and a1, and the next up began again at a0. Fixed by creating
    # the state ConfigMap before the job (supervision.py RunSupervisor).
    ("an up after a failed create and a head loss continues the attempts", "budget",
     dict(max_retries=1),
     [step("next_attempts", kind="crash"), step("up"), step("head_restart"), step("up")],
     lambda m: [j.sid.rsplit("-", 1)[1] for j in attempts(m)] == ["a0", "a1", "a2"]),
]


@pytest.mark.parametrize(
    ("case", "invariant", "setup", "steps", "happened"),
    [pytest.param(*case, id=f"lost-{i}") for i, case in enumerate(LOST, start=1)])
def test_an_attempt_lost_with_the_head_counts_against_the_budget(case, invariant, setup, steps,
                                                                  happened):
    """Invariant: attempts stay within maxRetries (+1 per explicit up after a failure), also
    when the head lost the records of earlier ones."""
    replay(setup, *steps, prefer=invariant, happened=happened)


# Issue 30 section 2: an attempt ended by a preemption (a Ray node it ran on died during it) is
# resumed under maxPreemptions (unset: no limit within the deadline), not maxRetries. The world
# loses the GPU worker node (rule `preempt`): the attempt's driver fails 3 s later with
# ActorUnavailableError, Ray marks the node DEAD `dead_after` s after that failure, and KubeRay's
# replacement joins as a new node a minute later. The first tick after `up` is at t=247 s.
def preempted(job) -> bool:
    return job.lost_node is not None


def node_end_after_job_s(m: LifecycleMachine, job) -> float:
    node = m.world.ray.gcs.nodes[job.lost_node]
    return (node["end_time_ms"] - job.end_ms) / 1000


LOSE_WORKER = step("preempt", dead_after=0.0, back_after=60.0, then=0.0)
PREEMPTED = [
    ("maxRetries 0: a preemption is resumed as attempt 1, which counts it and goes on",
     "resume", dict(max_retries=0),
     [step("up"), step("wait", seconds=60.0), LOSE_WORKER, WAIT_600],
     lambda m: len(attempts(m)) == 2 and preempted(attempts(m)[0])
     and attempts(m)[1].metadata.get("verl-gke-preemptions") == "1"
     and attempts(m)[1].status == "SUCCEEDED"),
    ("the node marked dead 25 s after the job failed, a tick in between: still a preemption",
     "resume", dict(max_retries=0),
     [step("up"), step("wait", seconds=100.0),
      step("preempt", dead_after=25.0, back_after=60.0, then=0.0), WAIT_600],
     lambda m: len(attempts(m)) == 2 and preempted(attempts(m)[0])
     and 24 < node_end_after_job_s(m, attempts(m)[0]) < 26
     and any(attempts(m)[0].end_ms / 1000 - EPOCH < at < attempts(m)[0].end_ms / 1000 - EPOCH
             + 25 for at, _, _ in m.world.cron.history)
     and attempts(m)[1].metadata.get("verl-gke-preemptions") == "1"),
    ("maxPreemptions 1: a second preemption gives the run up and releases the GPUs",
     "budget-preemptions", dict(max_retries=2, max_preemptions=1, release=True),
     [step("up"), step("wait", seconds=60.0), LOSE_WORKER, step("wait", seconds=130.0),
      step("wait", seconds=60.0), LOSE_WORKER, WAIT_600],
     lambda m: len(attempts(m)) == 2 and all(preempted(j) for j in attempts(m))
     and m.world.kuberay.suspend is True),
    ("maxRetries 0: a failure (no node lost) still ends the run and releases the GPUs",
     "budget-failures", dict(max_retries=0, release=True),
     [step("up"), step("attempt_does", kind="fail"), WAIT_600],
     lambda m: len(attempts(m)) == 1 and not preempted(attempts(m)[0])
     and m.world.kuberay.suspend is True),
]


@pytest.mark.parametrize(
    ("case", "invariant", "setup", "steps", "happened"),
    [pytest.param(*case, id=f"preempted-{i}") for i, case in enumerate(PREEMPTED, start=1)])
def test_a_preemption_is_resumed_under_its_own_budget(case, invariant, setup, steps, happened):
    """Invariant: an attempt a lost node failed is resumed while maxPreemptions (unset: no
    limit) and the deadline last, whatever maxRetries says, also when Ray marks the node dead
    after the job failed; a preemption past maxPreemptions, like a failure past maxRetries,
    gives the run up and releases the GPUs."""
    replay(setup, *steps, prefer=invariant, happened=happened)


# Found by `make explore` (seeds 2026 and 7, without up_fault) on 7ea9fa0, not on 64de651: a
# tick finds attempt 0 FAILED less than SETTLE_S after its end and sleeps until then to look for a
# lost node (protocol.classify); meanwhile an explicit `up --refresh`, which wrote its mark before
# the tick began, waited out the same settle and submitted attempt 1. The tick woke, gave attempt
# 0 up (maxRetries 0) and suspended the RayCluster under attempt 1. Fixed in the supervisor: a
# give-up waits for a tick that saw the same mark on the tick before (_Tick.mark_seen), and a
# release for a mark unchanged since the tick began (tests/test_preemption.py has both at the
# tick's level).
def test_a_give_up_after_the_settling_wait_spares_an_attempt_submitted_meanwhile():
    """Invariant: the RayCluster is never suspended while an attempt of the run is live, also
    when the supervisor decided while it waited SETTLE_S for a node's death."""
    replay(dict(max_retries=0, release=True, phase=0.0), step("up"),
           step("wait", seconds=60.0), step("attempt_does", kind="fail"), step("up_refresh"),
           WAIT_600, prefer="new-run-safe", happened=lambda m: len(attempts(m)) == 2)


# The run's deadline (job.deadlineHours, drawn per sequence: tests/sim/machine.py DEADLINES_H).
# Both actors are given it (the supervisor's spec, the provider's `deadline_s` input, as
# grpo_job.py gives it); past it neither submits an attempt of its own, and the tick stops a
# live one and gives the run up. An explicit `up` that finds the newest attempt FAILED still
# resubmits it (attempts.py submit_or_adopt: the user's decision). Each sequence breaks the
# invariant named when production ignores the deadline there (a mutation of recovery.py).
DEADLINE = [
    ("a 3 min deadline: the tick stops the live attempt, gives the run up, releases the GPUs",
     "deadline-stop", dict(max_retries=0, release=True, deadline_h=0.05, phase=0.0),
     [step("up"), WAIT_600],
     lambda m: len(attempts(m)) == 1 and attempts(m)[0].status == "STOPPED"
     and m.world.kuberay.suspend is True),
    ("an up past the deadline resubmits once; the provider gives the crashed attempt up",
     "deadline-submit", dict(max_retries=1, deadline_h=0.05),
     [step("up"), step("next_attempts", kind="crash"),
      step("preempt_training", back_after=60.0, dead_after=-1.0, then=5.0),
      step("wait", seconds=2900.0), step("up_refresh")],
     lambda m: [j.status for j in attempts(m)] == ["FAILED", "FAILED"]
     and "deadline of 3 min reached" in m.refusals[-1]),
    # Found by the long exploration (seed 11) once the deadline was drawn: the head lost
    # attempt 0 before the first tick, and attempt 1 began the deadline again from its own
    # start. Fixed by the run's first start in the provider's note (protocol.known_first_start).
    ("a head loss before the first tick keeps the deadline of the run's first start",
     "deadline-stop", dict(max_retries=1, deadline_h=0.1),
     [step("up"), step("head_restart"), WAIT_600],
     lambda m: len(attempts(m)) == 2 and attempts(m)[1].status == "STOPPED"),
]


@pytest.mark.parametrize(
    ("case", "invariant", "setup", "steps", "happened"),
    [pytest.param(*case, id=f"deadline-{i}") for i, case in enumerate(DEADLINE, start=1)])
def test_the_deadline_ends_the_run_for_both_actors(case, invariant, setup, steps, happened):
    """Invariant: past the run's deadline no actor submits an attempt of its own (only an
    explicit `up` after a failure does), a live attempt is stopped by the next tick, and with
    releaseGpus the run given up at the deadline gets its GPUs released."""
    replay(setup, *steps, prefer=invariant, happened=happened)


def test_both_actors_are_given_the_drawn_deadline():
    """The engine model passes the deadline as production does: the supervisor's spec
    (supervision.py) and the provider's inputs (grpo_job.py `deadline_s`) both carry the one
    drawn for the sequence; a provider without it never gives a run up at the deadline."""
    machine = LifecycleMachine()
    try:
        machine.setup(**{**SETUP, "deadline_h": DEADLINES_H[0]})
        props = machine.engine.job_props()
        drawn = DEADLINES_H[0] * 3600
        assert props["deadline_s"] == machine.engine.spec(props)["deadline_s"] == drawn
        assert machine.max_virtual_s > drawn
    finally:
        machine.teardown()


def test_the_world_is_deterministic():
    """Invariant: one sequence gives one history (same submissions, times, statuses, prints),
    so a failing sequence replays exactly."""
    def history() -> list:
        machine = LifecycleMachine()
        try:
            machine.setup(**SETUP)
            for name, kwargs in [step("up"), step("attempt_does", kind="fail"), WAIT_600,
                                 step("head_restart"), step("wait", seconds=130.0)]:
                getattr(machine, name)(**kwargs)
            world = machine.world
            return [(j.sid, j.serial, j.start_ms, j.end_ms, j.status)
                    for j in world.ray.submissions] + machine.engine.said + [world.clock.now]
        finally:
            machine.teardown()
    first = history()
    assert len(first) > 5 and first == history()


# Seed 0 meets 2 attempts failed by a lost worker and a tick past a deadline in 21 sequences
# (derandomized draws met neither once the deadline became a draw).
FIXED_SEED = 0


@pytest.mark.xfail(not ALL_FIXED, strict=True, raises=Violation,
                   reason="review findings 1-8: the fixed-seed exploration meets at least one")
def test_a_fixed_seed_exploration_keeps_every_invariant(monkeypatch):
    """Invariant: every invariant of tests/sim/invariants.py holds after every step of 20
    sequences of up to 20 steps over every rule, drawn from FIXED_SEED (`make explore` runs
    more). They meet an attempt failed by a worker's loss and a tick past a run's deadline; if
    a change of the draws makes them meet neither, this fails: pick a seed that does."""
    seen = {"preempted": 0, "past deadline": 0}

    class Counted(LifecycleMachine):
        def teardown(self) -> None:
            if self.world is not None:
                preempted, past_deadline = met(self.world)
                seen["preempted"] += preempted
                seen["past deadline"] += past_deadline
            super().teardown()

    # derandomize: off, or the seed is ignored (hypothesis's own "ci" profile, loaded where CI
    # is set, derandomizes).
    monkeypatch.setattr(hypothesis.core, "global_force_seed", FIXED_SEED)
    run_state_machine_as_test(Counted, settings=settings(
        max_examples=20, stateful_step_count=20, deadline=None, database=None,
        derandomize=False, phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    assert seen["preempted"] and seen["past deadline"], seen


def test_a_plain_up_in_a_world_without_faults_runs_the_run():
    """The simulation drives the real provider through production's seams: in a world without a
    fault, `up` is not refused and submits attempt 0, whose first training step it waits for. A
    seam that stops answering as production's does made every `up` refused once (the kubectl
    version check against the simulated kubectl), and the explorations then passed without ever
    running the provider's path; this fails then."""
    replay({}, step("up"),
           happened=lambda m: not m.refusals and len(attempts(m)) == 1
           and attempts(m)[0].status == "RUNNING")
