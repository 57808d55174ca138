"""The run's supervisor: one look at the run, every few minutes, from a pod in the cluster.

A CronJob (components/run/supervision.py, `concurrencyPolicy: Forbid`, so one tick at a time)
runs `python -m components.supervisor.supervisor` with this file, supervisor_end.py (the export and
the release after the run), supervisor_io.py (its Ray and Kubernetes clients), protocol.py,
recovery.py and run_state.py mounted from a ConfigMap, and the run's spec (`run.json`,
written by Pulumi) next to them. Each tick reads its state ConfigMap (its own record, and the
provider's mark: which run the stack wants), lists the run's attempts in Ray through the head
Service (Jobs REST API, no port-forward), and acts on the newest attempt (the state machine:
docs/run-lifecycle.md):
- the provider ended the run, or another run superseded it: stops whatever of it still runs,
  and nothing else (no resubmission, no export, no release);
- RUNNING or PENDING: past the wall-clock deadline (from the run's first attempt's start) it
  stops the run for good; with no new verl step for `stall_s` (before the first step: since the
  attempt started) it stops the attempt and counts it as failed;
- FAILED, STOPPED by its own stall stop, or lost with the head's job table: classifies it (a
  preemption when a Ray node it ran on died during it, protocol.classify; else a failure, the
  head's loss included) and submits the next attempt (`<run id>-a<N+1>`, resuming from the
  run's checkpoints) while that kind's budget (maxPreemptions or maxRetries) and the deadline
  last, else gives up; STOPPED by anyone else is left alone;
- SUCCEEDED: runs the export (`<run id>-export-a<N>`, on a GPU worker), then, with
  `release_gpus`, suspends the RayCluster: KubeRay deletes every Ray pod and the GPU nodes are
  free. A run given up (budget, deadline, export failed for good) is released too.
Whether a live attempt is stopped is recovery.decide_live; what follows an attempt that ended
without success is recovery.decide, the decision the provider's `up` makes too; every write of
the record is a named transition of run_state.py, whose RunState is the run's state as that
record holds it. Every action is saved as an intent before it is taken, so a tick that dies
half way is finished by the next. What it did is kept in its record (protocol.RECORD_KEY),
which the provider reads on `pulumi refresh`, and printed to its log.

Standard library only, so that its image is a plain Python (components/facts/pins.py). It
talks to Kubernetes with its service account's token: a Role allows it to read and patch its
state ConfigMap and to patch the one RayCluster, nothing else.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from typing import Any, Callable

from components.supervisor import protocol, recovery, run_state
from components.supervisor.protocol import RESUBMITTABLE, TERMINAL, Submission
from components.supervisor.recovery import Actor, Classify, Ended, GiveUp, Submit, Wait
from components.supervisor.run_state import EndReason, RunState
from components.supervisor.supervisor_end import AfterTheRun
# The I/O, re-exported: tests and tools use them from here.
from components.supervisor.supervisor_io import (  # noqa: F401
    Cluster,
    InCluster,
    RayHttp,
    check_suspended,
    parse_state,
)

# Lines of the driver log's tail read per tick for the step: more than the provider's 200, so
# that bursts of NCCL INFO lines between two steps do not hide the last step line.
_LOG_LINES = 2000
# Asked once more when that tail holds no step line: a sustained flood of NCCL INFO lines from
# every rank (run_env.py sets NCCL_DEBUG=INFO) must not read as "no progress".
_LOG_LINES_FLOOD = 50_000


def tick(
    spec: dict[str, Any], ray: Callable[[str], Any], cluster: Cluster,
    say: Callable[[str], None] = print, now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Look at the run once and act (see the module docstring); returns the record saved."""
    return _Tick(spec, ray, cluster, say, now).run()


