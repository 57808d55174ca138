"""The invariants of the run's lifecycle (issue 27), over what the world can observe: the
simulated Ray's submissions, statuses and logs, who sent each stop and suspend, the
RayCluster's suspend, the bucket, and what `up` printed. Never the program's internals, so
they hold whatever the protocol's design (one id per run or per attempt, intent records).

Each violation is recorded with the invariant's name (INVARIANTS) and the moment; the state
machine (tests/sim/machine.py) fails on the first.
"""

from __future__ import annotations

import re
from typing import Any

from components.facts import verl
from components.supervisor.protocol import SETTLE_S

INVARIANTS = {
    "one-live-attempt": "never two live attempts of one run",
    "ended-run-idle": "never a live job of an ended or superseded run after the next tick",
    "budget-failures": "attempts after a failure (not a preemption) stay within maxRetries, "
                       "plus one for each explicit up after a failure",
    "budget-preemptions": "attempts after a preemption stay within maxPreemptions when set, "
                          "plus one for each explicit up after a failure",
    "resume": "a failed, stalled, lost or preempted run resumes within two ticks while the "
              "budget of the way it ended (maxRetries, maxPreemptions) and the deadline remain",
    "release": "with releaseGpus, the GPUs go back within two ticks of success plus export, "
               "or of giving up (a budget spent, or the deadline passed with the training not "
               "SUCCEEDED)",
    "destroy": "destroy from any reachable state completes and leaves no live job",
    "new-run-safe": "a new run is never stopped or suspended on behalf of an old one",
    "tracker": "the checkpoint the tracker names is never pruned",
    "up-reports": "up never reports a step, phase or metric that the current attempt did not "
                  "log",
    "deadline-submit": "no training attempt is submitted past the run's deadline (deadlineHours "
                       "from its first attempt's start), but by an explicit up that found its "
                       "newest attempt FAILED, STOPPED or lost (attempts.py submit_or_adopt: "
                       "the user's decision) or by a tick finishing what a tick that died "
                       "decided before it (supervisor.py _attempt)",
    "deadline-stop": "a training attempt live past the run's deadline is stopped within two "
                     "ticks that began after both the deadline and its submission "
                     "(recovery.py decide_live)",
}
# What up prints for each phase (its name) and the text of verl's line that marks it.
PHASE_LINES = verl.PHASES
TICKS = 2
# How an ended attempt counts: a preemption (the world's loss of a node its actors ran on failed
# it), a failure (anything else: its own exit, a stop, a loss with the head), or either, when
# what tells them apart is gone or ambiguous by design, so that the program may count it as
# either: a node it ran on died within SETTLE_S of its end (protocol.classify's window, whose
# node death Ray may record up to 30 s late); its preemption was lost with the head's tables
# before its next attempt; or the State API failed (an injected fault) before its next attempt
# (classify then counts a failure, bounded by maxRetries: docs/run-lifecycle.md).
PREEMPTION, FAILURE, EITHER = "preemption", "failure", "either"
# The deadline is read by an actor when it decides (recovery.decide's `now`), not when its POST
# lands: a decision made just before the deadline is submitted a few calls later (a note, a
# listing, a refused call retried). An attempt submitted later than this past the deadline was
# decided past it.
DECIDED_S = 60.0
# A tick that began this close before the deadline may decide either way about an ended
# attempt: it classifies it first (waiting up to SETTLE_S for a node's death), then decides.
EITHER_S = SETTLE_S + 30.0


class Violation(AssertionError):
    pass


