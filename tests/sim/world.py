"""The world: a virtual clock with its events, the Ray head, the RayCluster, the CronJob, and
the seams' routing. What the invariants watch is in tests/sim/invariants.py; the Pulumi engine
is tests/models/engine.py.

Interleavings: the clock advances only when an actor sleeps or does I/O (every call costs
LATENCY_S). A due CronJob tick runs at that moment, whole, inside the other actor's wait: so a
tick can fall between any two calls the provider makes. Ticks never overlap (`concurrencyPolicy:
Forbid`, components/run/supervision.py): one due while another runs is skipped.
"""

from __future__ import annotations

import heapq
import io
import itertools
import json
import os
import tempfile
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

import requests

from components.supervisor import supervisor
from tests.models import kuberay, verl
from tests.models.kuberay import SimKube
from tests.models.ray_jobs import SimRay
from tests.sim.invariants import Observer
from tests.sim.seams import API_HOST, FakeProcess, Killed, timeout_error
from tests.sim.tasks import Scheduler

EPOCH = 1_790_000_000.0
LATENCY_S = 0.02
TICK_EVERY_S = 120.0  # the CronJob's schedule (supervision.py: every 2 minutes)
NAMESPACE, RAY_CLUSTER, HEAD_SERVICE, STATE = "verl", "verl-ray", "verl-ray-head-svc", \
    "grpo-supervisor-state"
DASHBOARD = f"http://{HEAD_SERVICE}.{NAMESPACE}.svc:8265"


@dataclass
class Params:
    actor_linger_s: float = 0.2  # an exited job supervisor actor's last moments
    tick_phase_s: float = 7.0  # when in its 2 minutes the CronJob fires


@dataclass
class Plan:
    next_attempt: str = "healthy"  # healthy | crash | hang
    next_export: str = "ok"  # ok | fail | hang


@dataclass
class Actor:
    kind: str  # "tick" or "up" (the engine's provider calls)
    run: Any  # the Run it acts for
    fault: tuple[int, str] | None = None
    calls: int = 0
    writes: int = 0
    faulted: bool = False


class Clock:
    def __init__(self, world: "World") -> None:
        self.world, self.now = world, 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return EPOCH + self.now

    def sleep(self, seconds: float) -> None:
        world, delay = self.world, max(0.0, float(seconds))
        task = world.scheduler.current()
        if task is None:
            world.run_until(self.now + delay)
            return
        world.schedule(delay, lambda: world.scheduler.resume(task))
        world.scheduler.park()


