"""The seams the program uses in production, answered by the world (no sockets, no processes).

- requests: ray_access.RayJobs talks HTTP through a `requests.Session`; every Session gets the
  world's transport adapter (Session.get_adapter), so the program's own retries, timeouts and
  error handling run on the world's answers.
- urllib.request.urlopen: the supervisor's RayHttp (the head Service) and InCluster (the API
  server, with the pod's service-account token and CA, served from memory).
- subprocess: `kubectl port-forward` (ray_access.PortForward, a Popen whose output the program
  drains) and `kubectl get|patch` (kube.ClusterState, subprocess.run), in every components
  module that imports subprocess.
- time: sleep, monotonic and time advance or read the world's virtual clock, in every
  components module that imports time.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time as real_time
import types
import urllib.error
import urllib.request
from typing import Any, Iterator

import requests
import requests.adapters

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
API_HOST, API_PORT = "10.0.0.1", "443"


class Killed(BaseException):
    """The process of a tick (activeDeadlineSeconds, eviction) or of `pulumi up` died here.
    A BaseException: nothing in the program catches it, as nothing survives a SIGKILL."""


class _Adapter(requests.adapters.BaseAdapter):
    def __init__(self, world: Any) -> None:
        super().__init__()
        self.world = world

    def send(self, request: requests.PreparedRequest, **_: Any) -> requests.Response:
        body = request.body.encode() if isinstance(request.body, str) else request.body
        status, text = self.world.ray_via_forward(request.method, request.url, body)
        reply = requests.Response()
        reply.status_code, reply._content = status, text.encode()
        reply.url, reply.request, reply.encoding = request.url, request, "utf-8"
        reply.headers["Content-Type"] = "application/json"
        return reply

    def close(self) -> None:
        pass


class _Reply(io.BytesIO):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(body)
        self.status = self.code = status

    def __enter__(self) -> "_Reply":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class FakeProcess:
    """`kubectl port-forward`, as subprocess.Popen: its output lines, then its exit."""

    def __init__(self, lines: list[str], code: int | None) -> None:
        self.stdout = iter(lines)
        self._code = code  # None: keeps running (forwarding) until terminated
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self._code is not None:
            self.returncode = self._code
        return self.returncode

    def lose(self) -> None:  # the pod behind it went away: kubectl exits
        self._code = 1

    def terminate(self) -> None:
        self._code = self.returncode = -15

    kill = terminate

    def wait(self, timeout: float | None = None) -> int:
        self.poll()
        return self.returncode if self.returncode is not None else -15


def _time_module(world: Any) -> types.ModuleType:
    shim = types.ModuleType("time")
    shim.__dict__.update({k: getattr(real_time, k) for k in dir(real_time)
                          if not k.startswith("__")})
    shim.sleep = world.clock.sleep
    shim.monotonic = shim.perf_counter = world.clock.monotonic
    shim.time = world.clock.time
    return shim


def _subprocess_module(world: Any) -> types.ModuleType:
    shim = types.ModuleType("subprocess")
    shim.__dict__.update({k: getattr(subprocess, k) for k in dir(subprocess)
                          if not k.startswith("__")})

    def popen(argv: list[str], **_: Any) -> FakeProcess:
        return world.popen(list(argv))

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        code, out, err = world.kubectl(list(argv))
        if not kwargs.get("text"):
            out, err = out.encode(), err.encode()
        return subprocess.CompletedProcess(argv, code, out, err)
    shim.Popen, shim.run = popen, run
    return shim


def _urlopen(world: Any):
    def urlopen(request: Any, timeout: float | None = None, context: Any = None) -> _Reply:
        if isinstance(request, str):
            request = urllib.request.Request(request)
        method = request.get_method()
        status, text = world.in_cluster(method, request.full_url, request.data,
                                        dict(request.header_items()))
        if status >= 400:
            raise urllib.error.HTTPError(request.full_url, status, "error", {},
                                         io.BytesIO(text.encode()))
        return _Reply(status, text.encode())
    return urlopen


def _pod_open(world: Any):
    files = {f"{SERVICE_ACCOUNT}/token": "sim-token", f"{SERVICE_ACCOUNT}/ca.crt": "sim-ca"}

    def pod_open(path: Any, *args: Any, **kwargs: Any):
        if str(path) in files:
            return io.StringIO(files[str(path)])
        if str(path) == world.spec_path:
            return io.StringIO(json.dumps(world.cron.spec))
        return builtins.open(path, *args, **kwargs)
    return pod_open


@contextlib.contextmanager
def installed(world: Any) -> Iterator[None]:
    """Every seam answered by `world`, in every loaded components module; undone on exit."""
    import components.supervisor.supervisor  # noqa: F401  (loaded, so that it is patched)
    import components.run.job_provider  # noqa: F401
    import components.check.cluster_check  # noqa: F401
    import pulumi.log

    saved: list[tuple[Any, str, Any]] = []

    def put(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, obj.__dict__.get(name, _ABSENT) if isinstance(obj, (
            types.ModuleType, type)) else getattr(obj, name)))
        setattr(obj, name, value)

    time_shim, subprocess_shim = _time_module(world), _subprocess_module(world)
    ssl_shim = types.SimpleNamespace(create_default_context=lambda **_: None)
    for name, module in list(sys.modules.items()):
        if not name.startswith("components.") or module is None:
            continue
        if getattr(module, "time", None) is real_time:
            put(module, "time", time_shim)
        for function in list(vars(module).values()):
            # A clock bound as a default argument (supervisor.tick's `now=time.time`).
            defaults = getattr(function, "__defaults__", None)
            if isinstance(function, types.FunctionType) and defaults and any(
                    d in (real_time.time, real_time.monotonic) for d in defaults):
                put(function, "__defaults__", tuple(
                    time_shim.time if d is real_time.time else
                    time_shim.monotonic if d is real_time.monotonic else d for d in defaults))
        if getattr(module, "subprocess", None) is subprocess:
            put(module, "subprocess", subprocess_shim)
        if hasattr(module, "InCluster") or name.endswith(".supervisor"):
            put(module, "open", _pod_open(world))
            put(module, "print", lambda *a, **k: world.tick_log.write(
                " ".join(map(str, a)) + "\n"))
            if getattr(module, "ssl", None) is not None:
                put(module, "ssl", ssl_shim)
    adapter = _Adapter(world)
    put(requests.Session, "get_adapter", lambda self, url: adapter)
    put(urllib.request, "urlopen", _urlopen(world))
    put(pulumi.log, "warn", lambda message, *a, **k: world.engine_log.append(str(message)))
    put(pulumi.log, "info", lambda message, *a, **k: world.engine_log.append(str(message)))
    env = {"KUBERNETES_SERVICE_HOST": API_HOST, "KUBERNETES_SERVICE_PORT": API_PORT,
           "SUPERVISOR_SPEC": world.spec_path}
    old_env = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is _ABSENT:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_ABSENT = object()


def timeout_error(kind: str) -> BaseException:
    """What each client sees of a reply that never came."""
    if kind == "requests":
        return requests.ReadTimeout("simulated: read timed out")
    return socket.timeout("simulated: timed out")
