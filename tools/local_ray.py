"""A private Ray head for tests and benchmarks: started here, ended here, touching nothing else.

`ray stop` ends every Ray on the machine, including other people's, so it is never used. The
head is started with `ray start --head --block` in a new session, on free ports, with its own
`--temp-dir`; ending it terminates exactly the processes that belong to it: the descendants of
that `ray start` process plus any process whose command line names its temp dir (Ray workers
carry `--session-dir=<temp dir>/session_...`, which catches job drivers Ray re-parented).
Linux only: processes are found through /proc (psutil is not a dependency of ray).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
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

from tools.ray_site.sitecustomize import DASHBOARD_MODULES_VARIABLE

# Another Ray's `ray` (VERL_GKE_TEST_RAY, to run the real-Ray tests against another release);
# by default this interpreter's, the release requirements-dev.txt pins.
OTHER_RAY = os.environ.get("VERL_GKE_TEST_RAY")
RAY = OTHER_RAY or str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 90.0
# Set in the environment of every process of a test head:
# - RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: a single-node head whose every process takes 127.0.0.1
#   as the node's address. Without it, processes that ask Ray for the node's IP
#   (ray/_private/services.py get_node_ip_address) take the address of the default route's
#   interface, which on a machine with a default route but no loopback-only setup is not the
#   head's --node-ip-address, and the dashboard's modules then fail to reach the GCS. The
#   switch also refuses worker nodes joining: a head that nodes join is `start_cluster`'s, on
#   that address (CLUSTER_ENV).
# - RAY_enable_worker_prestart=0, RAY_prestart_worker_first_driver=0: the raylet keeps idle
#   Python workers warm for tasks (src/ray/common/ray_config_def.h, ray-project/ray#12052).
#   A test head runs jobs, whose JobSupervisor actors need workers of their own runtime env,
#   so the warm ones start, idle out and start again: 2.5 -> 1.9 CPU-seconds per `echo` job
#   here (the whole machine's /proc/stat over 5 jobs).
# - PYTHONPATH: tools/ray_site, whose sitecustomize launches the workers Ray would launch through
#   its setup_worker.py without that script importing Ray first (its docstring has the figures).
# - DASHBOARD_MODULES_VARIABLE: the dashboard modules that sitecustomize has Ray's
#   dashboard load, the ones the program, its tools and Ray's job CLI talk to: JobHead (the Jobs
#   API, /api/jobs/), StateHead (/api/v0/actors, /api/v0/logs/file) and NodeHead, which records
#   the head node's id that JobHead needs to find the head's job agent (node_head.py,
#   job_head.py _get_head_node_agent_once: without it every submission fails with a 500). The
#   six others (ReportHead, MetricsHead, EventHead, DataHead, ServeHead, TrainHead) serve the
#   dashboard's own pages and the Serve, Data and Train APIs; each is a process that imports Ray.
#   Started without them, a head costs 8 CPU-s instead of 16-17 and idles at 0.07 core instead
#   of 0.09 (a head started here, measured in a cpuacct cgroup). A name Ray does not have fails
#   the start: dashboard/head.py asserts that it loaded what it was asked to.
RAY_SITE = Path(__file__).parent / "ray_site"
DASHBOARD_MODULES = ("JobHead", "NodeHead", "StateHead")
HEAD_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    DASHBOARD_MODULES_VARIABLE: ",".join(DASHBOARD_MODULES),
}


@dataclass(frozen=True)
class LocalRay:
    """A running head: where its dashboard listens and where it keeps its files."""

    dashboard_url: str  # http://127.0.0.1:<port>
    dashboard_port: int
    gcs_address: str  # 127.0.0.1:<port>, for `ray` CLI commands that need the cluster
    metrics_port: int  # the node's Prometheus endpoint (--metrics-export-port)
    temp_dir: Path
    pid: int  # the `ray start --block` process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_ray(temp_dir: Path, num_cpus: int = 2) -> Iterator[LocalRay]:
    """Start a Ray head, wait for its dashboard, yield it, end its processes."""
    head = start(temp_dir, num_cpus)
    try:
        yield head
    finally:
        stop(head)


def start(temp_dir: Path, num_cpus: int = 2) -> LocalRay:
    """Start a Ray head and return once its Jobs API answers; `stop` ends it, from any process.
    A head of its own node alone (see HEAD_ENV); `start_cluster` starts one that nodes join.

    Ray keeps its files in a short directory under the system's temp dir, linked from
    `temp_dir/ray`: its dashboard modules listen on AF_UNIX sockets at
    `<temp dir>/session_<date>_<pid>/sockets/dash_<Module>`, and a socket path may not exceed
    107 bytes, which pytest's numbered directories (`/tmp/pytest-of-root/pytest-116/...`) pass
    once the counter has three digits. The directory is removed when the head has stopped.
    """
    return _start(temp_dir, num_cpus, "127.0.0.1", HEAD_ENV)


def _start(temp_dir: Path, num_cpus: int, node_ip: str, env: dict[str, str]) -> LocalRay:
    temp_dir.mkdir(parents=True, exist_ok=True)
    ray_dir = Path(tempfile.mkdtemp(prefix="ray-"))
    (temp_dir / "ray").symlink_to(ray_dir, target_is_directory=True)
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
        f"--node-ip-address={node_ip}", "--dashboard-host=127.0.0.1",
        "--include-dashboard=true", f"--num-cpus={num_cpus}", "--num-gpus=0",
        f"--temp-dir={ray_dir}",
        # 0 lets each worker bind a random free port instead of the shared 10002-19999 range.
        "--min-worker-port=0", "--max-worker-port=0",
        "--object-store-memory=100000000",
        # The log monitor streams workers' output to `ray.init` drivers; no test reads it there
        # (job logs are the JobSupervisor's files, the cluster check's NCCL report a file of its
        # own), and it re-reads every log file of the session, ~10 CPU-s over a suite's run.
        "--include-log-monitor=False",
        *(f"--{name}={port}" for name, port in ports.items()),
    ]
    with open(ray_dir / "ray-start.log", "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            # tools/ray_site holds to this interpreter's Ray; another Ray runs as it ships.
            env=_environment(env),
        )
    head = LocalRay(
        dashboard_url=f"http://127.0.0.1:{ports['dashboard-port']}",
        dashboard_port=ports["dashboard-port"],
        gcs_address=f"{node_ip}:{ports['port']}",
        metrics_port=ports["metrics-export-port"],
        temp_dir=ray_dir,
        pid=process.pid,
    )
    try:
        _wait_for_jobs_api(head, process)
    except BaseException:
        stop(head)
        raise
    return head


# --- A head that worker nodes join (tests/test_preemption_ray.py) --------------------------------
# Set on top of HEAD_ENV for every process of such a head and of its nodes:
# - RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1: `ray start --address` refuses to join a node without it
#   (ray/scripts/scripts.py:1086-1094, ray_constants.ENABLE_RAY_CLUSTER).
# - the GCS's health checks of the raylets (src/ray/common/ray_config_def.h, Ray 2.47.0:
#   health_check_initial_delay_ms 5000, health_check_period_ms 3000, health_check_timeout_ms
#   10000, health_check_failure_threshold 5): a node killed without a goodbye is marked DEAD
#   once `threshold` checks in a row failed, ~3 s here instead of ~15-30 s.
CLUSTER_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
# A node's object store: just above Ray's floor of 75 MB
# (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES).
NODE_OBJECT_STORE_BYTES = 80_000_000
# What `ray start` raises when its raylet did not register with the GCS in 30 s, a wait no
# setting changes (ray-2.49.0 _private/node.py Node.__init__, `raylet_start_wait_time_s = 30`).
STARTUP_TIMED_OUT = "The current node timed out during startup"


def route_ip() -> str:
    """The address of the interface of the default route: the one a joining node takes as the
    GCS's and its own (ray/_private/services.py node_ip_address_from_perspective, asked of
    8.8.8.8:53 by get_node_ip_address; a UDP connect sends nothing). A head on 127.0.0.1 cannot
    be joined: the node canonicalizes the GCS address to this one, where nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("8.8.8.8", 53))
        return sock.getsockname()[0]


