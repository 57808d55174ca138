"""Random sequences of what happens to a run, checked against the invariants after every step.

hypothesis's RuleBasedStateMachine draws the run's config, then any sequence of: the user's
`up`, `up --refresh`, `refresh`, a config change that replaces the run (with or without a new
cluster check), `destroy`; time passing (CronJob ticks and verl's steps happen on the clock);
an attempt failing, succeeding, hanging or crashing in a checkpoint save; the next attempts
crashing at once; the export failing or hanging; a head restart; the GPU worker node lost (a
preemption: Ray marks it dead from 1 s before to 30 s after the job it fails, and KubeRay's
replacement joins as a new node 60 s or 5 min later); a tick killed, or a call of
a tick or of `up` timing out, refused or answered 500, at its Nth call; a flaky tracker read.
The run's deadline (job.deadlineHours) is drawn too, 3, 6 or 15 minutes or 48 h, short enough
that sequences reach it: both actors get it as production gives it (tests/models/engine.py).
tests/sim/invariants.py names the invariants; DISABLED switches rules off (make explore's
--without), so that one failure does not hide another.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.models import verl
from tests.models.engine import Config, Engine, Refused
from tests.sim import seams
from tests.sim.world import Params, World

WAITS = (0.5, 2.0, 10.0, 60.0, 130.0, 600.0, 2900.0)
# job.deadlineHours, drawn per sequence, scaled down as the world's durations are (an attempt
# runs about 8 minutes): a run's first attempt rarely starts more than 15 minutes before its
# sequence ends (seed 2026: 7 of 26 runs live at the end had run over 5 minutes, none over 30;
# `wait` is one rule of twenty), so 3, 6 and 15 minutes are what the deadline ends runs at,
# mid-attempt or between attempts; 48 h (the default) never.
DEADLINES_H = (0.05, 0.1, 0.25, 48.0)
# Virtual time stops passing (`wait` is no longer drawn) this long after the drawn deadline: a
# bound that ends every sequence, never one that keeps the deadline from being reached.
PAST_DEADLINE_S = 6 * 3600


def max_virtual_s(deadline_s: float) -> float:
    return deadline_s + PAST_DEADLINE_S


def met(world: World) -> tuple[int, bool]:
    """What a sequence met, for the explorations' counts: attempts a lost worker node failed,
    and whether a clean tick of a run began past its deadline."""
    return (sum(1 for job in world.ray.submissions if job.lost_node),
            bool(world.observer.past_deadline))


def enabled(name: str):
    return precondition(lambda self: name not in self.DISABLED and not self.gone)


class LifecycleMachine(RuleBasedStateMachine):
    DISABLED: ClassVar[frozenset[str]] = frozenset()
    PREFER: ClassVar[str | None] = None  # the invariant reported first when several break
    ONLY: ClassVar[bool] = False  # check PREFER alone (explore --only), so that another
    # failure on the same path does not end every sequence before it
    PINNED: ClassVar[dict] = {}  # setup values that override the drawn ones (explore --setup)

    def __init__(self) -> None:
        super().__init__()
        self.stack = contextlib.ExitStack()
        self.world: World | None = None
        self.gone = False  # destroyed: only `up` brings the stack back
        self.refusals: list[str] = []

    @initialize(
        max_retries=st.integers(0, 2), max_preemptions=st.sampled_from([None, 0, 1]),
        export=st.booleans(), release=st.booleans(),
        keep=st.sampled_from([2, 1]), wait_for=st.sampled_from(["first-step", "running",
                                                                 "submitted"]),
        linger=st.sampled_from([0.2, 1.0, 3.0]),
        phase=st.floats(0.0, 119.0, allow_nan=False).map(lambda x: round(x, 1)),
        deadline_h=st.sampled_from(DEADLINES_H),
    )
    def setup(self, max_retries: int, export: bool, release: bool, keep: int, wait_for: str,
              linger: float, phase: float, max_preemptions: int | None = None,
              deadline_h: float = 48.0) -> None:
        pinned = {**dict(max_retries=max_retries, max_preemptions=max_preemptions,
                         export=export, release=release, keep=keep, wait_for=wait_for,
                         linger=linger, phase=phase, deadline_h=deadline_h), **self.PINNED}
        max_retries, export, release, keep = (pinned[k] for k in (
            "max_retries", "export", "release", "keep"))
        wait_for, linger, phase = pinned["wait_for"], pinned["linger"], pinned["phase"]
        self.world = World(Params(actor_linger_s=linger, tick_phase_s=phase))
        self.stack.callback(self.world.close)
        self.stack.enter_context(seams.installed(self.world))
        self.engine = Engine(self.world, Config(max_retries=max_retries,
                                                max_preemptions=pinned["max_preemptions"],
                                                export=export,
                                                release_gpus=release, keep=keep,
                                                wait_for=wait_for,
                                                deadline_s=pinned["deadline_h"] * 3600))
        self.max_virtual_s = max_virtual_s(self.engine.config.deadline_s)

    def teardown(self) -> None:
        self.stack.close()

    # --- the user ----------------------------------------------------------------------------
    def _engine(self, operation, *args) -> None:
        try:
            operation(*args)
        except Refused as error:
            self.refusals.append(str(error))  # up may fail (a job that ends early, a config)

    @rule()
    @precondition(lambda self: "up" not in self.DISABLED)
    def up(self) -> None:
        self.gone = False
        self._engine(self.engine.up)

    @rule()
    @enabled("up_refresh")
    def up_refresh(self) -> None:
        self._engine(self.engine.up, True)

    @rule()
    @enabled("refresh")
    def refresh(self) -> None:
        self._engine(self.engine.refresh)

    @rule(check_too=st.booleans())
    @enabled("replace")
    def replace(self, check_too: bool) -> None:
        self.engine.config.version += 1
        if check_too:
            self.engine.config.check_version += 1
        self._engine(self.engine.up)

    @rule()
    @enabled("destroy")
    def destroy(self) -> None:
        world = self.world
        faults = len(world.observer.failed_ops)
        try:
            self.engine.destroy()
            self.gone = True
        except Refused as error:
            excused = any(op[3] for op in world.observer.failed_ops[faults:]) or \
                "process died" in str(error)
            if not excused:
                world.observer.violate("destroy", f"destroy stopped: {error}")

    # --- time and the systems ------------------------------------------------------------------
    @rule(seconds=st.sampled_from(WAITS))
    @precondition(lambda self: self.world is None or self.world.clock.now < self.max_virtual_s)
    def wait(self, seconds: float) -> None:
        self.world.clock.sleep(seconds)

    @rule(kind=st.sampled_from(["fail", "succeed", "hang", "fail_in_save"]))
    @enabled("attempt")
    def attempt_does(self, kind: str) -> None:
        for job in self.world.ray.live():
            driver = job.driver
            if isinstance(driver, verl.Training) and driver.alive:
                if kind == "fail":
                    driver.exit(1)
                elif kind == "succeed":
                    driver.exit(0)
                elif kind == "hang":
                    driver.mode = "hang"
                else:
                    driver.fail_in_save = True

    @rule(kind=st.sampled_from(["healthy", "crash"]))
    @enabled("next_attempts")
    def next_attempts(self, kind: str) -> None:
        self.world.plan.next_attempt = kind

    @rule(kind=st.sampled_from(["ok", "fail", "hang"]))
    @enabled("export")
    def exports(self, kind: str) -> None:
        self.world.plan.next_export = kind
        for job in self.world.ray.live():
            if isinstance(job.driver, verl.Export) and job.driver.alive and kind == "fail":
                job.driver.exit(1)

    @rule()
    @enabled("head_restart")
    def head_restart(self) -> None:
        self.world.kuberay.restart_head()

    @rule(dead_after=st.sampled_from([-1.0, -0.4, 0.0, 10.0, 25.0, 30.0]),
          back_after=st.sampled_from([60.0, 300.0]), then=st.sampled_from([5.0, 0.0]))
    @enabled("preempt")
    def preempt(self, dead_after: float, back_after: float, then: float) -> None:
        """The GPU worker node is lost: a training on it fails 3 s later, Ray marks the node
        DEAD `dead_after` seconds after that (ray_jobs.py worker_lost), KubeRay's replacement
        joins `back_after` later; `then` seconds pass (5: the failure happens within this step,
        as it rarely would if the next step were another fault or the sequence's end)."""
        self.world.kuberay.lose_worker(dead_after, back_after)
        self.world.clock.sleep(then)

    @rule(dead_after=st.sampled_from([-1.0, -0.4, 0.0, 10.0, 25.0, 30.0]),
          back_after=st.sampled_from([60.0, 300.0]), then=st.sampled_from([5.0, 0.0]))
    @enabled("preempt")
    @precondition(lambda self: self.world is not None and self._training_on_worker())
    def preempt_training(self, dead_after: float, back_after: float, then: float) -> None:
        """The same, drawn only while a training attempt's actors run on the worker: `preempt`
        alone mostly finds nothing running (before `up`, after an end, a head restart)."""
        self.preempt(dead_after, back_after, then)

    def _training_on_worker(self) -> bool:
        ray = self.world.ray
        return any(isinstance(job.driver, verl.Training) and job.driver.alive and any(
            row["job_id"] == job.job_id and row["node_id"] == ray.worker_node()
            for row in ray.gcs.actors) for job in ray.live() if job.job_id)

    @rule(n=st.integers(1, 4), kind=st.sampled_from(["kill", "timeout"]))
    @enabled("tick_fault")
    def tick_dies(self, n: int, kind: str) -> None:
        """The next tick is killed, or its reply lost, right after its Nth write."""
        self.world.faults["tick"] = (n, kind)

    @rule(n=st.integers(1, 12), kind=st.sampled_from(["refused", "error500"]))
    @enabled("tick_fault")
    def tick_call_fails(self, n: int, kind: str) -> None:
        """The next tick's Nth call is refused or answered 500 (a list race, a busy head)."""
        self.world.faults["tick"] = (n, kind)

    @rule(n=st.integers(1, 6), kind=st.sampled_from(["kill", "timeout"]))
    @enabled("up_fault")
    def up_dies(self, n: int, kind: str) -> None:
        """The next engine call's process dies, or a reply is lost, after its Nth write."""
        self.world.faults["up"] = (n, kind)

    @rule(n=st.integers(1, 40), kind=st.sampled_from(["refused", "error500"]))
    @enabled("up_fault")
    def up_call_fails(self, n: int, kind: str) -> None:
        self.world.faults["up"] = (n, kind)

    @rule()
    @enabled("flaky_tracker")
    def flaky_tracker(self) -> None:
        for bucket in self.engine.buckets.values():
            bucket.flaky_reads = 1

    @invariant()
    def holds(self) -> None:
        if self.world is not None:
            self.world.observer.check(self.PREFER, only=self.ONLY)
