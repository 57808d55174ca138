"""The run's state as a type, and the named transitions that write the supervisor's record.

The supervisor keeps one record per run in its state ConfigMap (protocol.RECORD_KEY); its keys
are listed there and are read by `pulumi refresh` (components/run/kube.py) and by every later
tick, also ticks of a newer version of this code, so their names never change. This module
gives that record a type, as KubeRay gives a RayJob its JobDeploymentStatus and a typed reason
(ray-operator/apis/ray/v1/rayjob_types.go) and SkyPilot its ManagedJobStatus with one function
per transition (sky/jobs/state.py):
- `RunState`: what the run is doing, read from the record (`state_of`), never stored apart from
  it, so a record written before this type existed has a state too;
- `EndReason`: why a run ENDED, and whether that ending gives the GPUs back;
- `set_*`: every write of the record's keys a tick makes, one function per transition, so that
  which keys a transition sets is written once (the tick, supervisor.py and supervisor_end.py,
  calls them; the decision of what to do next is recovery.decide).
The table of states and their transitions is docs/run-lifecycle.md section 2.1, held to
MEANING and NEXT by tests/test_run_state.py.

Standard library only: shipped into the supervisor's pod with supervisor.py.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from components.supervisor.protocol import LAST_FAILURE_KEY, TERMINAL, Ending, preemptions


class RunState(str, Enum):
    """What a run is doing, as its supervisor's record says (`state_of`).

    In lifecycle order. Room is left, by design and not yet by behaviour, for the states the
    next capabilities add, each where it falls: QUEUED (waiting for whole nodes) before
    PENDING, WAITING_FOR_CAPACITY (no GPU worker alive) beside RUNNING, EVALUATING and
    UPLOADING between EXPORTING and RELEASING. RELEASING and RELEASED are the cluster's part of
    the run's state (the RayCluster is suspended for everyone on it): once records are keyed by
    run, they and a dispatch move to a cluster-level record, and a run's own states stop at
    ENDED and SUCCEEDED."""

    NEW = "NEW"
    SUBMITTING = "SUBMITTING"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    LOST = "LOST"
    SUCCEEDED = "SUCCEEDED"
    EXPORTING = "EXPORTING"
    ENDED = "ENDED"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"


# What each state means (docs/run-lifecycle.md's state table says the same, word for word).
MEANING = {
    RunState.NEW: "no attempt known yet (a new run's first tick)",
    RunState.SUBMITTING: "an attempt's submission saved as an intent, not yet seen in Ray",
    RunState.PENDING: "the newest attempt submitted, its driver not started",
    RunState.RUNNING: "the newest attempt runs: its steps are followed, its stall and the "
                      "deadline watched",
    RunState.STOPPING: "a stop of the supervisor's own (stall or deadline) saved, not yet seen "
                       "made",
    RunState.STOPPED: "the newest attempt stopped by the supervisor for a stall: decide",
    RunState.FAILED: "the newest attempt failed: classify it, then decide",
    RunState.LOST: "the newest attempt gone with the head's job table: a failure, decide",
    RunState.SUCCEEDED: "the training succeeded (and its export, if one ran): the export, then "
                        "the release, come next where due",
    RunState.EXPORTING: "the model's export (its own attempts) submitted, running or failed",
    RunState.ENDED: "ended for good, with its EndReason; the GPUs go back if the reason says so",
    RunState.RELEASING: "the RayCluster's suspension saved as an intent",
    RunState.RELEASED: "the RayCluster suspended: the GPUs are back",
}

# The states a tick can take a run to from each state (docs/run-lifecycle.md's table), besides
# two moves open to many states: any state can become ENDED (the provider's mark ended the run
# or names another: EndReason.BY_PULUMI), and a run whose newest attempt ended, or that ENDED or
# was RELEASED, takes the state of an attempt another actor submitted meanwhile (an explicit
# `pulumi up`: FOLLOWED_AGAIN).
NEXT = {
    RunState.NEW: {RunState.PENDING, RunState.RUNNING, RunState.FAILED, RunState.STOPPED,
                   RunState.LOST, RunState.SUCCEEDED},
    RunState.SUBMITTING: {RunState.PENDING},
    RunState.PENDING: {RunState.RUNNING, RunState.STOPPING, RunState.FAILED, RunState.LOST,
                       RunState.SUCCEEDED},
    RunState.RUNNING: {RunState.STOPPING, RunState.FAILED, RunState.LOST, RunState.SUCCEEDED},
    RunState.STOPPING: {RunState.STOPPED, RunState.ENDED},
    RunState.STOPPED: {RunState.SUBMITTING, RunState.ENDED},
    RunState.FAILED: {RunState.SUBMITTING, RunState.ENDED},
    RunState.LOST: {RunState.SUBMITTING, RunState.ENDED},
    RunState.SUCCEEDED: {RunState.EXPORTING, RunState.RELEASING},
    RunState.EXPORTING: {RunState.SUCCEEDED, RunState.ENDED},
    RunState.ENDED: {RunState.RELEASING},
    RunState.RELEASING: {RunState.RELEASED},
    RunState.RELEASED: set(),
}
FOLLOWED_AGAIN = (frozenset({RunState.STOPPED, RunState.FAILED, RunState.LOST, RunState.ENDED,
                             RunState.RELEASED}),
                  frozenset({RunState.NEW, RunState.PENDING, RunState.RUNNING, RunState.STOPPED,
                             RunState.FAILED, RunState.LOST, RunState.SUCCEEDED,
                             RunState.EXPORTING}))


def may_follow(before: RunState, after: RunState) -> bool:
    """Whether a tick can take a run from `before` to `after` (NEXT and the two moves open to
    many states)."""
    return (after is before or after in NEXT[before] or after is RunState.ENDED
            or before in FOLLOWED_AGAIN[0] and after in FOLLOWED_AGAIN[1])


class EndReason(str, Enum):
    """Why a run ENDED (the record's `ended`, key `cause`; for a record from before that key,
    read from its other keys by `reason_of`)."""

    RETRY_BUDGET = "retry-budget"  # maxRetries failures spent
    PREEMPTION_BUDGET = "preemption-budget"  # maxPreemptions preemptions spent
    DEADLINE = "deadline"  # deadlineHours since the run's first attempt started
    EXPORT_FAILED = "export-failed"  # the export's attempts spent maxRetries
    STOPPED_BY_SOMEONE = "stopped-by-someone"  # a stop the supervisor did not make: left alone
    BY_PULUMI = "by-pulumi"  # the provider's mark ended the run, or names another run

    @property
    def releases(self) -> bool:
        """Whether this ending gives the GPUs back (with releaseGpus): a run the supervisor
        gave up, never one a person stopped or Pulumi ended."""
        return self not in (EndReason.STOPPED_BY_SOMEONE, EndReason.BY_PULUMI)


def state_of(record: dict[str, Any]) -> RunState:
    """The state the record holds; any record the supervisor ever saved has one."""
    intent = (record.get("intent") or {}).get("action")
    if record.get("released"):
        return RunState.RELEASED
    if intent == "release":
        return RunState.RELEASING
    if record.get("ended"):
        stopped = record.get("stopped") or {}
        live = record.get("status") not in TERMINAL and record.get("status") != "LOST"
        if live and record.get("attempt") is not None and stopped.get(
                "attempt") == record.get("attempt"):
            return RunState.STOPPING  # a deadline's stop saved, not yet made
        return RunState.ENDED
    if intent == "submit":
        return RunState.SUBMITTING
    if intent == "export" or record.get("export_attempt") is not None and record.get(
            "export_status") != "SUCCEEDED":
        return RunState.EXPORTING
    status = record.get("status")
    if status is None:
        return RunState.NEW
    if status in ("PENDING", "RUNNING"):
        stopped = record.get("stopped") or {}
        if stopped.get("attempt") == record.get("attempt"):
            return RunState.STOPPING
    # STOPPED (a stop of its own: else it ENDED), FAILED, LOST, SUCCEEDED, or the live ones
    return RunState.__members__.get(status, RunState.NEW)


def reason_of(record: dict[str, Any]) -> EndReason | None:
    """Why the run ENDED (or was RELEASED after it ended), None while it has not."""
    ended = record.get("ended")
    if not ended:
        return None
    if ended.get("cause"):
        return EndReason(ended["cause"])
    # Records from before `cause`: their `by` and their reason's words, as 789f86a wrote them.
    by, text = ended.get("by"), ended.get("reason") or ""
    if by == "pulumi":
        return EndReason.BY_PULUMI
    if by == "someone else":
        return EndReason.STOPPED_BY_SOMEONE
    for start, reason in (("deadline", EndReason.DEADLINE), ("export", EndReason.EXPORT_FAILED),
                          ("preemption", EndReason.PREEMPTION_BUDGET)):
        if text.startswith(start):
            return reason
    return EndReason.RETRY_BUDGET


# === Transitions: each names one change of the run and writes exactly its keys ===============


def new_record(run_id: str) -> dict[str, Any]:
    """NEW: a run's first tick (the record of the run before it, if any, is moot)."""
    return {"submission_id": run_id}