def start_cluster(temp_dir: Path, num_cpus: int = 2) -> LocalRay:
    """Like `start`, a head that worker nodes may join (`add_node`): on the default route's
    address, with fast health checks (CLUSTER_ENV). Its dashboard still listens on 127.0.0.1
    only; `stop` ends it and every node added to it."""
    return _start(temp_dir, num_cpus, route_ip(), {**HEAD_ENV, **CLUSTER_ENV})


@dataclass(frozen=True)
class WorkerNode:
    """A worker node of a `start_cluster` head: one `ray start --block` and its processes, in a
    session of their own (its pid is the session's id)."""

    name: str  # --node-name, the State API's node_name
    node_id: str  # the GCS's id of the node (NodeState node_id)
    pid: int  # the `ray start --block` process


def _start_node(head: LocalRay, name: str, ip: str, num_cpus: int,
                num_gpus: int) -> subprocess.Popen:
    """`ray start --block` of node `name` at `ip`, joining `head` on ports of its own."""
    ports = {port: free_port() for port in (
        "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port")}
    command = [
        RAY, "start", f"--address={head.gcs_address}", "--block", "--disable-usage-stats",
        f"--node-ip-address={ip}", f"--node-name={name}", f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}", "--min-worker-port=0", "--max-worker-port=0",
        f"--object-store-memory={NODE_OBJECT_STORE_BYTES}", "--include-log-monitor=False",
        *(f"--{port}={number}" for port, number in ports.items()),
    ]
    nodes = head.temp_dir / "nodes"
    nodes.mkdir(exist_ok=True)
    with open(head.temp_dir / f"node-{name}.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True,
                                   env=_environment({**HEAD_ENV, **CLUSTER_ENV}))
    (nodes / str(process.pid)).write_text(name)
    return process


