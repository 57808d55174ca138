"""What to do after a run's attempt ended without success: one pure decision, for both actors.

Two actors may submit a run's next attempt (protocol.py): the supervisor's tick
(supervisor.py `_retry` and `_next`, supervisor_end.py `_retry_export` for the export) and the
job's provider while `pulumi up` follows an attempt (components/run/job_provider.py `_wait`,
through components/run/attempts.py `decide`). Both build an `Ended` from what they saw and
call `decide`, and do what it answers; neither holds a rule of its own. The places where they
rightly differ are inputs, not copies:
- `Ended.actor`: a tick comes back two minutes later and can ask Ray again when Ray's State API
  could not say whether a node was lost; `up` cannot (its user is waiting), so it counts a
  failure at once (`COMES_BACK`).
- `Ended.stopped_here`: only the supervisor makes stops of its own (a stall) and knows them
  from its record; a STOPPED attempt that the deciding actor did not stop was stopped by a
  person and is left alone.
- `Ended.mark_settled`: whether the provider's mark is the one the previous tick saw. A tick
  that is not sure no `pulumi up` is acting on the run does not give it up (`up` may be about
  to resubmit, the user's decision); the provider is that `up`, so it passes True.
- `Budgets.deadline_s`: None for an actor that is not given the deadline (a provider state from
  before 38's fix held no deadline_s input: only the supervisor gave a run up past it).
The model's export after the run is decided here too (`Ended.export`): its attempts are all
failures under maxRetries (a preempted export is retried like a failed one), the deadline
bounds the training only, and giving it up ends the run as EXPORT_FAILED.

A live attempt (PENDING or RUNNING) is decided here too, by `decide_live`: whether to stop it
at the deadline (the run ends) or for a stall (then `decide` follows it, a stop of the
supervisor's own). Only the supervisor calls it: `up` follows an attempt to its `waitFor` and
never stops one, so the provider has no rule about a live attempt to share.

A new failure policy ("give up on an OOM", "no retry before the first step") is a rule here,
in `decide` (or `decide_live`, "stop a run whose reward collapsed"), and a row in its tests
(tests/test_run_state.py); both actors then follow it. How an ended attempt is classified (a
preemption or a failure) stays protocol.classify, and the budgets' arithmetic
protocol.budget_spent.

Standard library only: shipped into the supervisor's pod with supervisor.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from components.supervisor.protocol import Ending, budget_spent
from components.supervisor.run_state import EndReason


class Actor(str, Enum):
    """Who decides: a tick of the supervisor's CronJob, or the provider while `up` follows."""

    SUPERVISOR = "supervisor"
    PROVIDER = "provider"


# Whether the actor looks at the run again by itself later (and so can wait for a better
# answer): the supervisor every tick; `pulumi up` returns to its user.
COMES_BACK = {Actor.SUPERVISOR: True, Actor.PROVIDER: False}


@dataclass(frozen=True)
class Budgets:
    """The run's budgets, as the deciding actor was given them (lifecycle.py's keys)."""

    max_retries: int
    max_preemptions: int | None = None  # None: preemptions resumed without limit
    deadline_s: float | None = None  # None: not known to this actor
    stall_s: float | None = None  # None: not watched by this actor (only a tick watches)


@dataclass(frozen=True)
class Ended:
    """What the deciding actor saw of the run's newest attempt, which ended without success."""

    actor: Actor
    attempt: int  # its number
    status: str  # Ray's FAILED or STOPPED, or LOST (gone with the head's job table)
    preempted_before: int  # preemptions among the attempts before it
    ending: Ending | None = None  # how it ended, once classified; a LOST one always has one
    stopped_here: bool = False  # STOPPED by a stop of the deciding actor's own (a stall)
    asked_before: bool = False  # an earlier look could not classify it either
    first_start: float | None = None  # epoch seconds of the run's first attempt
    mark_settled: bool = True  # no `pulumi up` may be acting on the run meanwhile
    export: bool = False  # an attempt of the model's export, not of the training


@dataclass(frozen=True)
class Classify:
    """Ask Ray how the attempt ended (protocol.classify), then decide again with the answer."""


@dataclass(frozen=True)
class Submit:
    """Submit attempt `attempt` (or adopt it), after `reason`, with `preempted` preemptions
    among the attempts before it."""

    attempt: int
    reason: str
    preempted: int


