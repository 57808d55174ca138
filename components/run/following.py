"""Following a Ray job: polling its status, reporting progress, reading its log's tail.

Shared by the GRPO run's provider (job_provider.py), its export (export.py) and the
ClusterCheck. Only status, phases, times and parsed numbers are ever printed, never a raw log
line: a log can hold anything, secrets included.
"""

from __future__ import annotations

import datetime
import time
from typing import Any, Callable

import pulumi

from components.supervisor import protocol
from components.supervisor.protocol import last_metrics
from components.run.ray_access import RayAccessError, RayJobs, RequestPolicy


# How long a record may be missing before it is reported gone: a head that restarts answers
# with no table at all, a submission is visible as soon as Ray answered it (job_manager.py
# put_info before submit_job returns), so this is only a margin for a slow head.
MISSING_S = 10.0


class Progress:
    """Status and phase changes as they happen; otherwise one line per `progress_every_s` with
    the time waited and the latest metrics. Only status, phases, times and parsed numbers are
    printed, never a raw log line (a log can hold anything, secrets included)."""

    def __init__(self, jobs: RayJobs, policy: RequestPolicy, say: Callable[[str], None]) -> None:
        self._jobs, self._policy, self._say = jobs, policy, say
        self._started = time.monotonic()
        self._status: str | None = None
        self._phase = 0
        self._next = self._started + policy.progress_every_s
        self.first_step_s: float | None = None

    def follow(self, jobs: RayJobs) -> None:
        """Follow another attempt from now on: its status, phases and first step are its own
        (each attempt has its own driver log, protocol.py), so nothing of the one before counts.
        """
        if jobs.submission_id != self._jobs.submission_id:
            self._jobs = jobs
            self._status, self._phase, self.first_step_s = None, 0, None

    def say(self, text: str) -> None:
        self._say(f"{self._jobs.submission_id}: {text}")

    def seen(self, info: dict[str, Any], log: str | None = None) -> None:
        """One poll's finding; `log` is the log's tail when it was read for this poll."""
        now = time.monotonic()
        status = info["status"]
        if status != self._status:
            self._status = status
            what = "driver started" if status == "RUNNING" else status
            self.say(f"{what} after {duration(now - self._started)}")
            self._next = now + self._policy.progress_every_s
        if log is not None:
            reached = protocol.phase(log)
            for name, _ in protocol.PHASES[self._phase:reached]:
                self.say(f"{name} after {duration(now - self._started)}")
            self._phase = max(self._phase, reached)
            if self.first_step_s is None and (metrics := last_metrics(log)):
                start = info.get("start_time")
                self.first_step_s = round(time.time() - start / 1000, 1) if start else None
                shown = metrics_text(metrics)
                self.say(f"first step after {duration(now - self._started)}; {shown}")
                self._next = now + self._policy.progress_every_s
        if now >= self._next:
            metrics = last_metrics(log) if log is not None else tail_metrics(
                self._jobs, None, self._policy, info) or {}
            shown = metrics_text(metrics)
            self.say(f"{status}, {duration(now - self._started)} waited"
                     + (f"; {shown}" if shown else ""))
            self._next = now + self._policy.progress_every_s


def metrics_text(metrics: dict[str, float]) -> str:
    return " ".join(f"{key}={value:g}" for key, value in list(metrics.items())[:6])


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def short(message: str | None) -> str:
    """Ray's status message without the log lines it quotes (they are printed apart)."""
    return (message or "").split("\n", 1)[0][:300]


def poll(
    jobs: RayJobs,
    statuses: frozenset[str],
    deadline: float,
    policy: RequestPolicy,
    seen: Callable[[dict], None] | None = None,
    until: Callable[[dict], bool] | None = None,
) -> dict:
    """Poll the job until its status is one of `statuses` (or `until` holds), at most 10% after
    it got there. Records are never deleted (protocol.py): one missing for longer than
    MISSING_S was lost with the head's job table."""
    started = time.monotonic()
    missing_since: float | None = None
    while True:
        info = jobs.info()
        now = time.monotonic()
        if info is None:
            missing_since = missing_since or now
            if now - missing_since > MISSING_S:
                raise RayAccessError(
                    f"{jobs.where()} no longer exists in Ray (was the head restarted?); run "
                    "`pulumi refresh` and then `pulumi up` to submit it again"
                )
            time.sleep(policy.poll_min_s)
            continue
        missing_since = None
        if seen is not None:
            seen(info)
        if info["status"] in statuses or (until is not None and until(info)):
            return info
        interval = min(max(policy.poll_min_s, (now - started) / 10), policy.poll_max_s)
        if now + interval > deadline:
            raise RayAccessError(
                f"{jobs.where()} is still {info['status']} at the deadline; it was left as it "
                "is: run `pulumi up` again to keep waiting (it adopts the job), or raise "
                "verl-gke:job.timeoutMinutes"
            )
        time.sleep(interval)


def tail_metrics(
    jobs: RayJobs, previous: dict[str, float] | None, policy: RequestPolicy, info: dict
) -> dict[str, float] | None:
    """The last metric line of the log's tail; the previous snapshot if it cannot be read.

    Only the tail is read (RayJobs.log_tail), so refresh costs the same after days of NCCL INFO
    lines as after a minute. The job's status must still be reported when the log is unreadable.
    """
    try:
        metrics = last_metrics(jobs.log_tail(policy.log_tail_lines, info))
    except RayAccessError as error:
        pulumi.log.warn(f"metrics not refreshed, keeping the last ones: {error}")
        return previous
    return metrics or previous


def iso(epoch_ms: int | None) -> str | None:
    if not epoch_ms:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")


def log_tail(jobs: RayJobs, info: dict, lines: int = 20) -> str:
    try:
        return "\n".join(jobs.log_tail(lines, info).splitlines()[-lines:])
    except RayAccessError as error:
        return f"(log unavailable: {error})"
