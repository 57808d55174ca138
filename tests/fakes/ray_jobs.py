"""An in-memory Ray job table behind the supervisor's client interface, for tick-level tests.

Each behaviour is Ray 2.47.0's (the installed package, python/ray/dashboard/modules/job/):
- submit under an existing id fails with "already exists" and changes nothing
  (job_manager.py:501-508, put_info(overwrite=False)); the client reads that as False
  (supervisor.RayHttp.submit); a new record is PENDING with start_time set at submission
  (job_manager.py:489-495);
- stop of a non-terminal job makes it STOPPED (job_manager.py stop_job -> JobSupervisor.stop;
  the status is written once the process is gone); of a terminal or unknown one, nothing;
- GET /api/jobs/ lists every record with its metadata (job_head.py list_jobs);
- each submission id has its own driver log (common.py:34 JOB_LOGS_PATH_TEMPLATE), read by
  its tail (log_manager.py, `lines`);
- a head restart without GCS fault tolerance empties the table and kills every driver
  (the table lives in the head's GCS internal KV, common.py:233-252).
Tests move jobs along by hand (`finish`, `log`); nothing happens on its own.
"""

from __future__ import annotations

from typing import Any

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class FakeRay:
    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, list[str]] = {}
        self.submissions: list[str] = []  # every accepted submission id, in order
        self.clock = 1_000_000.0  # epoch seconds of the next submission
        self.down = False  # the head is unreachable (suspended cluster)

    def __call__(self, submission_id: str) -> "FakeJobs":
        return FakeJobs(self, submission_id)

    # --- what tests do ---------------------------------------------------------------------

    def run(self, submission_id: str) -> None:
        self.records[submission_id].update(status="RUNNING", driver_node_id="head")

    def finish(self, submission_id: str, status: str) -> None:
        self.records[submission_id]["status"] = status

    def log(self, submission_id: str, line: str) -> None:
        self.logs.setdefault(submission_id, []).append(line)

    def restart_head(self) -> None:
        self.records.clear()
        self.logs.clear()

    def live(self) -> list[str]:
        return [sid for sid, info in self.records.items() if info["status"] not in TERMINAL]


class FakeJobs:
    """The calls supervisor.RayHttp makes, for one submission id."""

    def __init__(self, ray: FakeRay, submission_id: str) -> None:
        self.ray, self.submission_id = ray, submission_id

    def _up(self) -> None:
        if self.ray.down:
            raise OSError("connection refused: the head Service has no endpoints")

    def info(self) -> dict[str, Any] | None:
        self._up()
        info = self.ray.records.get(self.submission_id)
        return dict(info) if info else None

    def submit(self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
               resources: dict[str, Any] | None = None) -> bool:
        self._up()
        if self.submission_id in self.ray.records:
            return False
        self.ray.clock += 1
        self.ray.records[self.submission_id] = {
            "submission_id": self.submission_id, "status": "PENDING", "entrypoint": entrypoint,
            "metadata": dict(metadata), "start_time": int(self.ray.clock * 1000),
            "driver_node_id": None, **(resources or {}),
        }
        self.ray.submissions.append(self.submission_id)
        return True

    def stop(self) -> None:
        self._up()
        info = self.ray.records.get(self.submission_id)
        if info and info["status"] not in TERMINAL:
            info["status"] = "STOPPED"

    def log_tail(self, lines: int, info: dict[str, Any] | None = None) -> str:
        self._up()
        return "\n".join(self.ray.logs.get(self.submission_id, [])[-lines:])

    def list_jobs(self) -> list[dict[str, Any]]:
        self._up()
        return [dict(info) for info in self.ray.records.values()]