@dataclass(frozen=True)
class GiveUp:
    """End the run for good: `cause` (whose `releases` says whether the GPUs go back)."""

    cause: EndReason
    reason: str


@dataclass(frozen=True)
class Wait:
    """Decide later (the next tick); `classify_again`: the ending is not known yet either."""

    reason: str
    classify_again: bool = False


@dataclass(frozen=True)
class LeaveAlone:
    """Someone else decided (a person's stop): do nothing more, keep the GPUs."""

    cause: EndReason
    reason: str


Decision = Classify | Submit | GiveUp | Wait | LeaveAlone


def decide(seen: Ended, budgets: Budgets, now: float) -> Decision:
    """What to do about the run whose newest attempt ended as `seen` says, at `now`."""
    what = "export " if seen.export else ""
    if seen.status == "STOPPED" and not seen.stopped_here:
        return LeaveAlone(EndReason.STOPPED_BY_SOMEONE,
                          f"{what}stopped by someone else: left as it is")
    ending = seen.ending
    if ending is None:
        return Classify()
    if seen.export and ending.preempted:  # the export keeps one budget: maxRetries
        ending = Ending(False, ending.reason, ending.known)
    if not ending.known and not seen.asked_before and COMES_BACK[seen.actor]:
        return Wait(f"{ending.reason}; the next tick looks again", classify_again=True)
    spent = budget_spent(seen.attempt, seen.preempted_before, ending, budgets.max_retries,
                         budgets.max_preemptions)
    past = (budgets.deadline_s is not None and seen.first_start is not None
            and not seen.export and now - seen.first_start > budgets.deadline_s)
    if (past or spent) and not seen.mark_settled:
        # The provider wrote its mark since the last tick (or this is the first): a `pulumi up
        # --refresh` that found this attempt ended may be resubmitting it, the user's decision,
        # after waiting as long as this tick did for a lost node. Giving up now would release
        # the GPUs under that attempt; the next tick decides.
        return Wait(f"ended ({ending.reason}); not giving up before the next tick: `pulumi up` "
                    "may be acting on the run")
    if past:
        return GiveUp(EndReason.DEADLINE, f"deadline of {duration(budgets.deadline_s)} reached")
    if spent and seen.export:
        return GiveUp(EndReason.EXPORT_FAILED, f"export failed; {spent}")
    if spent:
        cause = EndReason.PREEMPTION_BUDGET if ending.preempted else EndReason.RETRY_BUDGET
        return GiveUp(cause, spent)
    return Submit(seen.attempt + 1, ending.reason, seen.preempted_before + ending.preempted)


@dataclass(frozen=True)
class Live:
    """What a tick saw of the run's newest attempt, PENDING or RUNNING."""

    attempt: int  # its number
    first_start: float  # epoch seconds of the run's first attempt
    progress: float  # epoch seconds of its newest step, or of its start before its first step
    step: float | None = None  # its newest step, if it logged one


@dataclass(frozen=True)
class Stop:
    """Stop the live attempt for `reason`. `ends`: the run ends with it (the deadline); None:
    the STOPPED attempt is the supervisor's own stop, and `decide` follows it (a stall)."""

    reason: str
    ends: EndReason | None = None


@dataclass(frozen=True)
class KeepRunning:
    """Leave the live attempt running."""


def decide_live(seen: Live, budgets: Budgets, now: float) -> Stop | KeepRunning:
    """What to do about the run whose newest attempt is live as `seen` says, at `now`: past the
    deadline (from the run's first attempt) it is stopped and the run ends; with no new step for
    `stall_s` (before its first step: since it started) it is stopped, and `decide` says what
    follows as after any failure."""
    if budgets.deadline_s is not None and now - seen.first_start > budgets.deadline_s:
        return Stop(f"deadline of {duration(budgets.deadline_s)} reached", EndReason.DEADLINE)
    if budgets.stall_s is not None and now - seen.progress > budgets.stall_s:
        where = (f"after step {int(seen.step)}" if seen.step is not None
                 else "before its first step")
        return Stop(f"no new step for {duration(budgets.stall_s)} {where}")
    return KeepRunning()


def duration(seconds: float) -> str:
    """A budget's length in words: "48 h", "45 min", "5 s"."""
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