def set_reopened(record: dict[str, Any]) -> None:
    """ENDED or RELEASED -> followed again: an explicit `pulumi up` acted on the run since."""
    record.update(released=False, released_reason=None, ended=None)
    record.pop("settled_mark")


def set_seen(record: dict[str, Any], number: int, info: dict[str, Any],
             first_start: float | None) -> None:
    """The newest attempt as Ray lists it: its number, status and what its metadata carries.
    An ending of an older attempt is dropped (an explicit `pulumi up` submitted a newer one)."""
    if record.get("attempt") != number:
        record.update(attempt=number, step_attempt=None)
    record["preempted"] = preemptions(info)
    ended = record.get("ended") or {}
    if ended.get("attempt") is not None and ended["attempt"] < number:
        record["ended"] = None
    _keep_earliest_start(record, first_start)
    record.update(status=info["status"], last_failure=(info.get("metadata") or {}).get(
        LAST_FAILURE_KEY))


def set_step(record: dict[str, Any], number: int, step: float, now: float | None = None) -> None:
    """Attempt `number` logged `step`; `now` when a tick saw it progress (the stall's clock)."""
    record.update(step=step, step_attempt=number)
    if now is not None:
        record["last_step_at"] = now
        record.setdefault("first_step_at", now)


def set_status(record: dict[str, Any], status: str | None) -> None:
    record["status"] = status


