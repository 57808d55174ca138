"""Ray 2.49.0's Jobs API and the parts of its State API the program calls, as the head behaves.

Every behaviour cites ray-2.49.0 `python/ray/dashboard/modules/...` (components/facts/pins.py
RAY_VERSION; installed as `ray/dashboard/modules/...`); tests/test_sim_conformance.py runs the same operations against a
real local head and compares statuses, errors and log reads.

- A submission puts a PENDING record under its id, or fails if one exists: job_manager.py
  :500-508 `put_info(overwrite=False)` -> ValueError "already exists"; the agent answers 400
  (job_agent.py:58-62) and the head re-raises it as a 500 "Request failed with status code
  400: ..." (job_head.py:128-131, :504-508). Each submission appends "Runtime env is setting
  up." to the driver log (job_manager.py:531), which is `job-driver-<submission id>.log`
  (common.py:34), opened in append mode by the job's supervisor actor (job_supervisor.py:175):
  a resubmission under the same id appends to the same file.
- The supervisor actor `_ray_internal_job_actor_<id>` starts the driver and marks the record
  RUNNING with its node id (job_supervisor.py:341-348); the driver's exit code makes it
  SUCCEEDED or FAILED (:419-462); the actor then exits (:472). A dead actor's record that is
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
- A FAILED record's message is "Job entrypoint command failed with exit code N, last available
  logs (truncated to 20,000 chars):" and the driver log's last 10 lines (job_supervisor.py
  :435-447; job_log_storage_client.py:16 NUM_LOG_LINES_ON_ERROR).
- The State API's nodes and actors, and the job id a driver gets: tests/models/ray_gcs.py.
- A GPU worker node lost (a spot VM reclaimed; `worker_lost`): a driver whose actors ran there
  fails FAIL_S later with ActorUnavailableError (a surviving actor's call to a lost one fails on
  its closed socket: on a local Ray 2.47 whose worker node was SIGKILLed (tests/test_preemption_ray.py
  holds the classification to the pinned 2.49.0), the job FAILED 3 s
  after the kill with "ray.exceptions.ActorUnavailableError ... RpcError: Socket closed"); a
  driver that ran there (an entrypoint with GPUs: its supervisor actor is placed with those
  resources, job_manager.py:533-537) dies with its supervisor actor, which the job monitor
  finds dead (job_manager.py:244-290). The GCS marks the node DEAD once its health checks
  fail: on that local Ray (checks tuned to 1 s x 3) 0.4 s before the job's end; with Ray's
  defaults (ray_config_def.h health_check_period_ms 3000 x health_check_failure_threshold 5,
  plus health_check_timeout_ms 10000) up to about 30 s after it (util/state/common.py:584-586,
  "could be delayed up to 30 seconds"): the world draws that delay from [-1, 30] s.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

from components.facts.pins import RAY_VERSION
from tests.models.ray_gcs import DASHBOARD_JOB, NODE_DETAIL, Gcs, job_hex, listing

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
ACTOR_PREFIX = "_ray_internal_job_actor_"
SUPERVISOR_NAMESPACE = "SUPERVISOR_ACTOR_RAY_NAMESPACE"  # job/common.py:33
FAIL_S = 3.0  # from a worker node's loss to its user's driver failing (seen on a local Ray)
LOG_LINES_ON_ERROR = 10  # job_log_storage_client.py:16
UNAVAILABLE = ("ray.exceptions.ActorUnavailableError: The actor {actor} is unavailable: "
               "RpcError: Socket closed. The actor may or may not be alive.")


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
    driver: Any = None  # tests/models/verl.py: what the entrypoint does
    job_id: str | None = None  # the driver's Ray job id, once it runs
    lost_node: str | None = None  # the world's fact: a lost node's actors failed this driver

    def details(self) -> dict[str, Any]:
        """JobDetails as GET /api/jobs/<id> and the list return it (job_head.py:595, :623,
        `job.dict()` of pydantic_models.py:38-104 JobDetails): its fields only. The entrypoint's
        resources are JobInfo's (common.py:96-102), which JobDetails does not carry: the reply
        has no entrypoint_num_gpus, whatever the submission asked for."""
        return {
            "type": "SUBMISSION", "job_id": self.job_id, "submission_id": self.sid,
            "driver_info": None, "status": self.status, "entrypoint": self.entrypoint,
            "message": self.message, "error_type": None, "start_time": self.start_ms,
            "end_time": self.end_ms, "metadata": dict(self.metadata),
            "runtime_env": self.runtime_env, "driver_agent_http_address": None,
            "driver_node_id": self.driver_node_id, "driver_exit_code": self.exit_code,
        }


@dataclass
class Actor:
    name: str
    state: str = "ALIVE"
    node_id: str = ""


@dataclass
class Reply:
    status: int
    text: str


class SimRay:
    """The Ray head of one RayCluster. `world` gives the clock, events and drivers."""

    PENDING_S: float | None = 1.0  # runtime env setup before the driver starts (an estimate,
    # env cached)
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
        self.gcs = self._new_gcs()
        self.worker_id: str | None = self.gcs.new_worker(self._now_ms())

    # --- nodes ---------------------------------------------------------------------------
    @property
    def head_node(self) -> str:
        """56 hex digits, as a real node id; sorted first in the node listing (:213)."""
        return f"{self.generation:02x}" + "0" * 54

    def worker_node(self) -> str | None:
        """The GPU worker's Ray node id while one runs (each pod of it is a new node)."""
        return self.worker_id

    def _now_ms(self) -> int:
        return int(self.world.clock.time() * 1000)

    def _new_gcs(self) -> Gcs:
        gcs = Gcs(self.generation)
        gcs.node(self.head_node, "10.0.0.2", True, self._now_ms())
        return gcs

    def lose_head(self) -> None:
        """The head's pod or container is gone: the job table, actors and drivers with it."""
        for job in self.jobs.values():
            if job.driver is not None:
                job.driver.kill()
        self.jobs.clear()
        self.actors.clear()
        self.logs.clear()  # a new session directory on the new head
        self.up = False
        self.worker_id = None

    def head_back(self) -> None:
        self.generation += 1
        self.up = True
        self.gcs = self._new_gcs()  # a new GCS: new tables, job ids from 01000000 again
        self.worker_id = None
        if self.world.kuberay.workers_up:
            self.workers_back()

    def workers_back(self) -> None:
        """A worker pod's raylet joins the head (KubeRay created the pod)."""
        if self.up and self.worker_id is None:
            self.worker_id = self.gcs.new_worker(self._now_ms())

    def worker_lost(self, dead_after_s: float) -> None:
        """The GPU worker node is gone (see the module's docstring): its drivers die, the
        drivers whose actors ran there fail FAIL_S later, and the GCS marks the node DEAD
        `dead_after_s` after that failure (the delay of its health checks)."""
        node, self.worker_id = self.worker_id, None
        if node is None or not self.up:
            return
        generation = self.generation
        for job in list(self.jobs.values()):
            if job.status in TERMINAL or job.driver is None or not job.driver.alive:
                continue
            if job.driver_node_id == node:
                job.driver.kill()
                for actor in self.actors.get(job.sid, []):
                    actor.state = "DEAD"
                self.world.schedule(self.MONITOR_PERIOD_S,
                                    lambda sid=job.sid: self._monitor(sid, generation))
            elif job.job_id and any(row["node_id"] == node and row["job_id"] == job.job_id
                                    for row in self.gcs.actors):
                job.driver.at(FAIL_S, lambda job=job: self._unavailable(job, node))

        def dead() -> None:
            if generation == self.generation:
                self.gcs.dead(node, self._now_ms())
                self.world.observer.node_dead(node, self._now_ms())
        self.world.schedule(FAIL_S + dead_after_s, dead)

    def _unavailable(self, job: Job, node: str) -> None:
        actor = next(row["actor_id"] for row in self.gcs.actors
                     if row["node_id"] == node and row["job_id"] == job.job_id)
        job.lost_node = node
        job.driver.log(UNAVAILABLE.format(actor=actor))
        job.driver.exit(1)

    def place(self, job: Job, class_names: list[str]) -> bool:
        """The driver's actors, placed on the GPU worker (verl's placement groups of GPU
        bundles; the head has no CPUs for its TaskRunner); False while no worker runs."""
        if self.worker_id is None or self.jobs.get(job.sid) is not job or not job.job_id:
            return False
        for name in class_names:
            self.gcs.actor(name, "", job.job_id, self.worker_id, "")
        return True

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
            return self.list_actors(urllib.parse.parse_qs(parsed.query))
        if method == "GET" and path == "/api/v0/nodes":
            return self.list_nodes(urllib.parse.parse_qs(parsed.query))
        if method == "GET" and path == "/api/v0/logs/file":
            return self.log_file(query)
        if method == "GET" and path == "/api/version":
            return Reply(200, json.dumps({"version": "4", "ray_version": RAY_VERSION}))
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
        if self.PENDING_S is not None:  # None: the test starts it (tests/fakes/ray_jobs.py)
            self.world.schedule(self.PENDING_S, lambda: self._start(job, generation))
        self.world.observe_submit(job)
        return Reply(200, json.dumps({"job_id": sid, "submission_id": sid}))

    def start(self, sid: str) -> None:
        """The job's runtime env is ready: its supervisor actor starts the driver
        (job_supervisor.py:341-348). A world whose PENDING_S is None calls it when its test
        says so."""
        self._start(self.jobs[sid], self.generation)

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
        for actor in self.actors.get(job.sid, []):
            actor.node_id = job.driver_node_id
        job.driver = self.world.driver_for(job)
        if job.driver.connects:  # ray.init(): the GCS gives the driver its job id
            job.job_id = self.gcs.next_job()
        job.driver.start()

    def log(self, job: Job, line: str) -> None:
        if self.jobs.get(job.sid) is job or job.sid in self.logs:
            self.logs.setdefault(job.sid, []).append(line + "\n")

    def driver_exited(self, job: Job, code: int, stopped: bool = False) -> None:
        """The entrypoint ended: the record's status (job_supervisor.py:419-462), then the
        actor's death (:472) and, a monitor period later, its monitor's look (job_manager.py)."""
        if self.jobs.get(job.sid) is job and job.status not in TERMINAL:
            job.status = "STOPPED" if stopped else ("SUCCEEDED" if code == 0 else "FAILED")
            job.exit_code = None if stopped else code
            tail = "".join(self.logs.get(job.sid, [])[-LOG_LINES_ON_ERROR:])
            job.message = {"STOPPED": "Job was intentionally stopped.",
                           "SUCCEEDED": "Job finished successfully.",
                           "FAILED": f"Job entrypoint command failed with exit code {code}, "
                                     "last available logs (truncated to 20,000 chars):\n"
                                     + tail}[job.status]
            job.end_ms = int(self.world.clock.time() * 1000)
        if job.job_id and self.jobs.get(job.sid) is job:
            self.gcs.job_died(job.job_id)
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

    def list_actors(self, query: dict[str, list[str]]) -> Reply:
        """GET /api/v0/actors (ray_gcs.py): the jobs' supervisor actors (the dashboard's job)
        and the drivers' own actors, dead ones included."""
        dashboard = job_hex(DASHBOARD_JOB)
        rows = [{"actor_id": f"{i:08x}{dashboard}".ljust(32, "e"), "class_name": "JobSupervisor",
                 "state": actor.state, "job_id": dashboard, "name": actor.name,
                 "node_id": actor.node_id or self.head_node, "pid": 100 + i,
                 "ray_namespace": SUPERVISOR_NAMESPACE}
                for i, actor in enumerate(a for sid in self.actors for a in self.actors[sid])]
        return Reply(*listing(rows + self.gcs.actors, query, "actor_id"))

    def list_nodes(self, query: dict[str, list[str]]) -> Reply:
        """GET /api/v0/nodes (ray_gcs.py): this head's GCS's nodes, dead workers included."""
        return Reply(*listing(list(self.gcs.nodes.values()), query, "node_id", NODE_DETAIL))

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