class _Tick(AfterTheRun):
    """One tick (the export and the release after the run: supervisor_end.py). Every action is
    saved as an intent in the record before it is taken (the stop's `stopped`, a submission's
    or a release's `intent`), so a tick that dies half way is finished by the next one
    (docs/run-lifecycle.md, the state machine)."""

    def __init__(self, spec: dict[str, Any], ray: Callable[[str], Any], cluster: Cluster,
                 say: Callable[[str], None], now: Callable[[], float]) -> None:
        self.spec, self.ray, self.cluster, self.now = spec, ray, cluster, now
        self.run_id = spec["submission_id"]
        self._say = say
        self.max_retries = int(spec["max_retries"])
        # max_preemptions None: preemptions are resumed without limit, within the deadline.
        self.budgets = recovery.Budgets(self.max_retries, spec.get("max_preemptions"),
                                        spec["deadline_s"], spec["stall_s"])

    def say(self, text: str) -> None:
        self._say(f"{self.run_id}: {text}")

    def run(self) -> dict[str, Any]:
        state = self.cluster.state()
        record = state.get(protocol.RECORD_KEY) or {}
        if record.get("submission_id") != self.run_id:
            record = run_state.new_record(self.run_id)  # a new run: the last one's is moot
        self.record, self.mark = record, state.get(protocol.MARK_KEY) or {}
        self.submitted = state.get(protocol.SUBMITTED_KEY)
        # Whether the previous tick saw the same mark: if not, a `pulumi up` may be acting on
        # the run right now (recovery.Ended.mark_settled).
        self.mark_seen = "mark_at" in record and record["mark_at"] == self.mark.get("at")
        intent = record.get("intent") or {}
        if run_state.state_of(record) is RunState.RELEASING and not protocol.not_ours(
                self.run_id, self.mark):
            self._release(intent["reason"])  # a dead tick's release: no Ray needed (no head)
            return self._save()
        if ("settled_mark" in record and not self.mark.get("ended")
                and self.mark.get("run") == self.run_id
                and self.mark.get("at") != record["settled_mark"]):
            # An explicit `pulumi up` acted on the run since it was released or given up (it
            # resumed the cluster to export, or submitted once more): the provider's mark
            # changed. Compared for a change, never by time: the provider's clock is the
            # user's machine's.
            self.say("`pulumi up` acted on the run after it ended here; following it again")
            run_state.set_reopened(record)
        if run_state.state_of(record) is RunState.RELEASED:
            return record  # the head and its job table are gone with the pods
        self.jobs = self.ray(self.run_id)
        listing = self.jobs.list_jobs()
        self.listing = listing
        self.found = protocol.attempts(listing, self.run_id)
        self.exports = protocol.attempts(listing, protocol.export_run(self.run_id))
        why_not = protocol.not_ours(self.run_id, self.mark)
        if why_not:
            self._stand_down(why_not)
            return self._save()
        if self.mark.get("run") == self.run_id:
            self._stop_superseded()
        self._attempt()
        ended = record.get("ended") or {}
        if ended.get("release") and self.spec.get("release_gpus") and not record.get("released"):
            self._release(ended["reason"])
        return self._save()

    # --- the run's attempts ----------------------------------------------------------------

    def _attempt(self) -> None:
        record, found = self.record, self.found
        newest = max(found, default=None)
        known = record.get("attempt")
        intent = record.get("intent") or {}
        if intent.get("action") == "submit":
            if newest is not None and newest >= intent["attempt"]:
                run_state.clear_intent(record)  # the dead tick's submission reached Ray
            else:  # finish what it started
                self._submit(intent["attempt"], intent["reason"], intent.get("preempted", 0))
                return
        if newest is None or (known is not None and newest < known):
            self._missing(known)
            return
        info = found[newest]
        run_state.set_seen(record, newest, info, protocol.first_start(info))
        jobs = self.ray(protocol.attempt_id(self.run_id, newest))
        if info["status"] in TERMINAL and record.get("step_attempt") != newest:
            step = self._metrics(jobs, info).get("step")  # ended between two ticks: read once
            if step is not None:
                run_state.set_step(record, newest, step)
        if record.get("ended"):
            stopped = record.get("stopped") or {}
            if info["status"] not in TERMINAL and stopped.get("attempt") == newest:
                self._stop(jobs, stopped["reason"])  # a dead tick's deadline stop: finish it
            return
        if info["status"] not in TERMINAL:
            self._follow(jobs, info)
        elif info["status"] in RESUBMITTABLE:
            self._retry(info)
        else:
            self._finish()

    def _missing(self, known: int | None) -> None:
        """Ray has no record of the attempt the record knows: the head restarted and its job
        table is gone (the driver, on the head, died with it). Never read as "ended"."""
        record = self.record
        # The newest attempt anyone submitted: the record's, or the provider's note of one it
        # submitted since (protocol.SUBMITTED_KEY). A lost attempt is a failure: the head is not
        # a GPU node, and what took it (its node, or the driver's memory) cannot be told apart.
        lost, preempted = protocol.lost_attempt(self.run_id, record, self.submitted) or (0, 0)
        # The deadline counts from the run's first start, which no tick saw if the head lost
        # every attempt before the first one: the provider's note knows it.
        first_start = protocol.known_first_start(self.run_id, record, self.submitted)
        if known is None:
            # This spec reaches the CronJob only once the run's create returned (the supervisor
            # depends on the job), i.e. after attempt 0 at least was submitted: Ray lost it with
            # its head before the first tick. (A run the provider ended or replaced never gets
            # here.) The provider's note (protocol.SUBMITTED_KEY) names a later one if it
            # submitted one; either way the lost attempt counts, and the next one follows it.
            self.say(f"attempt {lost} is gone from Ray with its head's job table")
            run_state.set_lost(record, preempted, first_start)
            self._next(lost, "LOST", protocol.Ending(
                False, "lost with the Ray head before its first step"))
            return
        run_state.set_preempted(record, preempted)
        if record.get("status") == "SUCCEEDED":
            self._finish()
            return
        if record.get("ended"):
            return
        step = record.get("step") if record.get("step_attempt") == lost else None
        why = protocol.failure({"status": "lost with the Ray head"}, step)
        self.say(f"attempt {lost} is gone from Ray with its head's job table ({why})")
        run_state.set_lost(record, preempted, first_start)
        self._next(lost, "LOST", protocol.Ending(False, why))

    def _follow(self, jobs: Any, info: dict[str, Any]) -> None:
        """A live attempt: track its steps; stop it where recovery.decide_live says (the
        deadline, a stall)."""
        record, now, number = self.record, self.now(), self.record["attempt"]
        stopped = record.get("stopped") or {}
        if stopped.get("attempt") == number:
            self._stop(jobs, stopped["reason"])  # a dead tick's stop: finish it
            return
        step = self._metrics(jobs, info).get("step") if info.get("driver_node_id") else None
        if step is not None and (record.get("step_attempt") != number
                                 or step != record.get("step")):
            run_state.set_step(record, number, step, now)
        started = (info.get("start_time") or now * 1000) / 1000
        progress = record["last_step_at"] if record.get("step_attempt") == number else started
        seen = recovery.Live(number, record.get("first_start", started), progress, step)
        decision = recovery.decide_live(seen, self.budgets, now)
        if isinstance(decision, recovery.Stop):
            self._stop(jobs, decision.reason, decision.ends)

    def _stop(self, jobs: Any, reason: str, ends: EndReason | None = None) -> None:
        """Save the stop (and the run's end, if it `ends` it), then make it: the next tick
        knows the STOPPED record is its own."""
        self.say(f"stopping attempt {self.record['attempt']}: {reason}")
        run_state.set_stopping(self.record, reason)
        if ends is not None:
            run_state.set_ended(self.record, self.record["attempt"], ends, reason, self.now())
        self._save()
        jobs.stop()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = jobs.info()
            if info is None or info["status"] in TERMINAL:
                run_state.set_status(self.record, info["status"] if info else None)
                return
            time.sleep(1)

    def _retry(self, info: dict[str, Any]) -> None:
        """A FAILED attempt, or one this supervisor stopped for a stall: the next one, if
        recovery.decide allows it. A STOPPED one it did not stop was ended by a person: left as
        it is."""
        record, number = self.record, self.record["attempt"]
        stopped = record.get("stopped") or {}
        ours = stopped.get("attempt") == number
        ending = record.get("ending") or {}
        seen = self._seen(number, info["status"], stopped_here=ours, ending=protocol.Ending(
            ending["preempted"], ending["reason"]) if ending.get("attempt") == number else None)
        decision = recovery.decide(seen, self.budgets, self.now())
        if isinstance(decision, Classify):
            step = record.get("step") if record.get("step_attempt") == number else None
            why = stopped["reason"] if ours else protocol.failure(info, step)
            jobs = self.ray(protocol.attempt_id(self.run_id, number))
            settle_s = self.spec.get("settle_s", protocol.SETTLE_S)  # shorter on a real Ray
            seen = replace(seen, ending=protocol.classify(jobs, info, why, step, settle_s))
            decision = recovery.decide(seen, self.budgets, self.now())
            if not (isinstance(decision, Wait) and decision.classify_again):
                self._ended(number, seen.ending)
        self._act(number, decision)

    def _next(self, number: int, status: str, ending: protocol.Ending) -> None:
        """Attempt `number` ended (`status`) as `ending`, known without asking Ray: keep how,
        and do what recovery.decide says."""
        self._ended(number, ending)
        seen = self._seen(number, status, ending=ending)
        self._act(number, recovery.decide(seen, self.budgets, self.now()))

    def _seen(self, number: int, status: str, **more: Any) -> Ended:
        """What this tick saw of attempt `number`, for recovery.decide."""
        record = self.record
        return Ended(Actor.SUPERVISOR, number, status, record.get("preempted") or 0,
                     asked_before=record.get("unknown_ending") == number,
                     first_start=record.get("first_start"), mark_settled=self.mark_seen,
                     **more)

    def _ended(self, number: int, ending: protocol.Ending) -> None:
        """Keep how attempt `number` ended in the record (the outputs' counts read it)."""
        run_state.set_ending(self.record, number, ending)
        if ending.preempted:
            self.say(f"attempt {number} was {ending.reason}")

    def _act(self, number: int, decision: recovery.Decision) -> None:
        """Do what recovery.decide answered about attempt `number`."""
        if isinstance(decision, Submit):
            self._submit(decision.attempt, decision.reason, decision.preempted)
        elif isinstance(decision, GiveUp):
            self._give_up(number, decision.reason, decision.cause)
        elif isinstance(decision, Wait) and decision.classify_again:
            # Ray's State API failed: the next tick asks again; a second failure counts it as a
            # failure (maxRetries bounds that), so that an outage never stops the run for good.
            run_state.set_unknown_ending(self.record, number)
            self.say(f"attempt {number}: {decision.reason}")
        elif isinstance(decision, Wait):
            self.say(f"attempt {number} {decision.reason}")
        else:  # LeaveAlone: a person decided
            run_state.set_ended(self.record, number, decision.cause, decision.reason, self.now())

    def _give_up(self, number: int, reason: str, cause: EndReason) -> None:
        self.say(f"{self.record.get('status')}; {reason}")
        run_state.set_ended(self.record, number, cause, reason, self.now())

    def _submit(self, number: int, why: str, preempted: int) -> None:
        """Attempt `number`, after `preempted` preemptions: the intent is saved first, the
        provider's mark read again right before the POST (a `pulumi up` may have ended or
        replaced the run meanwhile)."""
        record = self.record
        run_state.set_intent(record, "submit", why, number, preempted)
        self._save()
        if self._mark_forbids():
            return
        started = record.get("first_start")
        if protocol.submit_attempt(self.ray, self.run_id, number, Submission.of(self.spec), why,
                                   started, preempted):
            self.say(f"attempt {number} submitted after {why}")
        else:
            self.say(f"adopted attempt {number} (submitted by another actor)")
        run_state.set_submitted(record, number, preempted, why)

    def _mark_forbids(self) -> bool:
        mark = self.cluster.state().get(protocol.MARK_KEY) or {}
        why_not = protocol.not_ours(self.run_id, mark)
        if why_not:
            self.say(f"not submitting: {why_not}")
            run_state.clear_intent(self.record)
            self._stand_down(why_not)
        return bool(why_not)

    # --- runs that are not the stack's -------------------------------------------------------

    def _stand_down(self, why_not: str) -> None:
        """The provider ended this run or another run replaced it: stop what of it still runs,
        never export, resubmit or release."""
        record = self.record
        if (record.get("ended") or {}).get("reason") != why_not:
            self.say(f"{why_not}: nothing more is done for this run")
            run_state.set_ended(record, record.get("attempt"), EndReason.BY_PULUMI, why_not,
                            self.now())
        run_state.clear_intent(record)
        for number, info in [*self.found.items(), *self.exports.items()]:
            if info.get("status") not in TERMINAL:
                self.say(f"stopping {info['submission_id']} ({why_not})")
                self.ray(info["submission_id"]).stop()

    def _stop_superseded(self) -> None:
        """Live jobs of this stack's run resource that belong to no attempt of this run (an old
        run's straggler, e.g. a tick that submitted for it as it was being replaced)."""
        mine = {key: self.spec["metadata"].get(key)
                for key in (protocol.STACK_KEY, protocol.RESOURCE_KEY)}
        ours = {info["submission_id"] for info in [*self.found.values(), *self.exports.values()]}
        for job in self.listing:
            meta = job.get("metadata") or {}
            if (job.get("status") not in TERMINAL and job["submission_id"] not in ours
                    and all(meta.get(key) == value for key, value in mine.items())):
                self.say(f"stopping {job['submission_id']}, an earlier run superseded by this one")
                self.ray(job["submission_id"]).stop()

    # --- helpers -----------------------------------------------------------------------------

    def _metrics(self, jobs: Any, info: dict[str, Any]) -> dict[str, float]:
        """The last step line of the attempt's log tail, asked once more with a larger tail when
        the first holds none (a flood of NCCL INFO lines between two steps)."""
        metrics = protocol.last_metrics(jobs.log_tail(_LOG_LINES, info))
        if not metrics:
            metrics = protocol.last_metrics(jobs.log_tail(_LOG_LINES_FLOOD, info))
        return metrics

    def _save(self, version: str | None = None) -> dict[str, Any]:
        record = self.record
        run_state.set_saved(record, self.mark.get("at"), self.now(), protocol.describe(record))
        if version is None:
            self.cluster.save(record)
        else:
            self.cluster.save(record, version)
        return record


def main() -> int:
    with open(os.environ.get("SUPERVISOR_SPEC", "/etc/verl-gke/run.json")) as file:
        spec = json.load(file)
    cluster = InCluster(spec["namespace"], spec["state"], spec["ray_cluster"])
    try:
        record = tick(spec, lambda sid: RayHttp(spec["dashboard"], sid), cluster,
                      say=lambda line: print(line, flush=True))
    except (OSError, RuntimeError, TimeoutError, ValueError) as error:
        # The head restarting, the API server busy: the next tick finishes what this one
        # started (every action was saved as an intent before it was taken).
        print(f"{spec['submission_id']}: this tick could not finish: {error}", flush=True)
        return 1
    print(f"{spec['submission_id']}: {record['state']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
