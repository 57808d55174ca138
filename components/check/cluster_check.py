"""ClusterCheck: validate the GPUs, the RDMA fabric and the bucket before spending GPU hours.

Runs after the RayCluster is ready and before the GrpoJob, as a Ray job on the same cluster and
through the same machinery as the job's provider (ray_access: port-forward or a configured
address, timeouts, retries, progress). The job is components/check/cluster_check_script.py,
shipped inline in its entrypoint; it measures, and the provider judges against the target's
floors (components/facts/expectations.py):
- every GPU node sees the target's GPU count and type, runs an NVIDIA driver the verl image's
  CUDA accepts, and can import what its pod installs at start (components/facts/pins.py);
- an all-reduce across every GPU of every node (NCCL, over the RDMA NICs) reaches the target's
  minimum bus bandwidth, and NCCL itself reports the fabric the target must use: the gIB
  plugin on a4/a3u, multi-node NVLink (MNNVL) on a4x;
- reading the model files from /data reaches MIN_READ_MBPS.
It runs under the training job's effective env (`run_env.effective_env`: the job's env plus what
verl adds for every worker), so a setting verl overrides is measured as training will see it.
Its timeout grows with the node count (`timeout_minutes`). The numbers are outputs. A failure stops `pulumi up` before the GrpoJob, with the measured
numbers and the likely cause. The check runs once per cluster shape: it is replaced (and run
again) only when what it checks changes, and the GrpoJob's `checked` input follows its id, so a
re-check stops the training job first (both need every GPU) and the job resumes after it.
`verl-gke:job.skipClusterCheck` leaves it out.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any, Callable

import pulumi
import pulumi.dynamic as dynamic

from components import unknowns
from components.facts import pins
from components.facts.expectations import EXPECTATIONS, MIN_READ_MBPS
from components.facts.hardware import HardwareProfile
from components.facts.layout import DASHBOARD_PORT
from components.options import child_options
from components.run.grpo_job import Progress, access_inputs, deterministic_id, poll
from components.run.kube import gate
from components.run.ray_access import (
    TERMINAL_STATUSES,
    RayAccessError,
    RayClusterGone,
    RayJobs,
    RayUnreachable,
    RequestPolicy,
    open_dashboard,
)

SCRIPT = Path(__file__).parent / "cluster_check_script.py"
# The script's result line starts with this (its RESULT_PREFIX). Not imported from it: the
# script imports ray, which would add a second to every `pulumi preview`.
RESULT_PREFIX = "VERL_GKE_CLUSTER_CHECK "
PROVIDER_VERSION = "2"
# Inputs that define a check: any change runs it again (a new job under a new id), except a
# change of `expected`'s floors alone (_FLOOR_KEYS).
_REPLACE_KEYS = ("submission_id", "entrypoint", "runtime_env", "expected")
# A new floor judges the measurement already made, in `update`, instead of running the check
# again: a re-run stops the training job first (its `checked` input depends on the check), which
# a program upgrade that only moved a floor should not do to a run in progress.
_FLOOR_KEYS = ("min_busbw_gbs", "healthy_busbw_gbs", "min_read_mbps")
_OUTPUT_KEYS = ("status", "inventory", "bus_bandwidth_gbs", "read_mbps", "world_size")


@dataclasses.dataclass(frozen=True)
class ClusterCheckArgs:
    profile: HardwareProfile
    nodes: int  # GPU worker nodes of the RayCluster
    model_path: str  # the staged model on /data, read for the throughput check
    runtime_env: dict  # the training workers' effective env (run_env.effective_env)
    namespace: str
    head_service: pulumi.Input[str]
    kubeconfig: pulumi.Input[str] | None = None
    dashboard_address: str | None = None
    dashboard_port: int = DASHBOARD_PORT
    timeout_minutes: int | None = None  # default: timeout_minutes(nodes)
    # For a CPU-only Ray (tests): torch.distributed's gloo backend with this many CPU ranks, and
    # expectations of zero GPUs. Never set in a stack.
    gloo_ranks: int = 0
    expected_overrides: dict = dataclasses.field(default_factory=dict)
    # The RayCluster's name, for the gate in front of Ray (kube.gate): a create on a suspended
    # cluster resumes it first, a delete on one needs no Ray. None: no gate (a configured
    # dashboard address, tests).
    ray_cluster: pulumi.Input[str] | None = None


class ClusterCheck(pulumi.ComponentResource):
    """The check's outputs: what it measured (it fails `pulumi up` when below the floors)."""

    check_id: pulumi.Output[str]
    status: pulumi.Output[str]
    bus_bandwidth_gbs: pulumi.Output[float]
    read_mbps: pulumi.Output[float]
    inventory: pulumi.Output[list]
    # What the measurement is held to: a healthy cluster's bus bandwidth and the floor
    # (components/facts/expectations.py), known before the check runs.
    expected_bus_bandwidth_gbs: float
    min_bus_bandwidth_gbs: float

    def __init__(
        self, name: str, args: ClusterCheckArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:ClusterCheck", name, None, opts)
        inputs = check_inputs(name, args)
        run = _ClusterCheckRun(
            f"{name}-run", inputs,
            child_options(self, opts, additional_secret_outputs=["access"]),
        )
        self.check_id = run.id
        self.status = run.status
        self.bus_bandwidth_gbs = run.bus_bandwidth_gbs
        self.read_mbps = run.read_mbps
        self.inventory = run.inventory
        self.expected_bus_bandwidth_gbs = inputs["expected"]["healthy_busbw_gbs"]
        self.min_bus_bandwidth_gbs = inputs["expected"]["min_busbw_gbs"]
        self.register_outputs({
            "checkId": self.check_id, "status": self.status,
            "busBandwidthGbs": self.bus_bandwidth_gbs, "readMbps": self.read_mbps,
            "inventory": self.inventory,
            "expectedBusBandwidthGbs": self.expected_bus_bandwidth_gbs,
            "minBusBandwidthGbs": self.min_bus_bandwidth_gbs,
        })


def timeout_minutes(nodes: int) -> int:
    """How long the check may take: 20 minutes, plus one for every two nodes.

    An allowance, not a measurement. The parts that do not grow run on every node at once
    (starting the GPU workers, importing torch, the inventory; the all-reduce's data per rank
    is fixed). What grows is NCCL's setup across the ranks (bootstrap and ring or tree
    connections, about linear in ranks) and the scheduling of one actor per GPU: at 64 nodes,
    512 ranks, 52 minutes.
    """
    return 20 + nodes // 2


def expected(args: ClusterCheckArgs) -> dict[str, Any]:
    """What the cluster must measure: the target's floors, for the cluster's shape."""
    target = EXPECTATIONS[args.profile.target]
    values = {
        "target": args.profile.target.value,
        "nodes": args.nodes,
        "gpus_per_node": args.profile.gpus_per_node,
        "gpu_name": target.gpu_name,
        "min_busbw_gbs": target.min_busbw_gbs,
        "healthy_busbw_gbs": target.healthy_busbw_gbs,
        "min_read_mbps": MIN_READ_MBPS,
        "nccl_network": target.nccl_network,
        "mnnvl": target.mnnvl,
        # The training stack's own needs (components/facts/pins.py): the driver its CUDA needs,
        # and what every pod installs at start because the image lacks it.
        "min_driver": pins.MIN_GPU_DRIVER,
        "modules": [package.module for package in pins.POD_PACKAGES],
    }
    return {**values, **args.expected_overrides}


def check_command(args: ClusterCheckArgs, python: str = "python3") -> str:
    """`python3 -c <the script> <its arguments>`: nothing to upload, nothing to stage."""
    want = expected(args)
    backend = ["--backend", "gloo", "--ranks", str(args.gloo_ranks)] if args.gloo_ranks else []
    arguments = [
        *backend, "--nodes", str(want["nodes"]), "--gpus-per-node", str(want["gpus_per_node"]),
        "--read-path", args.model_path, "--modules", ",".join(want["modules"]),
    ]
    if args.gloo_ranks:
        arguments += ["--size-mb", "8", "--iters", "3", "--read-mb", "64"]
    return " ".join([python, "-c", shlex.quote(SCRIPT.read_text()), *map(shlex.quote, arguments)])


def check_inputs(name: str, args: ClusterCheckArgs) -> dict[str, Any]:
    command = check_command(args)
    want = expected(args)
    access = access_inputs(args.dashboard_address, args.kubeconfig, args.namespace,
                         args.head_service, args.dashboard_port)
    if "kubeconfig" in access and args.ray_cluster is not None:
        access["ray_cluster"] = args.ray_cluster
    return {
        "submission_id": deterministic_id(
            pulumi.get_stack(),
            name,
            {"entrypoint": command, "env": args.runtime_env, "expected": want},
        ),
        "entrypoint": command,
        "runtime_env": args.runtime_env,
        "expected": want,
        "metadata": {"verl-gke-stack": pulumi.get_stack(), "verl-gke-resource": name},
        "timeout_s": (args.timeout_minutes or timeout_minutes(args.nodes)) * 60,
        "access": access,
        "version": PROVIDER_VERSION,
        **dict.fromkeys(_OUTPUT_KEYS),
    }


class _ClusterCheckRun(dynamic.Resource, module="verl-gke", name="ClusterCheckRun"):
    status: pulumi.Output[str]
    inventory: pulumi.Output[list]
    bus_bandwidth_gbs: pulumi.Output[float]
    read_mbps: pulumi.Output[float]
    world_size: pulumi.Output[int]

    def __init__(self, name: str, inputs: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
        super().__init__(ClusterCheckProvider(), name, inputs, opts)


class ClusterCheckProvider(dynamic.ResourceProvider):
    """Runs the check once per shape; refresh and unchanged `up`s never run it again."""

    def __init__(
        self, policy: RequestPolicy = RequestPolicy(), say: Callable[[str], None] | None = None
    ) -> None:
        self.policy = policy
        self.say = say

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        # A cluster released after an earlier run is resumed first (its head Service has no pod
        # to port-forward to) and waited for until ready: the check needs every GPU up.
        gate(props["access"], self.policy, resume=True, timeout_s=float(props["timeout_s"]),
             say=self.say or pulumi.log.info)
        with open_dashboard(props["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, props["submission_id"], self.policy)
            progress = Progress(jobs, self.policy, self.say or pulumi.log.info)
            info = _run(jobs, props, progress)
            measured = _result(jobs, info)
        problems = judge(measured, props["expected"])
        if problems:
            raise _refusal(
                f"the cluster check ({jobs.submission_id}) failed before any GPU hour was "
                "spent on training", problems,
                "Fix the cause and run `pulumi up` again (the check runs again)",
            )
        progress.say("cluster check passed: " + summary(measured, props["expected"]))
        return dynamic.CreateResult(props["submission_id"], {**props, **outputs(measured)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [k for k in (*_REPLACE_KEYS, "access", "timeout_s", "metadata", "version")
                   if olds.get(k) != news.get(k)]
        replaces = [k for k in changed if k in _REPLACE_KEYS]
        # Only the floors moved (the submission id follows `expected`, check_inputs): `update`
        # judges the measurement already made; the resource keeps its id, the job that made it.
        if set(replaces) <= {"expected", "submission_id"} and not unknowns.is_unknown(
            news.get("submission_id")
        ) and _shape(olds.get("expected")) == _shape(news.get("expected")):
            replaces = []
        return dynamic.DiffResult(
            changes=bool(changed), replaces=replaces, delete_before_replace=True,
        )

    def update(self, _id: str, _olds: dict, news: dict[str, Any]) -> dynamic.UpdateResult:
        problems = _floor_problems(_olds, news["expected"])
        if problems:
            raise _refusal(
                f"the cluster check ({_id}) measured, when it last ran, less than the new floors "
                "of this program", problems,
                "Run the check again on the cluster as it is now (`pulumi up --replace <the "
                "ClusterCheckRun's URN>`, `pulumi stack --show-urns` lists it; it stops the "
                "training job first, which then resumes from its checkpoints)",
            )
        return dynamic.UpdateResult({**_olds, **{k: news[k] for k in news if k not in _OUTPUT_KEYS}})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        return dynamic.ReadResult(id_, props)  # a past measurement: nothing to refresh

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Stop a check still running (it holds every GPU); a finished one is history. On a
        suspended cluster nothing runs, and there is no head to ask (review finding 1)."""
        if gate(props["access"], self.policy, resume=False,
                timeout_s=float(props["timeout_s"]), say=self.say or pulumi.log.info):
            return
        try:
            with open_dashboard(props["access"], self.policy) as dashboard:
                jobs = RayJobs(dashboard, id_, self.policy)
                info = jobs.info()
                if info is not None and info["status"] not in TERMINAL_STATUSES:
                    jobs.stop()
                    poll(jobs, TERMINAL_STATUSES,
                          time.monotonic() + self.policy.stop_timeout_s, self.policy)
        except RayClusterGone:
            pass
        except RayUnreachable as error:
            raise RayAccessError(
                f"{error}. Could not make sure the cluster check {id_} has stopped; make the "
                "dashboard reachable and run the command again"
            ) from error


def _run(jobs: RayJobs, props: dict[str, Any], progress: Progress) -> dict:
    """Submit (or adopt, or resubmit a finished attempt of) the check and wait for its end."""
    if not jobs.submit(props["entrypoint"], props["runtime_env"], props["metadata"]):
        info = jobs.info() or {}
        if info.get("status") in ("FAILED", "STOPPED", "SUCCEEDED"):
            jobs.delete()  # a check is a measurement: an earlier attempt's numbers are stale
            jobs.submit(props["entrypoint"], props["runtime_env"], props["metadata"])
    progress.say("cluster check submitted")
    info = poll(jobs, TERMINAL_STATUSES, time.monotonic() + props["timeout_s"], jobs.policy,
                 progress.seen)
    if info["status"] != "SUCCEEDED":
        tail = jobs.log_tail(30, info)
        raise RayAccessError(
            f"the cluster check {jobs.where()} ended {info['status']} ({info.get('message')}) "
            f"before it measured anything. Last log lines:\n{tail}\nA hang or crash here "
            "usually means a GPU or NCCL problem (NCCL INFO lines above); fix it and run "
            "`pulumi up` again, or set verl-gke:job.skipClusterCheck to true"
        )
    return info


def _result(jobs: RayJobs, info: dict) -> dict[str, Any]:
    for line in reversed(jobs.log_tail(50, info).splitlines()):
        if RESULT_PREFIX in line:
            return json.loads(line.split(RESULT_PREFIX, 1)[1])
    raise RayAccessError(f"{jobs.where()} SUCCEEDED without printing its result line")


def outputs(measured: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": "PASSED",
        "inventory": measured["inventory"],
        "bus_bandwidth_gbs": round(measured["allReduce"]["busbw_gbs"], 3),
        "read_mbps": round(measured["read"]["mbps"], 1),
        "world_size": measured["allReduce"]["world_size"],
    }


def summary(measured: dict[str, Any], want: dict[str, Any]) -> str:
    """One line: what was measured, the bus bandwidth against a healthy cluster's and the floor."""
    gpus = sum(node["gpus"] for node in measured["inventory"])
    busbw = measured["allReduce"]["busbw_gbs"]
    healthy = want.get("healthy_busbw_gbs")
    against = (
        f" ({busbw / healthy:.0%} of a healthy {want['target']}'s {healthy:g} GB/s, floor "
        f"{want['min_busbw_gbs']:g})" if healthy else ""
    )
    return (
        f"{len(measured['inventory'])} nodes, {gpus} GPUs; all-reduce bus bandwidth "
        f"{busbw:.1f} GB/s over {measured['allReduce']['world_size']} ranks{against}; read "
        f"{measured['read']['mbps']:.0f} MB/s from {measured['read']['path']}"
    )


def _refusal(what: str, problems: list[str], fix: str) -> RayAccessError:
    return RayAccessError(
        f"{what}:\n- " + "\n- ".join(problems) + f"\n{fix}, or set "
        "verl-gke:job.skipClusterCheck to true to train anyway"
    )


def _shape(want: Any) -> Any:
    """`expected` without its floors: what the check measures, not how it is judged. An
    unknown `expected` (a preview) is its own shape, equal to nothing (components/unknowns.py)."""
    if not isinstance(want, dict) or unknowns.is_unknown(want):
        return want
    return {k: v for k, v in want.items() if k not in _FLOOR_KEYS}


def _floor_problems(measured: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The stored outputs of a check (bus_bandwidth_gbs, read_mbps) against new floors."""
    problems = []
    busbw, read = measured.get("bus_bandwidth_gbs"), measured.get("read_mbps")
    if busbw is not None and busbw < want["min_busbw_gbs"]:
        problems.append(
            f"all-reduce bus bandwidth {busbw:g} GB/s is below the {want['target']} floor of "
            f"{want['min_busbw_gbs']:g} GB/s (a healthy cluster measures about "
            f"{want.get('healthy_busbw_gbs', '?')} GB/s): a NIC, a rail or the fabric is slow"
        )
    if read is not None and read < want["min_read_mbps"]:
        problems.append(f"reading the model {read:g} MB/s is below the floor of {want['min_read_mbps']:g} MB/s")
    return problems


def _stack_problems(nodes: list[dict[str, Any]], want: dict[str, Any]) -> list[str]:
    """A node whose driver is older than the image's CUDA needs, or that cannot import what its
    pod installs at start (a node reports both only on the GPU path, not under gloo)."""
    problems = []
    floor = want.get("min_driver")
    for node in nodes:
        driver = node.get("driver")
        if driver is not None and floor is not None and _version(driver) < _version(floor):
            problems.append(
                f"node {node['node']} runs NVIDIA driver {driver}; the verl image's CUDA needs "
                f"{want['min_driver']} or newer (components/facts/pins.py MIN_GPU_DRIVER): GKE's "
                "DEFAULT driver of this cluster's version is older. Recreate the GPU pool on a GKE "
                "version whose default driver is a 580 or newer, or with gpu_driver_version "
                "LATEST (docs/training.md, \"The training stack\")"
            )
        if node.get("missing"):
            problems.append(
                f"node {node['node']} cannot import {', '.join(node['missing'])}, which its pod "
                "installs when it starts (components/facts/pins.py POD_PACKAGES) and verl's V1 "
                "trainer imports: the pod's postStart install failed; `kubectl describe pod` "
                "shows FailedPostStartHook with pip's reason (the registry through Cloud NAT)"
            )
    return problems


def _version(text: str) -> tuple[int, ...]:
    """A driver version as numbers, for ordering: "580.65.06" -> (580, 65, 6)."""
    return tuple(int(part) for part in re.findall(r"\d+", text))


def judge(measured: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Every way the measurement falls short of the target, with the likely cause."""
    problems = []
    nodes = measured["inventory"]
    if len(nodes) != want["nodes"]:
        problems.append(
            f"{len(nodes)} GPU nodes in the Ray cluster, expected {want['nodes']}: a worker pod "
            "is not running (Pending on capacity, or crash-looping); `kubectl get pods -l "
            "ray.io/node-type=worker`"
        )
    for node in nodes:
        wrong = [name for name in node["names"] if want["gpu_name"] not in name]
        if node["gpus"] != want["gpus_per_node"] or wrong:
            problems.append(
                f"node {node['node']} sees {node['gpus']} GPUs {sorted(set(node['names']))}, "
                f"expected {want['gpus_per_node']} x {want['gpu_name'] or 'none'}: a GPU fell "
                "off the bus or the device plugin is unhealthy; `kubectl describe node` on it, "
                "and replace the node if a GPU is missing"
            )
    problems += _stack_problems(nodes, want)
    busbw = measured["allReduce"]["busbw_gbs"]
    if busbw < want["min_busbw_gbs"]:
        problems.append(
            f"all-reduce bus bandwidth {busbw:.2f} GB/s over {measured['allReduce']['world_size']}"
            f" ranks is below the {want['target']} floor of {want['min_busbw_gbs']:g} GB/s: NCCL "
            "is most likely not using the RDMA NICs (gIB plugin not loaded: NCCL_NET_PLUGIN; "
            "RDMA networks not attached to the worker pods; NCCL falling back to TCP). Look for "
            "'NET/gIB' or 'NET/Socket' in the check job's NCCL INFO lines"
        )
    problems += _fabric_problems(measured["allReduce"], want)
    read = measured["read"]["mbps"]
    if read < want["min_read_mbps"]:
        problems.append(
            f"reading {measured['read']['path']} ran at {read:.0f} MB/s, below "
            f"{want['min_read_mbps']:g} MB/s: the gcsfuse sidecar is likely throttled (its CPU "
            "and memory annotations) or the bucket is in another region than the nodes"
        )
    return problems


def _fabric_problems(all_reduce: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """What NCCL reported using, against what the target's fabric must be."""
    nccl = all_reduce.get("nccl") or {}
    ranks = all_reduce["world_size"]
    if not (want.get("nccl_network") or want.get("mnnvl")):
        return []
    if not nccl.get("reporting_ranks"):
        return [
            "NCCL printed no INFO report on any rank, so the fabric it used is unknown: the "
            "check sets NCCL_DEBUG=INFO and NCCL_DEBUG_FILE in each rank; an image whose NCCL "
            "ignores them, or a failed init, leaves nothing to read. Look at the check job's "
            "worker logs"
        ]
    problems = []
    network = want.get("nccl_network")
    if network and nccl.get("networks") != [network]:
        problems.append(
            f"NCCL used network {', '.join(nccl.get('networks') or ['none'])}, not {network}: "
            "the gIB plugin did not load (NCCL_NET_PLUGIN; /usr/local/gib/lib64 on "
            "LD_LIBRARY_PATH; the nccl-rdma-installer DaemonSet on every GPU node) or the RDMA "
            "networks are not attached to the worker pods. NCCL's lines: "
            + " | ".join(nccl.get("lines") or [])
        )
    if want.get("mnnvl") and nccl.get("mnnvl_ranks") != ranks:
        problems.append(
            f"NCCL enabled multi-node NVLink (MNNVL 1) on {nccl.get('mnnvl_ranks', 0)} of "
            f"{ranks} ranks: FSDP would run over RDMA at a tenth of NVLink's bandwidth. MNNVL "
            "needs NCCL_CUMEM_ENABLE=1 in the job's env (the program sets it on A4X), the "
            "ComputeDomain's IMEX channel claimed by every worker, and all "
            "nodes in one NVL72 domain (the pool's 1x72 placement). NCCL's lines: "
            + " | ".join(nccl.get("lines") or [])
        )
    return problems
