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
  (the table lives in the head's GCS internal KV, common.py:233-252);
- the State API lists nodes, the dead ones kept with `state` DEAD, `end_time_ms` and a
  `state_message` (util/state/common.py NodeState; dashboard/state_aggregator.py
  compose_state_message), and a job's actors with their `node_id`, the dead ones included
  (ActorState): a driver's Ray `job_id` is set once it runs (JobDetails). What a lost worker
  node looks like was read off a local Ray 2.47 whose worker node was killed mid-job: its
  actor died of its owner's exit (OWNER_DIED), its node DEAD "Unexpected termination: health
  check failed due to missing too many heartbeats" (tests/test_preemption_ray.py checks the
  classification against that Ray).
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
        self.nodes: list[dict[str, Any]] = [_node("head", head=True)]
        self.actors: dict[str, list[dict[str, Any]]] = {}  # Ray job id -> its actors

    def __call__(self, submission_id: str) -> "FakeJobs":
        return FakeJobs(self, submission_id)

    # --- what tests do ---------------------------------------------------------------------

    def run(self, submission_id: str) -> None:
        """The driver runs on the head, its worker actor on a GPU node of its own."""
        job_id = f"{len(self.actors) + 2:02d}000000"
        node = _node(f"worker-{job_id}")
        self.nodes.append(node)
        self.actors[job_id] = [{"actor_id": job_id + "a", "job_id": job_id, "state": "ALIVE",
                                "node_id": node["node_id"], "class_name": "Worker"}]
        self.records[submission_id].update(status="RUNNING", driver_node_id="head",
                                           job_id=job_id)

    def finish(self, submission_id: str, status: str) -> None:
        record = self.records[submission_id]
        record.update(status=status, end_time=int(self.clock * 1000))
        for actor in self.actors.get(record.get("job_id"), []):
            actor["state"] = "DEAD"

    def lose_node(self, submission_id: str) -> None:
        """The GPU node of the attempt's worker actor dies; the attempt FAILED with it."""
        job_id = self.records[submission_id]["job_id"]
        lost = {actor["node_id"] for actor in self.actors[job_id]}
        for node in self.nodes:
            if node["node_id"] in lost:
                node.update(state="DEAD", end_time_ms=int(self.clock * 1000), state_message=(
                    "Unexpected termination: health check failed due to missing too many "
                    "heartbeats"))
        self.finish(submission_id, "FAILED")

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

    def nodes(self) -> list[dict[str, Any]]:
        self._up()
        return [dict(node) for node in self.ray.nodes]

    def actors_of(self, job_id: str) -> list[dict[str, Any]]:
        self._up()
        return [dict(actor) for actor in self.ray.actors.get(job_id, [])]


def _node(name: str, head: bool = False) -> dict[str, Any]:
    return {"node_id": name, "node_ip": f"10.0.0.{2 if head else 3}", "is_head_node": head,
            "state": "ALIVE", "state_message": None, "start_time_ms": 0, "end_time_ms": 0}
