"""The one protocol every submitter of a run follows, and what a verl job log says.

Two actors submit a run's Ray job: the Pulumi provider (components/ray/job_provider.py), while a
`pulumi up` follows it, and the supervisor in the cluster (components/ray/supervisor.py), at any
time after that. Both call only the functions here, so that together they never start a second
run (KUBERAY-RAYJOB-REVIEW.md, "Never two runs"):
- One id. Every attempt of a run is submitted under the run's deterministic submission id, and
  its export under `<id>-export`; nobody ever switches to another id.
- Ray's job table is the lock. Ray keeps one record per id (job_manager.py submit_job ->
  put_info(overwrite=False) answers "already exists"), so of two racing submissions one wins
  and the other adopts it. Resubmission is delete-then-submit, and Ray deletes only a terminal
  record (job_manager.py delete_job: "non-terminal state"), so a record someone else has just
  resubmitted cannot be deleted under them: the loser adopts.
- Terminal is not free. The old attempt's supervisor actor must be dead before the record is
  deleted (RayJobs.delete), or Ray's job monitor writes a FAILED record back over the new one.
- Who may resubmit what. A FAILED record may be resubmitted by either actor while its attempt
  number (job metadata `verl-gke-attempt`, carried from one attempt to the next) is below the
  run's `maxRetries`; a record the supervisor stopped for a hang (metadata of the stop, kept in
  its state) counts as FAILED. A STOPPED record that nobody recorded as a hang was ended by a
  person or by `pulumi destroy`, and is never resubmitted by the supervisor. A SUCCEEDED record
  is never resubmitted. The provider's explicit `pulumi up` after a refresh found the run FAILED
  or STOPPED resubmits once more: that is the user's decision.
- A record that is gone was ended: the provider deletes the record when it deletes the run, and
  the supervisor then has nothing to follow.

Standard library only: this file is shipped, with supervisor.py, into the supervisor's pod.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

# Ray's JobStatus values that never change again (ray/dashboard/modules/job/common.py).
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
RESUBMITTABLE = frozenset({"FAILED", "STOPPED"})
# Metadata keys that name the stack and the resource of a job, and the attempt it is.
STACK_KEY, RESOURCE_KEY = "verl-gke-stack", "verl-gke-resource"
ATTEMPT_KEY = "verl-gke-attempt"
# Why the attempt before this one ended, e.g. "FAILED at step 12" or "stalled at step 12".
LAST_FAILURE_KEY = "verl-gke-last-failure"
ROLE_KEY = "verl-gke-role"
EXPORT_SUFFIX = "-export"
# A record missing for longer than this was ended, not deleted for a resubmission (whose
# delete-then-submit leaves a gap of about a second).
GAP_S = 10.0


class Jobs(Protocol):
    """Ray's Jobs API for one submission id; ray_access.RayJobs and the supervisor's client."""

    submission_id: str

    def info(self) -> dict[str, Any] | None: ...

    def submit(
        self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
        resources: dict[str, Any] | None = None,
    ) -> bool: ...

    def delete(self) -> bool: ...

    def stop(self) -> None: ...

    def log_tail(self, lines: int, info: dict[str, Any] | None = None) -> str: ...


@dataclass(frozen=True)
class Submission:
    """What is submitted under one id, the same on every attempt but for the attempt keys."""

    entrypoint: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str]
    # Ray's entrypoint_num_cpus / _num_gpus / _memory / _resources; {} runs it on the head.
    resources: dict[str, Any] | None = None

    @classmethod
    def of(cls, spec: dict[str, Any]) -> "Submission":
        return cls(spec["entrypoint"], spec["runtime_env"], dict(spec["metadata"]),
                   spec.get("resources") or None)


def attempt(info: dict[str, Any] | None) -> int:
    """The attempt a record is, 0 for the first submission."""
    raw = ((info or {}).get("metadata") or {}).get(ATTEMPT_KEY, "0")
    return int(raw) if str(raw).isdigit() else 0


def failure(info: dict[str, Any], step: float | None, reason: str | None = None) -> str:
    """How an attempt ended, in words safe to show anywhere: status (or reason) and step.

    Ray's message is left out: it quotes the driver's last log lines, which may hold anything.
    """
    where = f" at step {int(step)}" if step is not None else " before its first step"
    return f"{reason or info['status']}{where}"


def submit_first(jobs: Jobs, job: Submission) -> bool:
    """Submit attempt 0; False if a record already exists under the id (adopt it)."""
    return jobs.submit(job.entrypoint, job.runtime_env, {**job.metadata, ATTEMPT_KEY: "0"},
                       job.resources)


def resubmit(
    jobs: Jobs, job: Submission, seen: dict[str, Any], why: str,
    say: Callable[[str], None], settle_s: float = 120.0, poll_s: float = 0.2,
) -> str:
    """Submit the attempt after `seen` (a terminal record) under the same id.

    Returns "resubmitted"; "adopted" when another actor resubmitted first (the record is no
    longer the one seen: another attempt number, or not terminal); "ended" when the record
    disappeared and nobody resubmitted it. Never raises for a lost race.
    """
    deadline = time.monotonic() + settle_s
    missing_since: float | None = None
    while True:
        now = jobs.info()
        if now is not None and (now["status"] not in TERMINAL or attempt(now) != attempt(seen)):
            say(f"adopted attempt {attempt(now)}, {now['status']} (resubmitted by another actor)")
            return "adopted"
        if now is not None and jobs.delete():
            break  # only the actor whose delete removed the record submits the next attempt
        # Deleted by someone else: their submission follows within a second or two, unless the
        # record was ended (the provider deletes it when it deletes the run).
        if now is None:
            missing_since = missing_since or time.monotonic()
            if time.monotonic() - missing_since > GAP_S:
                say("its record was removed and nobody resubmitted it: the run was ended")
                return "ended"
        elif time.monotonic() > deadline:
            raise TimeoutError(f"{jobs.submission_id}: its record could not be deleted within "
                               f"{settle_s:g}s; nothing was submitted")
        time.sleep(poll_s)
    metadata = {**job.metadata, ATTEMPT_KEY: str(attempt(seen) + 1), LAST_FAILURE_KEY: why}
    if jobs.submit(job.entrypoint, job.runtime_env, metadata, job.resources):
        say(f"attempt {attempt(seen) + 1} submitted after {why}")
        return "resubmitted"
    now = jobs.info() or {}
    say(f"adopted attempt {attempt(now)}, {now.get('status')} (submitted by another actor)")
    return "adopted"


def may_retry(info: dict[str, Any], max_retries: int) -> bool:
    """Whether the retry budget allows an attempt after this record's."""
    return attempt(info) < max_retries


