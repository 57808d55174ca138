"""Ray 2.47.0's Jobs API and the parts of its State API the program calls, as the head behaves.

Every behaviour cites ray-2.47.0 `python/ray/dashboard/modules/...` (installed in .venv as
`ray/dashboard/modules/...`); tests/test_sim_conformance.py runs the same operations against a
real local head and compares statuses, errors and log reads.

- A submission puts a PENDING record under its id, or fails if one exists: job_manager.py
  :500-508 `put_info(overwrite=False)` -> ValueError "already exists"; the agent answers 400
  (job_agent.py:58-62) and the head re-raises it as a 500 "Request failed with status code
  400: ..." (job_head.py:128-131, :504-508). Each submission appends "Runtime env is setting
  up." to the driver log (job_manager.py:531), which is `job-driver-<submission id>.log`
  (common.py:34), opened in append mode by the job's supervisor actor (job_supervisor.py:174):
  a resubmission under the same id appends to the same file.
- The supervisor actor `_ray_internal_job_actor_<id>` starts the driver and marks the record
  RUNNING with its node id (job_supervisor.py:342-349); the driver's exit code makes it
  SUCCEEDED or FAILED (:420-463); the actor then exits (:473). A dead actor's record that is
  still non-terminal is marked FAILED by the job monitor within its 1 s loop
  (job_manager.py:70, :151-290), whatever attempt the record is by then.
- stop signals a live actor and answers {"stopped": true}, or {"stopped": false} when the
  actor is gone (job_manager.py:584-596); an unknown id is a 404 (job_head.py:517-531).
- delete removes the record only when it is terminal (job_manager.py:598-609, "non-terminal
  state", re-raised by the head as a 500, job_head.py:549-576); it looks at no actor; an
  unknown id is a 404.
- GET /api/jobs/<id> answers 404 "Job <id> does not exist" (job_head.py:578-595); the list
  reads keys then records (common.py:357-377), and a record deleted in between fails the whole
  list with a 500 (injected here as a fault: `list_race`).
- GET /api/v0/logs/file resolves the file by submission id through the job table
  (state/state_head.py, log/log_manager.py:129-156) and returns the last `lines` lines.
- A head restart (no GCS fault tolerance) empties the job table, whose records live in the
  GCS's internal KV (common.py:233-252), and kills the drivers, which run on the head.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
ACTOR_PREFIX = "_ray_internal_job_actor_"


@dataclass
class Job:
    sid: str
    entrypoint: str
    metadata: dict[str, str]
    runtime_env: dict[str, Any]
    resources: dict[str, Any]
    serial: int  # the world's count of submissions, over every id
    start_ms: int
    status: str = "PENDING"
    message: str = "Job has not started yet."
    end_ms: int | None = None
    driver_node_id: str | None = None
    exit_code: int | None = None
    driver: Any = None  # tests/sim/verl.py: what the entrypoint does

    def details(self) -> dict[str, Any]:
        """JobDetails as GET /api/jobs/<id> returns it (pydantic_models.py JobDetails)."""
        return {
            "type": "SUBMISSION", "job_id": None, "submission_id": self.sid,
            "driver_info": None, "status": self.status, "entrypoint": self.entrypoint,
            "message": self.message, "error_type": None, "start_time": self.start_ms,
            "end_time": self.end_ms, "metadata": dict(self.metadata),
            "runtime_env": self.runtime_env, "driver_agent_http_address": None,
            "driver_node_id": self.driver_node_id, "driver_exit_code": self.exit_code,
            **{k: self.resources.get(k) for k in (
                "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory",
                "entrypoint_resources")},
        }


@dataclass
class Actor:
    name: str
    state: str = "ALIVE"


@dataclass
class Reply:
    status: int
    text: str


class SimRay:
    """The Ray head of one RayCluster. `world` gives the clock, events and drivers."""

    PENDING_S = 1.0  # runtime env setup before the driver starts (an estimate, env cached)
    ACTOR_EXIT_S = 0.3  # from the driver's exit to the actor's death (exit_actor)
    MONITOR_PERIOD_S = 1.0  # job_manager.py:70

    def __init__(self, world: Any) -> None:
        self.world = world
        self.up = True
        self.generation = 0  # head restarts; part of the head's node id
        self.jobs: dict[str, Job] = {}
        self.actors: dict[str, list[Actor]] = {}
        self.logs: dict[str, list[str]] = {}
        self.serial = 0
        self.submissions: list[Job] = []  # every accepted submission, in order (observable)
        self.head_started_ms = self.workers_started_ms = 0

    # --- nodes ---------------------------------------------------------------------------
    @property
    def head_node(self) -> str:
        return f"head-{self.generation:02d}" + "0" * 50

    def worker_node(self) -> str:
        return f"worker-{self.generation:02d}" + "1" * 48

    def lose_head(self) -> None:
        """The head's pod or container is gone: the job table, actors and drivers with it."""
        for job in self.jobs.values():
            if job.driver is not None:
                job.driver.kill()
        self.jobs.clear()
        self.actors.clear()
        self.logs.clear()  # a new session directory on the new head
        self.up = False

    def head_back(self) -> None:
        self.generation += 1
        self.up = True
        self.head_started_ms = int(self.world.clock.time() * 1000)

    def workers_back(self) -> None:
        self.workers_started_ms = int(self.world.clock.time() * 1000)

    # --- the REST API --------------------------------------------------------------------
    def handle(self, method: str, url: str, body: bytes | None) -> Reply:
        parsed = urllib.parse.urlsplit(url)
        path, query = parsed.path, dict(urllib.parse.parse_qsl(parsed.query))
        if method == "POST" and path == "/api/jobs/":
            return self.submit(json.loads(body or b"{}"))
        if method == "GET" and path == "/api/jobs/":
            return Reply(200, json.dumps([job.details() for job in self.jobs.values()]))
        if path.startswith("/api/jobs/"):
            rest = path[len("/api/jobs/"):]
            if method == "POST" and rest.endswith("/stop"):
                return self.stop(rest[:-len("/stop")])
            if method == "DELETE":
                return self.delete(rest)
            if method == "GET" and rest.endswith("/logs"):
                sid = rest[:-len("/logs")]
                if sid not in self.jobs:
                    return _missing(sid)
                return Reply(200, json.dumps({"logs": "".join(self.logs.get(sid, []))}))
            if method == "GET":
                job = self.jobs.get(rest)
                return Reply(200, json.dumps(job.details())) if job else _missing(rest)
        if method == "GET" and path == "/api/v0/actors":
            return self.list_actors(query)
        if method == "GET" and path == "/api/v0/nodes":
            return self.list_nodes()
        if method == "GET" and path == "/api/v0/logs/file":
            return self.log_file(query)
        if method == "GET" and path == "/api/version":
            return Reply(200, json.dumps({"version": "4", "ray_version": "2.47.0"}))
        return Reply(404, "404: Not Found")

    def submit(self, request: dict[str, Any]) -> Reply:
        sid = request.get("submission_id") or f"raysubmit_{self.serial}"
        if sid in self.jobs:
            # job_manager.py:504-508 -> agent 400 -> head 500 (job_head.py:128-131).
            return Reply(500, _traceback(
                "Request failed with status code 400: Traceback (most recent call last):\n"
                f"ValueError: Job with submission_id {sid} already exists. Please use a "
                "different submission_id.\n."))
        self.serial += 1
        resources = {k: request[k] for k in (
            "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory",
            "entrypoint_resources") if request.get(k) is not None}
        job = Job(sid, request["entrypoint"], dict(request.get("metadata") or {}),
                  request.get("runtime_env") or {}, resources, self.serial,
                  int(self.world.clock.time() * 1000))
        self.jobs[sid] = job
        self.submissions.append(job)
        self.actors.setdefault(sid, []).append(Actor(ACTOR_PREFIX + sid))
        self.logs.setdefault(sid, []).append("Runtime env is setting up.\n")  # :531, append
        generation = self.generation
        self.world.schedule(self.PENDING_S, lambda: self._start(job, generation))
        self.world.observe_submit(job)
        return Reply(200, json.dumps({"job_id": sid, "submission_id": sid}))

    def _start(self, job: Job, generation: int) -> None:  # noqa: C901
        if generation != self.generation or self.jobs.get(job.sid) is not job:
            return  # the head restarted, or the record was replaced meanwhile
        if job.status != "PENDING":
            return  # stopped before its driver started
        on_worker = bool(job.resources.get("entrypoint_num_gpus"))
        if on_worker and not self.world.kuberay.workers_up:
            self.world.schedule(self.PENDING_S, lambda: self._start(job, generation))
            return
        job.status, job.message = "RUNNING", "Job is currently running."
        job.driver_node_id = self.worker_node() if on_worker else self.head_node
        job.driver = self.world.driver_for(job)
        job.driver.start()

    def log(self, job: Job, line: str) -> None:
        if self.jobs.get(job.sid) is job or job.sid in self.logs:
            self.logs.setdefault(job.sid, []).append(line + "\n")

    def driver_exited(self, job: Job, code: int, stopped: bool = False) -> None:
        """The entrypoint ended: the record's status (job_supervisor.py:420-463), then the
        actor's death (:473) and, a monitor period later, its monitor's look (job_manager.py)."""
        if self.jobs.get(job.sid) is job and job.status not in TERMINAL:
            job.status = "STOPPED" if stopped else ("SUCCEEDED" if code == 0 else "FAILED")
            job.exit_code = None if stopped else code
            job.message = {"STOPPED": "Job was intentionally stopped.",
                           "SUCCEEDED": "Job finished successfully.",
                           "FAILED": f"Job entrypoint command failed with exit code {code}"}[
                               job.status]
            job.end_ms = int(self.world.clock.time() * 1000)
        generation = self.generation
        actor = self.actors.get(job.sid, [None])[-1]
        self.world.schedule(self.ACTOR_EXIT_S + self.world.params.actor_linger_s,
                            lambda: self._actor_died(job.sid, actor, generation))
        self.world.observe_end(job)

    def _actor_died(self, sid: str, actor: Actor | None, generation: int) -> None:
        if generation != self.generation or actor is None:
            return
        actor.state = "DEAD"
        # The monitor's next ping fails; a non-terminal record under the id is marked FAILED
        # (job_manager.py:244-290), even when it is a newer submission's.
        self.world.schedule(self.MONITOR_PERIOD_S, lambda: self._monitor(sid, generation))

    def _monitor(self, sid: str, generation: int) -> None:
        job = self.jobs.get(sid)
        alive = any(a.state == "ALIVE" for a in self.actors.get(sid, []))
        if generation == self.generation and job and job.status not in TERMINAL and not alive:
            job.status, job.message = "FAILED", "Unexpected error occurred: job supervisor died"
            job.end_ms = int(self.world.clock.time() * 1000)
            if job.driver is not None:
                job.driver.kill()
            self.world.observe_end(job)

    def stop(self, sid: str) -> Reply:
        job = self.jobs.get(sid)
        if job is None:
            return _missing(sid)
        alive = any(a.state == "ALIVE" for a in self.actors.get(sid, []))
        if alive and job.status not in TERMINAL:
            self.world.observe_stop(job)
            if job.driver is not None:
                job.driver.stop()
            else:  # stopped before the driver started: the actor stops itself
                job.status, job.message = "STOPPED", "Job was intentionally stopped."
                job.end_ms = int(self.world.clock.time() * 1000)
                self.driver_exited(job, -15, stopped=True)
        return Reply(200, json.dumps({"stopped": alive}))

    def delete(self, sid: str) -> Reply:
        job = self.jobs.get(sid)
        if job is None:
            return _missing(sid)
        if job.status not in TERMINAL:
            return Reply(500, _traceback(
                "Request failed with status code 500: Traceback (most recent call last):\n"
                f"RuntimeError: Attempted to delete job '{sid}', but it is in a non-terminal "
                f"state {job.status}.\n."))
        del self.jobs[sid]
        return Reply(200, json.dumps({"deleted": True}))

    def list_actors(self, query: dict[str, str]) -> Reply:
        name = query.get("filter_values", "")
        sid = name[len(ACTOR_PREFIX):] if name.startswith(ACTOR_PREFIX) else None
        found = [{"name": a.name, "state": a.state, "class_name": "JobSupervisor"}
                 for a in self.actors.get(sid or "", [])]
        return Reply(200, json.dumps({"result": True, "msg": "", "data": {"result": {
            "total": len(found), "num_after_truncation": len(found),
            "num_filtered": len(found), "result": found}}}))

    def list_nodes(self) -> Reply:
        """GET /api/v0/nodes (state/state_head.py:116-118; NodeState, util/state/common.py
        :537-570): the head of this generation and, when they run, the GPU workers."""
        now = int(self.world.clock.time() * 1000)
        nodes = [{"node_id": self.head_node, "node_ip": "10.0.0.2", "is_head_node": True,
                  "state": "ALIVE", "node_name": "head", "start_time_ms": self.head_started_ms
                  or now}]
        if self.world.kuberay.workers_up:
            nodes.append({"node_id": self.worker_node(), "node_ip": "10.0.0.3",
                          "is_head_node": False, "state": "ALIVE", "node_name": "worker",
                          "start_time_ms": self.workers_started_ms or now})
        return Reply(200, json.dumps({"result": True, "msg": "", "data": {"result": {
            "total": len(nodes), "num_after_truncation": len(nodes),
            "num_filtered": len(nodes), "result": nodes}}}))

    def log_file(self, query: dict[str, str]) -> Reply:
        sid = query.get("submission_id", "")
        job = self.jobs.get(sid)
        if job is None or job.driver_node_id != query.get("node_id"):
            return Reply(500, f"Failed to find the log file for submission {sid}")
        lines = self.logs.get(sid, [])
        count = int(query.get("lines", 1000))
        return Reply(200, "".join(lines[-count:] if count >= 0 else lines))

    def live(self) -> list[Job]:
        return [job for job in self.jobs.values() if job.status not in TERMINAL]


def _missing(sid: str) -> Reply:
    return Reply(404, f"Job {sid} does not exist")


def _traceback(text: str) -> str:
    return "Traceback (most recent call last):\n  ...\nRuntimeError: " + text


Handler = Callable[[str, str, bytes | None], Reply]
__all__ = ["SimRay", "Job", "Reply", "TERMINAL", "field"]
