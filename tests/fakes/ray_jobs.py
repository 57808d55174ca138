"""The Ray head for tick-level tests: the one Ray model (tests/models/ray_jobs.py) in a world
where nothing happens unless the test says so, behind the supervisor's own client.

`FakeRay(sid)` is supervisor_io.RayHttp itself, whose HTTP calls the model answers
(`SimRay.handle`, the REST replies tests/test_sim_conformance.py holds to a real head): so a
tick reads and writes what it would on a real head, with the client's own parsing of each reply
("already exists" on a second submission under an id, 404 for an unknown id, the State API's
rows). The hand world: the runtime env of a submission is ready only when the test says so
(`run`: PENDING until then); what Ray then does by itself (the driver's exit after a stop, its
supervisor actor's death, the job monitor's look, a lost node's death in the GCS) happens at
once, on a clock that moves only when the test moves it (each submission a second after the
last, as FakeRay always did). The test's hand (the verbs below) moves the model as the world's
events do in the simulation: a driver starts, logs, exits, a worker node is lost, the head
restarts. No behaviour is kept here: every rule is the model's, cited there.
"""

from __future__ import annotations

import json
import types
import urllib.error
from typing import Any

from components.supervisor.supervisor_io import RayHttp
from tests.models.ray_jobs import SimRay
from tests.models.verl import Driver

DASHBOARD = "http://verl-ray-head-svc.verl.svc:8265"


class _Clock:
    def __init__(self, epoch: float) -> None:
        self.epoch = epoch

    def time(self) -> float:
        return self.epoch

    @property
    def now(self) -> float:
        return self.epoch


class _Hand(Driver):
    """A driver that does only what the test's hand makes it do (log, exit)."""


class HandWorld:
    """What the model asks of its world, answered at once: `schedule` runs the action now."""

    def __init__(self) -> None:
        self.clock = _Clock(1_000_000.0)
        self.params = types.SimpleNamespace(actor_linger_s=0.0)
        self.kuberay = types.SimpleNamespace(workers_up=True)
        self.observer = types.SimpleNamespace(node_dead=lambda *_: None)
        self.ray = SimRay(self)
        self.ray.PENDING_S = None  # started by the test's `run`

    def schedule(self, delay: float, action: Any) -> None:
        action()

    def driver_for(self, job: Any) -> Driver:
        return _Hand(self, job)

    def observe_submit(self, job: Any) -> None: ...
    def observe_end(self, job: Any) -> None: ...
    def observe_stop(self, job: Any) -> None: ...
    def observe_log(self, job: Any, line: str) -> None: ...


class FakeRay:
    """The hand on the model, and `FakeRay(sid)`: the supervisor's client for one id."""

    def __init__(self) -> None:
        self.world = HandWorld()
        self.model = self.world.ray

    def __call__(self, submission_id: str) -> "FakeJobs":
        return FakeJobs(self, submission_id)

    # --- what the tests read -----------------------------------------------------------------
    @property
    def records(self) -> dict[str, dict[str, Any]]:
        """Every record, as GET /api/jobs/<id> shows it (a copy)."""
        return {sid: job.details() for sid, job in self.model.jobs.items()}

    @property
    def submissions(self) -> list[str]:
        """Every accepted submission id, in order."""
        return [job.sid for job in self.model.submissions]

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """The GCS's node rows themselves (a test may mark one DEAD by hand)."""
        return list(self.model.gcs.nodes.values())

    @property
    def actors(self) -> dict[str, list[dict[str, Any]]]:
        """The drivers' actor rows, by Ray job id."""
        found: dict[str, list[dict[str, Any]]] = {}
        for row in self.model.gcs.actors:
            found.setdefault(row["job_id"], []).append(row)
        return found

    @property
    def clock(self) -> float:
        """Epoch seconds now on the hand world's clock."""
        return self.world.clock.epoch

    @clock.setter
    def clock(self, epoch: float) -> None:
        self.world.clock.epoch = epoch

    @property
    def down(self) -> bool:
        """The head's pod is gone (a suspended cluster): every call is refused."""
        return not self.model.up

    @down.setter
    def down(self, down: bool) -> None:
        if down and self.model.up:
            self.model.lose_head()
        elif not down and not self.model.up:
            self.model.head_back()

    def live(self) -> list[str]:
        return [job.sid for job in self.model.live()]

    # --- what the tests do -------------------------------------------------------------------
    def run(self, submission_id: str) -> None:
        """The runtime env is ready: the driver runs on the head and places its worker actor
        on the GPU worker (a replacement joins first if the last one was lost)."""
        model = self.model
        if model.worker_node() is None:
            model.workers_back()
        model.start(submission_id)
        job = model.jobs[submission_id]
        assert model.place(job, ["Worker"]), f"{submission_id} could not place its actor"

    def finish(self, submission_id: str, status: str) -> None:
        """The driver exits 0 (SUCCEEDED) or 1 (FAILED), having run; STOPPED is a person's
        `ray job stop`."""
        job = self.model.jobs[submission_id]
        if status == "STOPPED":
            self.model.stop(submission_id)
            return
        if job.status == "PENDING":
            self.run(submission_id)
        job.driver.exit({"SUCCEEDED": 0, "FAILED": 1}[status])

    def lose_node(self, submission_id: str) -> None:
        """The GPU node of the attempt's worker actor dies: the attempt FAILED with it, the
        GCS marks the node DEAD at once (tests/models/ray_jobs.py worker_lost)."""
        job = self.model.jobs[submission_id]
        assert any(row["node_id"] == self.model.worker_node() for row in
                   self.actors.get(job.job_id, [])), f"{submission_id} has no actor there"
        self.model.worker_lost(dead_after_s=0.0)

    def log(self, submission_id: str, line: str) -> None:
        self.model.jobs[submission_id].driver.log(line)

    def restart_head(self) -> None:
        """The head restarts without GCS fault tolerance: the job table is gone."""
        self.model.lose_head()
        self.model.head_back()


class FakeJobs(RayHttp):
    """supervisor_io.RayHttp for one submission id, its HTTP answered by the model."""

    def __init__(self, ray: FakeRay, submission_id: str) -> None:
        super().__init__(DASHBOARD, submission_id)
        self.ray = ray

    def submit(self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
               resources: dict[str, Any] | None = None) -> bool:
        self.ray.clock += 1  # the hand clock: each submission a second after the last
        return super().submit(entrypoint, runtime_env, metadata, resources)

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        if not self.ray.model.up:
            # The head Service has no endpoint (tests/sim/world.py in_cluster says the same).
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        data = json.dumps(body).encode() if body is not None else None
        reply = self.ray.model.handle(method, self.base + path, data)
        return reply.status, reply.text