class Observer:
    def __init__(self, world: Any) -> None:
        self.world = world
        self.violations: list[str] = []
        self.run_of_job: dict[int, Any] = {}
        self.lines: dict[int, list[str]] = {}
        self.stop_actor: dict[int, Any] = {}
        self.resume: dict[int, list[Any]] = {}  # run serial -> [since, clean ticks, cause]
        self.release: dict[int, list[float]] = {}
        self.failed_ops: list[tuple[str, str, str, bool]] = []
        self.causes: set[str] = set()  # why runs needed a next attempt (failed, stalled, lost)
        self.endings: dict[int, str] = {}  # a training attempt's serial -> PREEMPTION, ...
        self.overdue: dict[int, int] = {}  # a training attempt's serial -> clean ticks that
        # began after both the deadline and its submission, and left it live
        self.past_deadline: set[int] = set()  # runs (serials) a tick saw past their deadline

    def violate(self, name: str, text: str) -> None:
        self.violations.append(f"[{name}] t={self.world.clock.now:.1f}s: {text}")

    # --- helpers ---------------------------------------------------------------------------
    def attempts(self, run: Any) -> list[Any]:
        return [job for job in self.world.ray.submissions
                if self.run_of_job.get(job.serial) is run and self.world.kind_of(job) == "train"]

    def exports(self, run: Any) -> list[Any]:
        return [job for job in self.world.ray.submissions
                if self.run_of_job.get(job.serial) is run
                and self.world.kind_of(job) == "export"]

    def live_of(self, run: Any) -> list[Any]:
        return [job for job in self.world.ray.live() if self.run_of_job.get(job.serial) is run]

    def deadline(self, run: Any) -> float | None:
        """The run's deadline, in the world's seconds: its first attempt's start (Ray's
        start_time, which production carries to every later attempt: protocol.first_start) plus
        deadlineHours; None before any attempt."""
        tried = self.attempts(run)
        if not tried:
            return None
        epoch = self.world.clock.time() - self.world.clock.now
        return tried[0].start_ms / 1000 - epoch + run.config.deadline_s

    def run_failed(self, run: Any) -> bool:
        """The run's latest attempt ended without success, or its record is gone (lost with
        the head, whatever it was: an `up` that submits again after that is the user's)."""
        tried = self.attempts(run)
        if not tried:
            return False
        last = tried[-1]
        gone = self.world.ray.jobs.get(last.sid) is not last
        return last.status in ("FAILED", "STOPPED") or gone

    # --- events ----------------------------------------------------------------------------
    def submitted(self, job: Any) -> None:
        run = self.world.run_of(job)
        self.run_of_job[job.serial] = run
        actor = self.world.actor
        if run is not None and self.world.kind_of(job) == "export" and actor is not None \
                and actor.kind == "up":
            self.release.pop(run.serial, None)  # an explicit up exports again: not given up
        if run is None or self.world.kind_of(job) != "train":
            return
        others = [j for j in self.live_of(run)
                  if j is not job and self.world.kind_of(j) == "train"]
        if others:
            self.violate("one-live-attempt", f"{job.sid} submitted while "
                         f"{', '.join(j.sid + ' ' + j.status for j in others)} is live")
        explicit = False
        if run.explicit_after is not None and len(self.attempts(run)) == run.explicit_after + 1:
            actor = self.world.actor
            explicit = actor is not None and actor.kind == "up"
            run.extra_ups += explicit
            run.explicit_after = None
        self._check_budget(run)
        self._check_deadline(run, explicit)
        self.resume.pop(run.serial, None)
        self.release.pop(run.serial, None)  # a new attempt (an explicit up's): not given up

    def _before(self, run: Any) -> tuple[int, int, int]:
        """(failures, preemptions, either) among the endings of the run's attempts but its
        newest."""
        kinds = [self.endings.get(job.serial, FAILURE) for job in self.attempts(run)[:-1]]
        return kinds.count(FAILURE), kinds.count(PREEMPTION), kinds.count(EITHER)

    def _check_budget(self, run: Any) -> None:
        """The newest attempt fits both budgets, plus the explicit ups, for some reading of the
        endings that may count as either."""
        c = run.config
        retries = c.max_retries
        preempts = c.max_preemptions if c.max_preemptions is not None else 10**9
        f, p, a = self._before(run)
        excess = min(max(0, f + x - retries) + max(0, p + a - x - preempts)
                     for x in range(a + 1))
        if excess > run.extra_ups:
            tried = self.attempts(run)
            last = self.endings.get(tried[-2].serial, FAILURE) if len(tried) > 1 else FAILURE
            name = "budget-preemptions" if last == PREEMPTION else "budget-failures"
            self.violate(name, f"attempt {len(tried)} of run {run.serial} submitted after "
                         f"{f} failures, {p} preemptions and {a} of either (maxRetries "
                         f"{retries}, maxPreemptions {c.max_preemptions}, {run.extra_ups} "
                         "explicit ups after a failure)")

    def _check_deadline(self, run: Any, explicit: bool) -> None:
        """The newest attempt was not submitted past the deadline, unless by the exceptions
        production makes (INVARIANTS["deadline-submit"])."""
        due, now, actor = self.deadline(run), self.world.clock.now, self.world.actor
        if due is None or now <= due + DECIDED_S or explicit or self._finishing(run, due):
            return
        tried = self.attempts(run)
        self.violate("deadline-submit", f"attempt {len(tried) - 1} of run {run.serial} "
                     f"submitted by the {actor.kind if actor else '?'} {now - due:.0f}s past "
                     f"the deadline ({run.config.deadline_s / 3600:g} h from "
                     f"t={due - run.config.deadline_s:.1f}s)")

    def _finishing(self, run: Any, due: float) -> bool:
        """The acting tick may be finishing a submission decided before the deadline: a tick
        of the run that began before it died or failed (its intent saved), and no tick of the
        run ended cleanly since (a clean one would have finished or dropped that intent)."""
        actor = self.world.actor
        if actor is None or actor.kind != "tick":
            return False
        for started, of, outcome in reversed(self.world.cron.history):
            if of is not run:
                continue
            if outcome == "ok":
                return False
            if started <= due:
                return True
        return False

    def ended(self, job: Any) -> None:
        run = self.run_of_job.get(job.serial)
        if run is None or run.ended_at is not None:
            return
        kind = self.world.kind_of(job)
        if kind == "train":
            stopper = self.stop_actor.get(job.serial)
            by_supervisor = stopper is not None and stopper.kind == "tick" and stopper.run is run
            if job.status in ("FAILED", "STOPPED"):
                self.endings[job.serial] = PREEMPTION if job.lost_node else FAILURE
            if job.status == "FAILED":
                self._needs_resume(run, "preempted" if job.lost_node else "failed")
            elif job.status == "STOPPED" and by_supervisor:
                self._needs_resume(run, "stalled")
            elif job.status == "SUCCEEDED" and not run.config.export:
                self._release_due(run)
        elif kind == "export":
            if job.status == "SUCCEEDED":
                self._release_due(run)
            elif job.status == "FAILED" and len(self.exports(run)) > run.config.max_retries:
                self._release_due(run)  # the export's budget is spent: given up

    def head_lost(self) -> None:
        self._unknowable()  # before the live attempts become lost ones
        for job in self.world.ray.live():
            run = self.run_of_job.get(job.serial)
            if run is not None and run.ended_at is None and self.world.kind_of(job) == "train":
                self.endings[job.serial] = FAILURE
                self._needs_resume(run, "lost")

    def state_unknown(self) -> None:
        """A State API call (nodes, actors) failed: the preemption of an attempt not yet
        followed may be read as a failure."""
        self._unknowable()

    def _unknowable(self) -> None:
        for run in self.world.runs:
            tried = self.attempts(run)
            if run.ended_at is None and tried and self.endings.get(tried[-1].serial) == PREEMPTION:
                self.endings[tried[-1].serial] = EITHER
                self._reconsider(run)

    def worker_lost(self) -> None:
        self.causes.add("worker lost")

    def node_dead(self, node_id: str, at_ms: int) -> None:
        """Ray marked a node DEAD: an attempt that ran on it and ended, not by its loss, at most
        SETTLE_S before may be read as a preemption (protocol.classify's window)."""
        ray = self.world.ray
        for run in self.world.runs:
            for job in self.attempts(run):
                on = job.driver_node_id == node_id or any(
                    row["node_id"] == node_id and row["job_id"] == job.job_id
                    for row in ray.gcs.actors if job.job_id)
                if on and self.endings.get(job.serial) == FAILURE and job.end_ms and \
                        job.start_ms <= at_ms <= job.end_ms + SETTLE_S * 1000:
                    self.endings[job.serial] = EITHER
                    if job is self.attempts(run)[-1]:
                        self._reconsider(run)

    def _verdict(self, run: Any) -> str | None:
        """What the budgets say after the run's newest attempt ended: "resume", "give up", or
        None when it depends on how an ending that may count as either is counted."""
        c = run.config
        tried = self.attempts(run)
        number, last = len(tried) - 1, self.endings.get(tried[-1].serial, FAILURE)
        _, p, a = self._before(run)
        verdicts = set()
        if last in (PREEMPTION, EITHER):  # the program's count of preemptions: p to p + a
            if c.max_preemptions is None or p + a < c.max_preemptions:
                verdicts.add("resume")
            elif p >= c.max_preemptions:
                verdicts.add("give up")
            else:
                verdicts.add(None)
        if last in (FAILURE, EITHER):  # its failures before: number - p - a to number - p
            if number - p < c.max_retries:
                verdicts.add("resume")
            elif number - p - a >= c.max_retries:
                verdicts.add("give up")
            else:
                verdicts.add(None)
        return verdicts.pop() if len(verdicts) == 1 else None

    def _needs_resume(self, run: Any, cause: str) -> None:
        self.causes.add(cause)
        verdict = self._verdict(run)
        if verdict == "resume":
            self.resume[run.serial] = [self.world.clock.now, 0, cause]
        elif verdict == "give up":
            self._release_due(run)  # the budget is spent: the supervisor gives up

    def _reconsider(self, run: Any) -> None:
        """The newest attempt's ending became ambiguous: drop what it no longer implies."""
        verdict = self._verdict(run)
        if verdict != "resume":
            self.resume.pop(run.serial, None)
        if verdict != "give up":
            self.release.pop(run.serial, None)

    def _release_due(self, run: Any) -> None:
        if run.config.release_gpus:
            self.release[run.serial] = [self.world.clock.now, 0]

    def stopped(self, job: Any) -> None:
        actor = self.world.actor
        self.stop_actor[job.serial] = actor
        target = self.run_of_job.get(job.serial)
        if actor is not None and actor.run is not None and target is not None \
                and target.serial > actor.run.serial:
            self.violate("new-run-safe", f"{job.sid} (run {target.serial}) stopped by the "
                         f"{actor.kind} of run {actor.run.serial}")

    def suspended(self) -> None:
        actor = self.world.actor
        owner = actor.run if actor is not None else None
        for run in self.world.runs:
            newer = owner is not None and run.serial > owner.serial and run.ended_at is None
            live = [j.sid for j in self.live_of(run)]
            if newer or (live and run.ended_at is None):
                self.violate("new-run-safe", f"RayCluster suspended by the "
                             f"{actor.kind if actor else '?'} of run "
                             f"{owner.serial if owner else '?'} while run {run.serial} "
                             f"{'is live: ' + ', '.join(live) if live else 'is deployed'}")
        if owner is not None:
            self.release.pop(owner.serial, None)

    def logged(self, job: Any, line: str) -> None:
        self.lines.setdefault(job.serial, []).append(line)

    def tracker(self, bucket: Any) -> None:
        if not bucket.tracked_ok():
            self.violate("tracker", f"the tracker names step {bucket.tracker}, whose actor/ "
                         f"is gone (steps {bucket.steps})")

    def up_said(self, line: str) -> None:
        sid, _, text = line.partition(": ")
        job = self.world.ray.jobs.get(sid)
        run = self.run_of_job.get(job.serial) if job else None
        if run is None or self.world.kind_of(job) != "train":
            return
        current = self.attempts(run)[-1]
        logged = self.lines.get(current.serial, [])
        for name, mark in PHASE_LINES:
            if text.startswith(name + " after") and not any(mark in seen for seen in logged):
                self.violate("up-reports", f"up printed {text!r} but attempt "
                             f"{len(self.attempts(run)) - 1} logged no {mark!r}")
        step = re.search(r"\bstep=(\d+)", text)
        if step and not any(f"step:{step.group(1)} " in seen for seen in logged):
            self.violate("up-reports", f"up printed {text!r} but attempt "
                         f"{len(self.attempts(run)) - 1} logged no step {step.group(1)}")

    def forward_to_nothing(self) -> None:
        pass

    def op_failed(self, kind: str, method: str, error: Exception, faulted: bool) -> None:
        self.failed_ops.append((kind, method, f"{type(error).__name__}: {error}", faulted))

    def before_cluster_delete(self, owned: list) -> None:
        """The destroy's provider deletes ended every job of the resources it deleted."""
        live = [j.sid for j in self.world.ray.live()
                if any(self.run_of_job.get(j.serial) is o or j.sid == o for o in owned)]
        if live:
            self.violate("destroy", f"destroy reached the RayCluster with live jobs: {live}")

    def after_tick(self, started: float, clean: bool, run: Any) -> None:
        if not clean or run is None:
            return
        if run.ended_at is None:
            self._deadline_tick(started, run)
        for serial, entry in list(self.resume.items()):
            if serial == run.serial and entry[0] <= started and run.ended_at is None:
                entry[1] += 1
                if entry[1] >= TICKS:
                    self.violate(f"resume-{entry[2]}", f"run {serial} ({entry[2]}) needs its "
                                 f"next attempt since t={entry[0]:.1f}s; {TICKS} ticks later "
                                 "none was submitted")
                    del self.resume[serial]
        for serial, entry in list(self.release.items()):
            if serial == run.serial and entry[0] <= started and run.ended_at is None:
                if self.world.kuberay.suspend:
                    del self.release[serial]
                    continue
                entry[1] += 1
                if entry[1] >= TICKS:
                    self.violate("release", f"run {serial} succeeded and exported, or was "
                                 f"given up, at t={entry[0]:.1f}s; the GPUs are still held "
                                 f"{TICKS} ticks later")
                    del self.release[serial]
        for old in self.world.runs:
            if old.ended_at is not None and old.ended_at <= started:
                live = [j.sid for j in self.live_of(old)]
                if live:
                    self.violate("ended-run-idle", f"run {old.serial} ended at "
                                 f"t={old.ended_at:.1f}s; after a tick, {live} still live")

    def _deadline_tick(self, started: float, run: Any) -> None:
        """What a clean tick of `run` that began at `started` owes at the deadline: near it no
        resume is owed (the tick may find it passed); past it a live attempt is stopped (by
        this tick, or the next: `deadline-stop`), and a run whose training did not succeed is
        given up, so that with releaseGpus its GPUs are due back (`release`)."""
        due = self.deadline(run)
        if due is None or started <= due - EITHER_S:
            return
        self.resume.pop(run.serial, None)
        if started <= due:
            return
        self.past_deadline.add(run.serial)
        newest = self.attempts(run)[-1]
        epoch = self.world.clock.time() - self.world.clock.now
        submitted = newest.start_ms / 1000 - epoch
        if newest.status in ("PENDING", "RUNNING") and self.world.ray.jobs.get(newest.sid) \
                is newest:
            if submitted < started:  # the tick could see it
                count = self.overdue[newest.serial] = self.overdue.get(newest.serial, 0) + 1
                if count == TICKS:
                    self.violate("deadline-stop", f"attempt {len(self.attempts(run)) - 1} of "
                                 f"run {run.serial} is {newest.status} {started - due:.0f}s "
                                 f"past the deadline, after {TICKS} ticks that began past it")
        elif newest.status != "SUCCEEDED" and run.config.release_gpus \
                and run.serial not in self.release and not self.world.kuberay.suspend:
            self.release[run.serial] = [started, 0]  # given up at the deadline

    def check(self, prefer: str | None = None, only: bool = False) -> None:
        """Raise the first violation (of `prefer`, if any is), as an exception type of its
        own per invariant (and cause), so that hypothesis tells distinct failures apart and
        shrinks each."""
        mine = [v for v in self.violations if prefer and v.startswith(f"[{prefer}")]
        if only and not mine:
            return
        if self.violations:
            first = (mine or self.violations)[0]
            name = first[1:first.index("]")]
            raise violation_type(name)("\n".join(self.violations))


_TYPES: dict[str, type] = {}


def violation_type(name: str) -> type:
    key = re.sub(r"\W", "_", name)
    if key not in _TYPES:
        _TYPES[key] = type(f"Violated_{key}", (Violation,), {"__module__": __name__})
    return _TYPES[key]