def add_node(head: LocalRay, name: str, num_cpus: int = 1, num_gpus: int = 0,
             timeout_s: float = START_TIMEOUT_S) -> WorkerNode:
    """Start a worker node that joins `head`, and return once the GCS lists it ALIVE.

    `num_gpus` is a logical resource (Ray schedules on it; the node need not have a GPU). Each
    node has an address of its own, 127.0.0.<2 + the nodes added before it>, as each pod of a
    RayCluster has: a driver on this machine attaches to the first live node whose address is
    the one recorded in the session's node_ip_address.json (ray-2.47.0 _private/node.py
    Node.__init__, connect_only -> _wait_and_get_for_node_address; GCS
    GlobalStateAccessor::GetNodeToConnectForDriver), and every node of the machine shares that
    session dir (a joining node takes the head's temp dir and session dir from the GCS,
    ray/scripts/scripts.py:825-832, node.py _init_temp), so a node on the head's address could
    host the drivers of jobs, or the head agent's JobManager, and take them down with it. A
    joining node records its own address there (services.write_node_ip_address, "Creating 2
    instances in the same host with different IP address is not supported"); the head's is
    put back once the node is up, as a process on the head of a real cluster would read it. A
    driver that starts while a node joins may still attach to that node. Its pid is recorded
    under the head's temp dir: `stop(head)` ends it, from any process."""
    ip = f"127.0.0.{2 + len(list(head.temp_dir.glob('node-*.log')))}"
    deadline = time.monotonic() + timeout_s
    while True:
        process = _start_node(head, name, ip, num_cpus, num_gpus)
        while time.monotonic() < deadline and process.poll() is None:
            for node in state_rows(head, "/api/v0/nodes?detail=true&limit=1000"):
                if node.get("node_name") == name and node.get("state") == "ALIVE":
                    _record_node_ip(head)
                    return WorkerNode(name, node["node_id"], process.pid)
            time.sleep(0.5)
        exited = process.poll() is not None
        _end_node(head, process.pid)
        if not exited:
            raise TimeoutError(f"node {name} not ALIVE after {timeout_s}s ({head.dashboard_url})")
        output = (head.temp_dir / f"node-{name}.log").read_text(errors="replace")
        # Retried while the caller's time lasts (two loaded cores); any other exit is a failure.
        if STARTUP_TIMED_OUT not in output or time.monotonic() >= deadline:
            raise RuntimeError(f"node {name}: ray start exited with {process.returncode}:\n"
                               f"{output[-3000:]}")


def _record_node_ip(head: LocalRay) -> None:
    """Put the head's address back in the session's node_ip_address.json, in Ray's format
    (services.write_node_ip_address: {"node_ip_address": ...}), replaced at once."""
    record = head.temp_dir / "session_latest" / "node_ip_address.json"
    partial = record.with_suffix(".partial")
    partial.write_text(json.dumps({"node_ip_address": head.gcs_address.rsplit(":", 1)[0]}))
    os.replace(partial, record)


def kill_node(head: LocalRay, node: WorkerNode) -> None:
    """Take the node away at once, as a VM that vanishes goes: SIGKILL to its process group in
    one signal (killpg: the kernel signals every member before any runs again), then to any
    member of its session left; no goodbye to the GCS, which marks the node DEAD once its health
    checks fail. Signalled one by one, the raylet may outlive its dashboard agent long enough to
    report its own death to the GCS ("dashboard_agent failed and raylet fate-shares with it")."""
    if _is_node(head, node.pid, node.name):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
    _end_node(head, node.pid)


