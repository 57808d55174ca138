"""Submitting a run's attempts from the provider: the next attempt, or the one to adopt.

The provider's side of the protocol (components/supervisor/protocol.py): what `pulumi up` submits when
it creates a run or finds its newest attempt FAILED or STOPPED, and the earlier runs of the same
resource it stops first. Following an attempt once submitted is job_provider.py's `_wait`.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any, Callable

from components.supervisor import protocol, recovery
from components.run.following import Progress, tail_metrics
from components.supervisor.protocol import RESUBMITTABLE, TERMINAL, Submission
from components.run.ray_access import RayAccessError, RayJobs


def submission(props: dict[str, Any]) -> Submission:
    return Submission(props["entrypoint"], props["runtime_env"], dict(props["metadata"]))


def newest(jobs: RayJobs, record: dict[str, Any]) -> int:
    """The newest attempt of the run in Ray, else the one the supervisor's record knows."""
    found = protocol.attempts(jobs.list_jobs(), jobs.submission_id)
    return max(found, default=record.get("attempt") or 0)


# The attempt about to be submitted, the preemptions before it, the run's first start.
Note = Callable[[int, int, float | None], None]


def ending(jobs: RayJobs, info: dict[str, Any], settle: bool = True) -> protocol.Ending:
    """How the attempt `info` (FAILED or STOPPED; `jobs` is its own) ended: a preemption or a
    failure (protocol.classify), at the last step its log shows. Without `settle`, a report:
    no wait for a node's death to be recorded."""
    step = (tail_metrics(jobs, None, jobs.policy, info) or {}).get("step")
    return protocol.classify(jobs, info, protocol.failure(info, step), step,
                             jobs.policy.settle_s if settle else 0.0)


def decide(
    jobs: RayJobs, number: int, info: dict[str, Any], max_retries: int,
    max_preemptions: int | None, deadline_s: float | None,
) -> tuple[recovery.Decision, protocol.Ending | None]:
    """What recovery.decide answers about attempt `number` (`info`; `jobs` is its own), which
    ended without reaching the target `up` waits for, and how it ended when decide asked
    (classified, settled). `up` is the one acting on the run, so its mark is settled; past the
    deadline (job.deadlineHours, from the run's first attempt) it gives up as a tick would."""
    budgets = recovery.Budgets(max_retries, max_preemptions, deadline_s=deadline_s)
    seen = recovery.Ended(recovery.Actor.PROVIDER, number, info["status"],
                          protocol.preemptions(info), first_start=protocol.first_start(info))
    decision = recovery.decide(seen, budgets, time.time())
    if isinstance(decision, recovery.Classify):
        seen = replace(seen, ending=ending(jobs, info))
        decision = recovery.decide(seen, budgets, time.time())
    return decision, seen.ending


def submit_or_adopt(
    jobs: RayJobs, props: dict[str, Any], progress: Progress, record: dict[str, Any],
    note: Note = lambda *_: None,
) -> int:
    """Submit the run, or adopt the attempt an earlier, interrupted `pulumi up` (or the
    supervisor) submitted; returns the attempt now current.

    A newest attempt found FAILED or STOPPED is followed by the next one, whatever the retry
    budget: a `pulumi up` that finds it so is the user's decision (protocol.py). It resumes from
    the run's checkpoints (trainer.resume_mode=auto). A SUCCEEDED one is adopted as it is. With
    no attempt in Ray but one in the supervisor's record, the head lost its job table: the next
    attempt is submitted.
    """
    stop_others(jobs, props["metadata"], progress)
    run, job = jobs.submission_id, submission(props)
    found = protocol.attempts(jobs.list_jobs(), run)
    if not found:
        # A lost attempt is a failure (supervisor.py _missing): the preemptions before it stay.
        known, preempted = record.get("attempt"), record.get("preempted") or 0
        number = 0 if known is None else known + 1
        why = None if known is None else "attempt lost with the Ray head"
        # A new run starts now (Ray's start_time of attempt 0 is a moment later: the deadline
        # counts from the note's at most that much early); a lost one from its known start.
        started = time.time() if known is None else record.get("first_start")
        note(number, preempted, started)
        if protocol.submit_attempt(jobs.for_id, run, number, job, why,
                                   record.get("first_start"), preempted):
            progress.say(f"submitted attempt {number}" if number else "submitted")
        else:
            progress.say(f"adopted attempt {number}")
        return number
    number = max(found)
    info = found[number]
    if info.get("entrypoint") != props["entrypoint"]:
        raise RayAccessError(
            f"{jobs.where()}: attempt {number} of this run has another entrypoint; stop it with "
            f"`ray job stop {info['submission_id']}` and run `pulumi up` again"
        )
    if info["status"] in RESUBMITTABLE:
        return resubmit(jobs, props, number, info, progress, note)
    progress.say(f"adopted attempt {number}, {info['status']}")
    return number


def resubmit(
    jobs: RayJobs, props: dict[str, Any], number: int, info: dict, progress: Progress,
    note: Note, ended: protocol.Ending | None = None,
) -> int:
    """The attempt after `number` (FAILED or STOPPED, `ended` so if already classified),
    submitted or adopted; returns the attempt now current."""
    ended = ended or ending(jobs.for_id(info["submission_id"]), info)
    preempted = protocol.preemptions(info) + ended.preempted
    progress.say(f"{ended.reason}; resubmitting as the next attempt, resuming from "
                 f"{props.get('checkpoint_uri') or 'its checkpoints'}")
    started = protocol.first_start(info)
    note(number + 1, preempted, started)
    return protocol.advance(jobs.for_id, jobs.submission_id, number, submission(props),
                            ended.reason, started, progress.say, preempted)


def stop_others(jobs: RayJobs, metadata: dict[str, str], progress: Progress) -> None:
    """Stop every other live job of this stack and resource, and wait until each has stopped.

    Such a job is an attempt (or export) of this resource's earlier run: left behind by a lost
    state, a `pulumi state delete`, an interrupted replace, or a supervisor tick that submitted
    for the old run as it was replaced. It holds the GPUs the new run needs.
    """
    keys = (protocol.STACK_KEY, protocol.RESOURCE_KEY)
    mine = {key: metadata[key] for key in keys if key in metadata}
    if len(mine) < 2:
        return
    run = jobs.submission_id
    own = re.compile(re.escape(run) + r"(?:" + re.escape(protocol.EXPORT_SUFFIX) + r")?-a\d+")
    others = [job for job in jobs.live_jobs(mine)
              if not own.fullmatch(job.get("submission_id") or "")]
    deadline = time.monotonic() + jobs.policy.stop_timeout_s
    for job in others:
        other = job["submission_id"]
        progress.say(f"stopping {other}, an earlier run of the same stack and resource that "
                     f"is still {job['status']}")
        jobs.stop_other(other)
        while (status := (jobs.info_of(other) or {"status": "STOPPED"})["status"]) not in TERMINAL:
            if time.monotonic() > deadline:
                raise RayAccessError(
                    f"{jobs.where()}: job {other} of the same stack and resource is still "
                    f"{status} {jobs.policy.stop_timeout_s:g}s after it was asked to stop; "
                    f"nothing was submitted. Stop it with `ray job stop --address "
                    f"<the dashboard> {other}` and run `pulumi up` again"
                )
            time.sleep(jobs.policy.poll_min_s)
        progress.say(f"{other} has stopped ({status})")