# --- What a verl job log says -----------------------------------------------------------------

# verl's console logger prints one line per step: "step:12 - critic/score/mean:0.53 - ..."
# (verl/utils/logger/aggregate_logger.py concat_dict_to_str); Ray prefixes actor output with
# "(TaskRunner pid=123) ". Values may be numpy reprs such as np.float64(0.5).
_STEP_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
_NUMBER = re.compile(r"^(?:np\.\w+\()?([-+0-9.eEinfa]+)\)?$")

# The phases of a verl run before its first step, in order, and the line that marks each
# (volcengine/verl b178a3cd5): verl/trainer/main_ppo.py:278 "TaskRunner hostname:", once the
# TaskRunner actor is placed; verl/trainer/ppo/ray_trainer.py:384 "Total training steps:", from
# the dataloader setup that precedes init_workers (the FSDP workers load the model and build the
# vLLM rollout engine there); ray_trainer.py:1014 "Training from scratch" or :1026 "Load from
# checkpoint folder", from _load_checkpoint at the start of fit(), once every worker and the
# rollout engine are up. A phase seen implies the ones before it.
PHASES = (
    ("TaskRunner placed", re.compile(r"TaskRunner hostname:")),
    ("loading the model and starting the rollout engine", re.compile(r"Total training steps:")),
    ("workers and rollout engine up", re.compile(r"Training from scratch|Load from checkpoint")),
)


def last_metrics(log: str) -> dict[str, float]:
    """The metrics of the last step line in a verl job log; {} before the first step."""
    for line in reversed(log.splitlines()):
        if match := _STEP_LINE.search(line):
            metrics = {"step": float(match.group(1))}
            for item in match.group(2).split(" - "):
                key, _, raw = item.rpartition(":")
                number = _NUMBER.match(raw.strip())
                if key and number:
                    with_value = _finite(number.group(1))
                    if with_value is not None:
                        metrics[key.strip()] = with_value
            return metrics
    return {}


def phase(log: str) -> int:
    """How many of PHASES the log shows reached (the latest one seen counts its predecessors)."""
    reached = 0
    for index, (_, pattern) in enumerate(PHASES, start=1):
        if pattern.search(log):
            reached = index
    return reached


def _finite(text: str) -> float | None:
    """A float for the stack state, which is JSON: NaN and infinities are dropped."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --- The supervisor's record ---------------------------------------------------------------
# What the supervisor keeps between ticks, in its state ConfigMap under RECORD_KEY, and what the
# provider reads on refresh once the cluster is released (the job table is gone with the head):
# submission_id, attempt, status, step, last_step_at, first_start, first_step_at, last_failure,
# stopped ({"attempt": n, "reason": ...} for a stop of its own), export_status, released,
# gave_up (why it stopped acting), updated (epoch seconds).
RECORD_KEY = "record"


def describe(record: dict[str, Any]) -> str:
    """The run's current state in one line, e.g. "SUCCEEDED at step 58, attempt 2, export
    SUCCEEDED, GPUs released"."""
    text = record.get("status") or "UNKNOWN"
    if record.get("step") is not None:
        text += f" at step {int(record['step'])}"
    parts = [text]
    if record.get("attempt"):
        parts.append(f"attempt {int(record['attempt']) + 1}")
    stopped = record.get("stopped")
    if stopped and stopped.get("attempt") == record.get("attempt"):
        parts.append(f"stopped by the supervisor: {stopped['reason']}")
    if record.get("export_status"):
        parts.append(f"export {record['export_status']}")
    if record.get("released"):
        parts.append("GPUs released")
    if record.get("gave_up"):
        parts.append(record["gave_up"])
    return ", ".join(parts)