def _end_node(head: LocalRay, pid: int) -> None:
    """SIGKILL a node added to `head`: its `ray start` process, its descendants and the members
    of its session (a process re-parented when its parent died keeps its session), then forget
    it. Only if the process is still that node's `ray start` (its pid may be another's by now);
    once it is gone, only the members of its session that name the head's temp dir (a session's
    id stays taken while it has members, so they are the node's)."""
    record = head.temp_dir / "nodes" / str(pid)
    ours = record.exists() and _is_node(head, pid, record.read_text())
    for _ in range(5):
        table = _proc_table()
        members = {member for member in _session(pid)
                   if ours or str(head.temp_dir) in table.get(member, (0, ""))[1]}
        targets = members | (_descendants(pid) | {pid} if ours and _alive(pid) else set())
        targets.discard(os.getpid())
        if not any(_alive(target) for target in targets):
            break
        _signal_all(targets, signal.SIGKILL)
        time.sleep(0.2)
    record.unlink(missing_ok=True)


def _is_node(head: LocalRay, pid: int, name: str) -> bool:
    command = _proc_table().get(pid, (0, ""))[1]
    return f"--address={head.gcs_address}" in command and f"--node-name={name}" in command


def state_rows(head: LocalRay, path: str) -> list[dict]:
    """The rows of a State API listing (GET /api/v0/<resource>?...)."""
    with urllib.request.urlopen(head.dashboard_url + path, timeout=10) as reply:
        return json.load(reply)["data"]["result"]["result"]


def _nodes_of(head: LocalRay) -> list[int]:
    """The pids of the worker nodes added to `head` (none for a `start` head)."""
    nodes = head.temp_dir / "nodes"
    return [int(entry.name) for entry in nodes.iterdir()] if nodes.is_dir() else []


def _environment(env: dict[str, str]) -> dict[str, str]:
    """The environment of a test head's (or node's) processes: this one's, `env`, and
    tools/ray_site first on PYTHONPATH, which holds to this interpreter's Ray; another Ray runs
    as it ships."""
    return {**os.environ, **env, "PYTHONPATH": os.pathsep.join(
        filter(None, [None if OTHER_RAY else str(RAY_SITE), os.environ.get("PYTHONPATH")]))}


def stop(head: LocalRay) -> None:
    """End every process of `head` and remove its files. Works from another process than the
    one that started it: the pytest controller ends the head that a worker started."""
    for pid in _nodes_of(head):
        _end_node(head, pid)
    end_processes(head.pid, str(head.temp_dir))
    deadline = time.monotonic() + 30
    while _alive(head.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(head.temp_dir, ignore_errors=True)


def shared_head(share: Path) -> LocalRay:
    """The one head of a test session: whichever process asks first starts it.

    pytest-xdist runs the suite in several worker processes, and each used to start its own
    head, ~15 CPU-seconds of Ray's processes starting on a two-core machine. The first worker
    to ask starts it, under an exclusive lock on `share/lock`, and records it in
    `share/head.json`; the others read the record. A failed start is recorded too, so that the
    other workers fail at once with its reason instead of each waiting out the timeout.
    Ending it is left to whoever created `share` (`stop_shared`), after every worker is done.
    """
    with open(share / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = share / "head.json"
        if record.exists():
            saved = json.loads(record.read_text())
            if "error" in saved:
                raise RuntimeError(f"the session's Ray head failed to start: {saved['error']}")
            return _from_record(saved)
        try:
            head = start(share / "head")
        except Exception as error:
            record.write_text(json.dumps({"error": str(error)}))
            raise
        record.write_text(json.dumps({**dataclasses.asdict(head), "temp_dir": str(head.temp_dir)}))
        return head


def stop_shared(share: Path) -> None:
    """End the session's head, if a worker started one."""
    record = share / "head.json"
    if record.exists():
        saved = json.loads(record.read_text())
        if "error" not in saved:
            stop(_from_record(saved))


def list_jobs(dashboard_url: str) -> list[dict]:
    """Every job record of the head. Ray fails a listing with a bare 500 when a record is deleted
    while it reads them (components/run/ray_access.py RayJobs.live_jobs), which on the shared
    head happens whenever another worker's test resubmits a run; the next listing is whole."""
    def listing() -> list[dict]:
        with urllib.request.urlopen(f"{dashboard_url}/api/jobs/", timeout=10) as reply:
            return json.load(reply)

    for _ in range(5):
        try:
            return listing()
        except urllib.error.HTTPError:
            time.sleep(0.2)
    return listing()


def _from_record(saved: dict) -> LocalRay:
    return LocalRay(**{**saved, "temp_dir": Path(saved["temp_dir"])})


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


def _session(sid: int) -> set[int]:
    """The processes of session `sid` (field 6 of /proc/<pid>/stat)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                found.add(int(entry.name))
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