class Cron:
    """The supervisor's CronJob: run.json (its spec) and whether it exists."""

    def __init__(self, world: "World") -> None:
        self.world = world
        self.spec: dict[str, Any] | None = None
        self.run: Any = None
        self.running = False
        self.ticks = 0
        self.history: list[tuple[float, Any, str]] = []  # (start, run of its spec, outcome)
        self.scheduled = False

    def deploy(self, spec: dict[str, Any], run: Any) -> None:
        self.spec, self.run = spec, run
        if not self.scheduled:
            self.scheduled = True
            now = self.world.clock.now
            first = (now // TICK_EVERY_S + 1) * TICK_EVERY_S + self.world.params.tick_phase_s
            self.world.schedule(first - now, self.fire)

    def remove(self) -> None:
        self.spec = self.run = None

    def fire(self) -> None:
        if self.spec is None:
            self.scheduled = False
            return
        self.world.schedule(TICK_EVERY_S, self.fire)
        if not self.running:
            self.tick()

    def tick(self) -> None:
        """Start a tick: `python -m components.supervisor.supervisor` in a pod of its own."""
        world = self.world
        self.running, self.ticks = True, self.ticks + 1
        actor = Actor("tick", self.run, world.faults.pop("tick", None))
        started, ready = world.clock.now, world.kuberay.state == "ready" and world.ray.up

        def body() -> None:
            outcome = "died"
            try:
                code = supervisor.main()
                outcome = "ok" if code == 0 and not actor.faulted else "failed"
            except Killed:
                outcome = "died"
            except Exception as error:  # noqa: BLE001  a crashed tick is a failed pod
                outcome = "failed"
                world.tick_errors.append(f"{type(error).__name__}: {error}")
            finally:
                self.running = False
                self.history.append((started, actor.run, outcome))
            world.observer.after_tick(started, outcome == "ok" and ready, actor.run)
        world.scheduler.resume(world.scheduler.spawn(f"tick{self.ticks}", body, actor))


class World:
    def __init__(self, params: Params | None = None) -> None:
        self.params = params or Params()
        self.plan = Plan()
        self.clock = Clock(self)
        self.ray = SimRay(self)
        self.kuberay = SimKube(self, NAMESPACE, RAY_CLUSTER, HEAD_SERVICE)
        self.cron = Cron(self)
        self.observer = Observer(self)
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.scheduler = Scheduler()
        self.faults: dict[str, tuple[int, str]] = {}
        self.forwards: dict[int, FakeProcess] = {}
        self._ports = itertools.count(40000)
        self.runs: list[Any] = []  # engine.Run, in deployment order
        self.engine_log: list[str] = []
        self.tick_errors: list[str] = []
        self.tick_log = io.StringIO()  # the CronJob's pods' output
        fd, self.spec_path = tempfile.mkstemp(prefix="sim-run-", suffix=".json")
        os.close(fd)

    def close(self) -> None:
        self.scheduler.cancel_all()
        os.unlink(self.spec_path)

    # --- time ------------------------------------------------------------------------------
    def schedule(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.clock.now + delay, next(self._seq), action))

    def run_until(self, target: float) -> None:
        while self._events and self._events[0][0] <= target:
            at, _, action = heapq.heappop(self._events)
            self.clock.now = max(self.clock.now, at)
            action()
        self.clock.now = max(self.clock.now, target)

    # --- who is acting, and the faults injected into its calls ---------------------------------
    @property
    def actor(self) -> Actor | None:
        task = self.scheduler.current()
        return task.actor if task is not None else None

    def run_task(self, name: str, body: Callable[[], Any], actor: Actor) -> Any:
        """Run an actor's call to its end, with everything due meanwhile; its result or error."""
        task = self.scheduler.spawn(name, body, actor)
        self.scheduler.resume(task)
        while not task.done:
            if not self._events:
                raise RuntimeError(f"{name} waits for something outside the world")
            at, _, action = heapq.heappop(self._events)
            self.clock.now = max(self.clock.now, at)
            action()
        if task.error is not None:
            raise task.error
        return task.result

    def _io(self, write: bool = False) -> str | None:
        """One call of the acting actor: time passes; returns the fault to inject, if any.

        A death ("kill") or a lost reply ("timeout") is counted in writes (POST, DELETE, PATCH,
        kubectl patch): dying after a read is the same as dying before the next write, so the
        Nth write enumerates every distinct death. A refusal or a 500 happens before the
        call is served and is counted in calls."""
        actor = self.actor
        self.clock.sleep(LATENCY_S)
        if actor is None:
            return None
        actor.calls += 1
        actor.writes += write
        if actor.fault is None:
            return None
        n, kind = actor.fault
        count = actor.writes if kind in ("kill", "timeout") else actor.calls
        if n == count and (write or kind not in ("kill", "timeout")):
            actor.faulted = True
            actor.fault = None
            return kind
        return None

    def _after(self, fault: str | None, kind: str) -> None:
        if fault == "kill":
            raise Killed(f"killed after call {self.actor.calls if self.actor else '?'}")
        if fault == "timeout":
            raise timeout_error(kind)

    # --- seams -------------------------------------------------------------------------------
    def _state_fault(self, fault: str | None, url: str) -> None:
        """An injected fault on a call that classifies an ending (the nodes, a job's actors)."""
        if fault in ("refused", "error500") and ("/api/v0/nodes" in url or (
                "/api/v0/actors" in url and "filter_keys=job_id" in url)):
            self.observer.state_unknown()

    def ray_via_forward(self, method: str, url: str, body: bytes | None) -> tuple[int, str]:
        port = urllib.parse.urlsplit(url).port
        fault = self._io(method in ("POST", "DELETE", "PUT", "PATCH"))
        self._state_fault(fault, url)
        forward = self.forwards.get(port or 0)
        if fault == "refused" or forward is None or forward.poll() is not None:
            raise requests.ConnectionError("simulated: connection refused / lost")
        if fault == "error500" and method == "GET":
            return 500, "500 Internal Server Error"
        reply = self.ray.handle(method, url, body)
        self._after(fault, "requests")
        return reply.status, reply.text

    def in_cluster(self, method: str, url: str, body: bytes | None,
                   _headers: dict[str, str]) -> tuple[int, str]:
        parts = urllib.parse.urlsplit(url)
        fault = self._io(method in ("POST", "DELETE", "PUT", "PATCH"))
        self._state_fault(fault, url)
        if fault == "refused":
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        if parts.hostname == API_HOST:
            status, obj = self.kuberay.api(method, parts.path, body)
            self._after(fault, "urllib")
            return status, json.dumps(obj)
        if f"{parts.scheme}://{parts.netloc}" != DASHBOARD:
            raise urllib.error.URLError(OSError(f"unknown host {parts.hostname}"))
        if not self.ray.up or not self.kuberay.cluster_exists:
            # The head Service has no endpoint: the connection is refused.
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        if fault == "error500" and method == "GET":
            return 500, "500 Internal Server Error"
        reply = self.ray.handle(method, url, body)
        self._after(fault, "urllib")
        return reply.status, reply.text

    def kubectl(self, argv: list[str]) -> tuple[int, str, str]:
        fault = self._io("patch" in argv)
        if fault == "refused":
            return 1, "", "Unable to connect to the server: dial tcp: i/o timeout\n"
        result = self.kuberay.kubectl(argv)
        self._after(fault, "kubectl")
        return result

    def popen(self, argv: list[str]) -> FakeProcess:
        if "port-forward" not in argv:
            raise NotImplementedError(f"the simulation runs no {argv}")
        fault = self._io()
        service = argv[argv.index("port-forward") + 1].split("/", 1)[1]
        if fault == "refused":
            return FakeProcess(["Unable to connect to the server: i/o timeout\n"], 1)
        if service != self.kuberay.service or not self.kuberay.cluster_exists:
            return FakeProcess(
                [kuberay.service_missing(service) + "\n"], 1)
        waited = 0.0
        while not self.ray.up and waited < kuberay.POD_RUNNING_TIMEOUT_S:
            self.clock.sleep(1.0)  # kubectl watches for a running pod behind the Service
            waited += 1.0
        if not self.ray.up:
            self.observer.forward_to_nothing()
            return FakeProcess(["error: timed out waiting for the condition\n"], 1)
        port = next(self._ports)
        remote = argv[-1].lstrip(":")
        process = FakeProcess([line + "\n" for line in kuberay.forwarding(port, remote)], None)
        self.forwards[port] = process
        self._after(fault, "kubectl")
        return process

    def forwards_lost(self) -> None:
        for process in self.forwards.values():
            process.lose()

    # --- drivers -------------------------------------------------------------------------------
    def driver_for(self, job: Any) -> verl.Driver:
        run, kind = self.run_of(job), self.kind_of(job)
        if kind == "train" and run is not None:
            return verl.Training(self, job, run)
        if kind == "export" and run is not None:
            return verl.Export(self, job, run)
        if kind == "check":
            return verl.Check(self, job)
        return verl.Stray(self, job)

    @staticmethod
    def kind_of(job: Any) -> str | None:
        """What an entrypoint runs, by the world's marker in it (`sim-train v<n>`, ...),
        wherever the program puts it among what it adds (a prune, an attempt marker)."""
        for kind in ("train", "export", "check"):
            if f"sim-{kind}" in job.entrypoint.split():
                return kind
        return None

    def run_of(self, job: Any) -> Any:
        for run in reversed(self.runs):
            if _contains(job.entrypoint, run.entrypoint) or (
                    run.export_entrypoint and _contains(job.entrypoint, run.export_entrypoint)):
                return run
        return None

    def check_result_line(self) -> str:
        measured = {"inventory": [{"node": "w0", "gpus": 8, "names": ["NVIDIA B200"] * 8}],
                    "allReduce": {"busbw_gbs": 100.0, "world_size": 8, "nccl": {}},
                    "read": {"mbps": 2000.0, "path": "/data/model"}}
        return "VERL_GKE_CLUSTER_CHECK " + json.dumps(measured)

    # --- what the observer is told ---------------------------------------------------------------
    def observe_submit(self, job: Any) -> None:
        self.observer.submitted(job)

    def observe_end(self, job: Any) -> None:
        self.observer.ended(job)

    def observe_stop(self, job: Any) -> None:
        self.observer.stopped(job)

    def observe_suspend(self) -> None:
        self.observer.suspended()

    def observe_log(self, job: Any, line: str) -> None:
        self.observer.logged(job, line)

    def check_tracker(self, bucket: verl.Bucket) -> None:
        self.observer.tracker(bucket)


def _contains(entrypoint: str, marker: str) -> bool:
    """`marker`'s words appear, in order and together, among the entrypoint's words."""
    words, want = entrypoint.split(), marker.split()
    return any(words[i:i + len(want)] == want for i in range(len(words) - len(want) + 1))


__all__ = ["World", "Params", "Plan", "Actor", "field", "NAMESPACE", "RAY_CLUSTER",
           "HEAD_SERVICE", "STATE", "DASHBOARD", "Killed"]