def set_preempted(record: dict[str, Any], preempted: int) -> None:
    """The preemptions before the newest attempt, when Ray's job table no longer says."""
    record["preempted"] = preempted


def set_lost(record: dict[str, Any], preempted: int, first_start: float | None = None) -> None:
    """LOST: the newest attempt is gone with the head's job table (a failure). `first_start`:
    the run's first start as the provider's note knows it, kept if no tick saw an attempt."""
    record.update(preempted=preempted, status="LOST")
    _keep_earliest_start(record, first_start)


def _keep_earliest_start(record: dict[str, Any], first_start: float | None) -> None:
    """The run's first start: the earliest any attempt or note has shown."""
    if first_start is not None:
        record["first_start"] = min(first_start, record.get("first_start") or first_start)


def set_stopping(record: dict[str, Any], reason: str) -> None:
    """STOPPING: the supervisor's own stop of the newest attempt, saved before it is made."""
    record["stopped"] = {"attempt": record["attempt"], "reason": reason}


def set_ending(record: dict[str, Any], number: int, ending: Ending) -> None:
    """How attempt `number` ended, once classified (the outputs' counts read it)."""
    record["ending"] = {"attempt": number, "preempted": ending.preempted,
                        "reason": ending.reason}


def set_unknown_ending(record: dict[str, Any], number: int) -> None:
    """Ray's State API could not say how attempt `number` ended: the next tick asks again."""
    record["unknown_ending"] = number


def set_ended(record: dict[str, Any], attempt: int | None, cause: EndReason, reason: str,
              now: float) -> None:
    """ENDED, for `cause` (`reason` in words); its GPUs are released if the cause releases."""
    by = {EndReason.BY_PULUMI: "pulumi",
          EndReason.STOPPED_BY_SOMEONE: "someone else"}.get(cause, "supervisor")
    ended = {"attempt": attempt, "by": by, "reason": reason, "at": now, "cause": cause.value}
    if cause.releases:
        ended["release"] = True
    record["ended"] = ended


def set_intent(record: dict[str, Any], action: str, reason: str | None,
               attempt: int | None = None, preempted: int | None = None) -> None:
    """SUBMITTING, EXPORTING or RELEASING: an action saved before it is taken."""
    intent: dict[str, Any] = {"action": action}
    if attempt is not None:
        intent["attempt"] = attempt
    intent["reason"] = reason
    if preempted is not None:
        intent["preempted"] = preempted
    record["intent"] = intent


def clear_intent(record: dict[str, Any]) -> None:
    """The intent saved by this tick or a dead one was carried out, or may no longer be."""
    record["intent"] = None


def set_submitted(record: dict[str, Any], number: int, preempted: int, why: str) -> None:
    """SUBMITTING -> PENDING: attempt `number` submitted (or adopted) after `why`."""
    record.update(attempt=number, preempted=preempted, status="PENDING", step_attempt=None,
                  last_failure=why, intent=None)


def set_export_seen(record: dict[str, Any], number: int, status: str) -> None:
    """The newest export attempt as Ray lists it."""
    record.update(export_attempt=number, export_status=status)


def set_export_submitted(record: dict[str, Any], number: int) -> None:
    """EXPORTING: export attempt `number` submitted."""
    record.update(export_attempt=number, export_status="PENDING", intent=None)


def set_released(record: dict[str, Any], reason: str, now: float) -> None:
    """RELEASED: the RayCluster suspended."""
    record.update(released=True, released_at=now, released_reason=reason, intent=None)


def set_saved(record: dict[str, Any], mark_at: Any, now: float, state: str) -> None:
    """What every save writes: the provider's mark this tick saw (and, once the run ended or was
    released here, the mark it ended under: a later change is an explicit `pulumi up`)."""
    if (record.get("ended") or record.get("released")) and "settled_mark" not in record:
        record["settled_mark"] = mark_at
    record.update(updated=now, mark_at=mark_at, state=state)
