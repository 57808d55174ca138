"""A private Ray head for tests and benchmarks: started here, ended here, touching nothing else.

`ray stop` ends every Ray on the machine, including other people's, so it is never used. The
head is started with `ray start --head --block` in a new session, on free ports, with its own
`--temp-dir`; ending it terminates exactly the processes that belong to it: the descendants of
that `ray start` process plus any process whose command line names its temp dir (Ray workers
carry `--session-dir=<temp dir>/session_...`, which catches job drivers Ray re-parented).
Linux only: processes are found through /proc (psutil is not a dependency of ray 2.60).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class LocalRay:
    """A running head: where its dashboard listens and where it keeps its files."""

    dashboard_url: str  # http://127.0.0.1:<port>
    dashboard_port: int
    gcs_address: str  # 127.0.0.1:<port>, for `ray` CLI commands that need the cluster
    temp_dir: Path
    pid: int  # the `ray start --block` process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_ray(temp_dir: Path, num_cpus: int = 2) -> Iterator[LocalRay]:
    """Start a Ray head, wait for its dashboard, yield it, end its processes.

    Ray keeps its files in a short directory under the system's temp dir, linked from
    `temp_dir/ray`: its dashboard modules listen on AF_UNIX sockets at
    `<temp dir>/session_<date>_<pid>/sockets/dash_<Module>`, and a socket path may not exceed
    107 bytes, which pytest's numbered directories (`/tmp/pytest-of-root/pytest-116/...`) pass
    once the counter has three digits. The directory is removed when the head has stopped.
    """
    temp_dir.mkdir(parents=True, exist_ok=True)
    ray_dir = Path(tempfile.mkdtemp(prefix="ray-"))
    (temp_dir / "ray").symlink_to(ray_dir, target_is_directory=True)
    try:
        with _local_ray(ray_dir, num_cpus) as head:
            yield head
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


@contextlib.contextmanager
def _local_ray(temp_dir: Path, num_cpus: int) -> Iterator[LocalRay]:
    ports = {
        name: free_port()
        for name in (
            "port", "dashboard-port", "ray-client-server-port", "node-manager-port",
            "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
            "runtime-env-agent-port", "metrics-export-port",
        )
    }
    command = [
        RAY, "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        "--include-dashboard=true", f"--num-cpus={num_cpus}", "--num-gpus=0",
        f"--temp-dir={temp_dir}",
        # 0 lets each worker bind a random free port instead of the shared 10002-19999 range.
        "--min-worker-port=0", "--max-worker-port=0",
        "--object-store-memory=100000000",
        *(f"--{name}={port}" for name, port in ports.items()),
    ]
    log = open(temp_dir / "ray-start.log", "wb")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: a single-node head whose every process takes
        # 127.0.0.1 as the node's address. Without it, processes that ask Ray for the node's IP
        # (ray/_private/services.py get_node_ip_address) take the address of the default route's
        # interface, which on a machine with a default route but no loopback-only setup is not
        # the head's --node-ip-address, and the dashboard's modules then fail to reach the GCS.
        # The switch also refuses worker nodes joining, which no test does.
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
    )
    ray = LocalRay(
        dashboard_url=f"http://127.0.0.1:{ports['dashboard-port']}",
        dashboard_port=ports["dashboard-port"],
        gcs_address=f"127.0.0.1:{ports['port']}",
        temp_dir=temp_dir,
        pid=process.pid,
    )
    try:
        _wait_for_jobs_api(ray, process)
        yield ray
    finally:
        end_processes(process.pid, str(temp_dir))
        process.wait(timeout=30)
        log.close()


def _wait_for_jobs_api(ray: LocalRay, process: subprocess.Popen) -> None:
    """Wait until the dashboard answers the Jobs API (it starts after GCS and raylet)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = (ray.temp_dir / "ray-start.log").read_text(errors="replace")
            raise RuntimeError(f"ray start exited with {process.returncode}:\n{output[-3000:]}")
        try:
            with urllib.request.urlopen(f"{ray.dashboard_url}/api/jobs/", timeout=2) as reply:
                json.load(reply)
                return
        except (OSError, ValueError):
            time.sleep(0.5)
    raise TimeoutError(f"Ray dashboard at {ray.dashboard_url} not up after {START_TIMEOUT_S}s")


def end_processes(root_pid: int, marker: str, grace_s: float = 3.0) -> None:
    """SIGTERM the tree under `root_pid` and every process naming `marker`; SIGKILL leftovers.

    `ray start --block` and its log monitor outlive SIGTERM for about 10 s; a test head holds
    nothing worth a graceful shutdown, so the grace period is short.
    """
    targets = _descendants(root_pid) | _naming(marker) | {root_pid}
    targets.discard(os.getpid())
    _signal_all(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in targets):
        time.sleep(0.2)
    _signal_all({pid for pid in targets if _alive(pid)}, signal.SIGKILL)


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) for every process we can read."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # The command name in field 2 may contain spaces; the fields after ")" are fixed.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        table[int(entry.name)] = (ppid, cmdline)
    return table


def _descendants(root_pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in _proc_table().items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), [root_pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _naming(marker: str) -> set[int]:
    return {pid for pid, (_, cmdline) in _proc_table().items() if marker in cmdline}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _signal_all(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
