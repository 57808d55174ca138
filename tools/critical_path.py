"""The critical path of `pulumi up`: the longest chain of waits to the GRPO job's first step.

    python -m tools.critical_path --stack a4 [--mode autopilot] [--warm-image]
        [--measured <stack outputs or timeline JSON> [--started <ISO time of `up`'s start>]]

The engine creates a resource once everything it depends on is created: its explicit
`depends_on`, the resources behind its inputs, and its provider (the offline plan records all
three, tools/plan.py). The longest chain through that graph, with a duration per resource, is
what `pulumi up` takes at best, however parallel the rest is.

A resource's duration is a list of phases, each a figure and its source (a citation, an
"estimate:" naming its figures, or an "assumption:" where no source exists). The three long
boxes are split where their parts are known: the GPU pool (capacity, VMs to registered), the
RayCluster (GPU driver, image, Ray start) and the run (imports, the weight read at the cluster
check's floor, FSDP, vLLM, validation, the first step from tools/step_model.py). The figures
come from what the plan contains (`Facts`): a pre-pull DaemonSet (PREPULL) starts the image
at node registration, an image-streaming prewarm (PREWARM) turns the first pull into a stream,
the cluster's default pool size sets its delete, the capacity mode and its timeouts set the
wait, and the code's own constants (the check's read floor, staging's parallelism) set the
read and staging. A lever the plan lacks costs what it would save: the figure says which.

`--measured` replaces the model's figures by the timestamps a real `up` recorded (the job's
`timeline` output, components/run/timeline.py): one measured segment per pair of milestones,
each replacing the phases it covers (docs/cost.md, "Expected timings").
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from components.cluster.gke_cluster import SYSTEM_POOL
from components.facts.expectations import EXPECTATIONS, MIN_READ_MBPS
from components.storage import model_staging
from tools import cli, mockrun, plan

FINAL = "pulumi-python:dynamic/verl-gke:GrpoRun"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
GPU_POOL = f"{NODE_POOL} gpu-pool"
CLUSTER = "gcp:container/cluster:Cluster"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
COMPUTE_DOMAIN = "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"
# The levers, by the logical name (and, for the DaemonSet, metadata.name) the program gives them.
PREPULL = "verl-image-prepull"
PREWARM = "verl-image-prewarm"

# The timeline's milestones (components/run/timeline.py MILESTONES), in the order `up` reaches
# them: each phase names the one that closes its segment, so that `--measured` can replace a
# segment's phases by what a real `up` took.
CLUSTER_UP = "clusterCreated"
REGISTERED = "gpuNodesRegistered"
ALLOCATABLE = "gpusAllocatable"
PULLED = "imagePulled"
RAY_READY = "rayClusterReady"
JOB_STARTED = "jobStarted"
FIRST_STEP = "firstStep"
MILESTONES = (CLUSTER_UP, REGISTERED, ALLOCATABLE, PULLED, RAY_READY, JOB_STARTED, FIRST_STEP)


@dataclass(frozen=True)
class Phase:
    what: str
    minutes: float
    source: str  # a citation, "estimate: <its figures and theirs>" or "assumption: <why>"
    milestone: str | None = None  # the timeline milestone that closes this phase's segment


@dataclass(frozen=True)
class Duration:
    """A resource's time: its phases, one after the other."""

    phases: tuple[Phase, ...]

    @property
    def minutes(self) -> float:
        return round(sum(p.minutes for p in self.phases), 2)

    @property
    def source(self) -> str:
        return "; ".join(f"{p.what}: {p.source}" if p.what else p.source for p in self.phases)


def one(minutes: float, source: str, what: str = "", milestone: str | None = None) -> Duration:
    return Duration((Phase(what, minutes, source, milestone),))


def seconds(value: float) -> str:
    """A duration as it is: `0.4 s`, never rounded to `0 s` (RE-16)."""
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


# --- Staging (components/storage/model_staging.py), an estimate from sourced figures. ---
# The default model, Qwen2.5-32B-Instruct: "about 66 GB" (TUTORIAL.md, "Model and data staging").
MODEL_GB = 66.0
# hf_transfer's own ceiling: "a power user tool, to go beyond ~500MB/s on very high bandwidth
# network" (huggingface/hf_transfer README). A figure the tool is built for, not a guarantee of
# the Hugging Face CDN.
HF_TRANSFER_MBPS = 500.0
# gcsfuse uploads an out-of-order written file in one stream when it is closed (the sidecar
# stages it first, model_staging.SIDECAR_ANNOTATIONS), so a worker downloads a file, then
# uploads it. Google publishes no per-stream figure; gcsfuse's benchmarks (GoogleCloudPlatform/
# gcsfuse docs/benchmarks.md) reach GB/s only with a hundred writers on an n2-standard-96.
GCS_STREAM_MBPS = 100.0
# The script's own pipeline (listing, thread pool, out-of-order writes, renames, marker) costs at
# most this much CPU per GB: `make bench` (bench/staging_bench.py) measures it with a fake hub and
# a local sink, script and hub together (0.5-1.8 s/GB, medians on this project's shared 2-core
# machine), and fails above this bound, so the figure stays true. CPU per GB, not the wall-clock
# rate, because the rate on a shared machine says more about its neighbours than about the script.
PIPELINE_CPU_S_PER_GB = 3.0
# What that CPU cost allows on the staging container's CPU request; TLS (hf_transfer) and the
# upload (the gcsfuse sidecar, its own CPU limit) are not in it.
PIPELINE_MBPS = (
    int(model_staging.CONTAINER_RESOURCES["requests"]["cpu"]) / PIPELINE_CPU_S_PER_GB * 1000
)
# The system pool's c2-standard-16 egress cap, 32 Gbps (cloud.google.com/compute/docs/
# network-bandwidth, per-VM maximum egress bandwidth), which the uploads to GCS count against:
# never the bound here, listed so it is seen to have been checked.
NODE_MBPS = 32_000 / 8


def staging_mbps(workers: int | None = None) -> float:
    """The staging Job's model throughput: `workers` files at once (default: the code's
    model_staging.DOWNLOAD_WORKERS, read when called), each downloaded at its share of
    hf_transfer's ceiling and then uploaded in one GCS stream, capped by the node and by the
    script's own measured pipeline."""
    workers = workers or model_staging.DOWNLOAD_WORKERS
    per_file = 1 / (1 / (HF_TRANSFER_MBPS / workers) + 1 / GCS_STREAM_MBPS)
    return min(workers * per_file, NODE_MBPS, PIPELINE_MBPS)


# Before the model: the ~0.4 GB python image from the in-region mirror, pip's pinned wheels
# from PyPI, verl's blobless clone and GSM8K (7.5k rows).
STAGING_SETUP = Phase(
    "setup", 2, "assumption: image pull from the mirror, pinned wheels, verl clone, GSM8K"
)
# GKE: "each new node takes about 80 to 120 seconds to boot" (autoscaled general-purpose nodes;
# docs.cloud.google.com/kubernetes-engine/docs/how-to/capacity-provisioning). The midpoint.
CPU_NODE_BOOT = Phase(
    "CPU node boots and registers", 1.7,
    "GKE: each new node takes about 80 to 120 seconds to boot "
    "(cloud.google.com/kubernetes-engine/docs/how-to/capacity-provisioning)",
)
POOL_OPERATION = Phase(
    "node-pool operation around the boot", 0.5,
    "assumption: GKE's create operation and the provider's poll, no published figure",
)


def staging_duration(autopilot: bool) -> Duration:
    mbps = staging_mbps()
    model = MODEL_GB * 1000 / mbps / 60
    workers = model_staging.DOWNLOAD_WORKERS
    phases = [Phase(f"Autopilot provisions a node for the pod ({CPU_NODE_BOOT.what})",
                    CPU_NODE_BOOT.minutes, CPU_NODE_BOOT.source)] if autopilot else []
    return Duration((*phases, STAGING_SETUP, Phase(
        f"{MODEL_GB:g} GB at {mbps:.0f} MB/s", round(model, 2),
        f"estimate: {workers} files at once (model_staging.DOWNLOAD_WORKERS), each at "
        f"1/{workers} of hf_transfer's ~{HF_TRANSFER_MBPS:g} MB/s (huggingface/hf_transfer "
        f"README) then one GCS upload stream at {GCS_STREAM_MBPS:g} MB/s (assumption: no "
        f"published per-stream figure); the script's own pipeline allows {PIPELINE_MBPS:.0f} "
        f"MB/s at its measured CPU cost (make bench) and the node {NODE_MBPS:g} MB/s "
        "(cloud.google.com/compute/docs/network-bandwidth)",
    )))


CLUSTER_CHECK_SCRIPT = (
    Path(__file__).resolve().parents[1] / "components/check/cluster_check_script.py"
)


def _script_defaults(path: Path) -> dict[str, float]:
    """The numeric defaults of a script's `--flag` arguments, read from its source (not imported:
    the check script imports torch and ray)."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            first = node.args[0] if node.args else None
            flag = first.value if isinstance(first, ast.Constant) else None
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            value = default.value if isinstance(default, ast.Constant) else None
            if isinstance(flag, str) and isinstance(value, (int, float)) and not isinstance(
                value, bool
            ):
                found[flag.lstrip("-")] = value
    return found


def cluster_check_duration(target: str) -> Duration:
    """The check's all-reduce at this target's own floor and its read at the read floor (both
    read from components/facts/expectations.py when called), plus Ray starting its ranks."""
    defaults = _script_defaults(CLUSTER_CHECK_SCRIPT)
    floor = EXPECTATIONS[target].min_busbw_gbs
    # busbw = algbw x 2(n-1)/n (nccl-tests), so one all-reduce of S bytes at the floor takes
    # S x 2(n-1)/n / floor, less than 2 S / floor for any n.
    size_gb = defaults["size-mb"] * 2**20 / 1e9
    all_reduce_s = (defaults["iters"] + 2) * 2 * size_gb / floor  # two warm-ups
    read_s = defaults["read-mb"] / MIN_READ_MBPS
    # A time limit on the read, where the script has one (--read-seconds).
    read_s = min(read_s, defaults.get("read-seconds", read_s))
    return Duration((
        Phase("Ray starts one rank per GPU, NCCL connects", 1.0, "assumption"),
        Phase(f"{defaults['iters']}+2 all-reduces of {defaults['size-mb']} MiB", round(
            all_reduce_s / 60, 3),
            f"estimate: at {target}'s own {floor:g} GB/s bus-bandwidth floor "
            f"(components/facts/expectations.py), {seconds(all_reduce_s)} at most"),
        Phase(f"{defaults['read-mb']} MiB read from /data", round(read_s / 60, 3),
              f"estimate: at the {MIN_READ_MBPS:g} MiB/s read floor "
              f"(expectations.MIN_READ_MBPS), {seconds(read_s)} at most; sizes from "
              "components/check/cluster_check_script.py's defaults"),
    ))


# --- The GPU branch. ---
# Google publishes no creation-time figure for a control plane (FIRST-STEP-FLOOR 4.2); public
# `terraform apply` logs of whole cluster creates, default pool included, show 5.4-14.5 min.
CONTROL_PLANE = Phase(
    "control plane", 6.5,
    "assumption: no published figure; public terraform logs of whole cluster creates, "
    "transient default pool included, show 5.4-14.5 min", CLUSTER_UP,
)
# A regional cluster without node_locations puts its default pool in three zones of the region
# ("By default, GKE replicates each node pool across three zones", GKE regional clusters).
DEFAULT_ZONES = 3
# GPU VMs from create to registered: no published figure for A4, A3 Ultra or A4X (8 or 4 GPUs,
# local SSD, 9 or 5 NICs); FIRST-STEP-FLOOR 4.3 estimates 4-8 min.
GPU_VMS = Phase(
    "GPU VMs created, booted, registered", 7.0,
    "assumption: no published figure for these machines; 4-8 min estimated (GKE's 80-120 s "
    "for general-purpose nodes is a floor; a 2022 report gives 4.5 min for a GPU VM, "
    "codalab/codalab-worksheets#4042)", REGISTERED,
)
DRIVER = Phase(
    "GPU driver installed, GPUs allocatable", 0.5,
    "GKE-managed driver: \"driver installation takes ~30 seconds\" (GoogleCloudPlatform/"
    "ai-on-gke best-practices/startup-latency.md:179)", ALLOCATABLE,
)
# The pinned verl image: ~30 GB unpacked, likely (a NeMo framework image "is around 29GB",
# NVIDIA-NeMo/Speech#11824; FIRST-STEP-FLOOR 4.6).
IMAGE_GB = 30
FIRST_PULL = 7.5
FIRST_PULL_SOURCE = (
    f"assumption: ~{IMAGE_GB} GB (FIRST-STEP-FLOOR 4.6), a first pull through the fresh "
    "in-region remote repository, which first fetches every layer from Docker Hub: 5-10 min"
)
# An earlier pull through the mirror (the DaemonSet's pod on the system pool, a4/a3u) has made
# the remote repository fetch the layers from Docker Hub: what is left is the in-region pull.
IN_REGION_PULL = 5.0
IN_REGION_SOURCE = (
    f"assumption: ~{IMAGE_GB} GB from the in-region repository onto local SSD, the Docker Hub "
    "leg done by the earlier pull: the low end of the 5-10 min first pull (FIRST-STEP-FLOOR 4.6)"
)
STREAMED = 0.5
STREAMED_SOURCE = (
    "GKE image streaming: container start \"from several minutes (in the case of large "
    "images) to a couple of seconds\" (cloud.google.com/blog/products/containers-kubernetes/"
    "introducing-container-image-streaming-in-gke); 0.5 min with the mount, assumption"
)
RAY_START = Phase(
    "Ray head and workers start, KubeRay ready", 0.5,
    "assumption: tens of seconds once the image is local (FIRST-STEP-FLOOR 4.8)", RAY_READY,
)
# What the spot pool's create waits at most on a stockout when the program sets no timeout:
# terraform-provider-google-beta resource_container_node_pool.go, default create timeout.
PROVIDER_POOL_TIMEOUT_MIN = 30.0

# --- The run (GrpoRun), FIRST-STEP-FLOOR 4.7, 4.9, 4.10. ---
IMPORTS = Phase(
    "Ray job submitted, worker actors, imports", 1.0,
    "assumption: 0.5-1.5 min (FIRST-STEP-FLOOR 4.9)", FIRST_STEP,
)
LAZY_READS = Phase(
    "imports read lazily from the streamed image", 0.5,
    "GKE image streaming: \"if your workloads read many files in an image during "
    "initialization, you might notice increased initialization times\" (GKE image-streaming "
    "limitations); the figure is an assumption", FIRST_STEP,
)
FSDP = Phase(
    "FSDP wrap, broadcast from rank 0, optimizer", 0.75,
    "assumption: 0.5-1 min (FIRST-STEP-FLOOR 4.9)", FIRST_STEP,
)
VLLM = Phase(
    "vLLM engines: torch.compile and CUDA graphs", 2.0,
    "assumption: 1-3 min; verl sets VLLM_DISABLE_COMPILE_CACHE=1 (verl/trainer/"
    "constants_ppo.py:34), so every run compiles", FIRST_STEP,
)
WARM_UP = Phase(
    "first step's warm-up (allocator, graphs)", 0.25, "assumption", FIRST_STEP,
)
# GSM8K's test split, what validation generates for (openai/gsm8k, main/test: 1,319 rows).
GSM8K_TEST = 1319


@dataclass(frozen=True)
class Facts:
    """What the plan (and the code's constants) say about the phases' figures."""

    target: str
    autopilot: bool
    capacity: str  # reservation, spot, flex-start, or autopilot
    streaming: bool  # image streaming on the GPU nodes (gcfsConfig; Autopilot's default)
    prepull: bool  # the pre-pull DaemonSet is in the plan
    prepull_head: bool  # it also pulls on the system pool, where the head runs (a4/a3u)
    prewarm: bool  # the image-streaming prewarm is in the plan
    warm_image: bool  # an earlier pull filled the project's streaming cache (--warm-image)
    default_pool_nodes: int  # the Cluster's transient default pool (0 on Autopilot)
    pool_timeout_min: float | None  # the spot GPU pool's create timeout
    ray_timeout_min: float | None  # the RayCluster's wait (pulumi.com/timeoutSeconds)
    val_before_train: bool
    post_start: bool  # the Ray pods run a postStart command (A4X's pip install)
    compute_domain: bool  # A4X's IMEX daemons start when the workers' claims are prepared
    first_step: Phase
    validation: Phase | None


def facts(recording: mockrun.Recording, config=None, warm_image: bool = False) -> Facts:
    """Read the plan: the levers it holds, its capacity, its run (validation, first step).
    `config` is the stack's config (step_model.stack_config) for its own job; without it, the
    target's default job at the plan's node count."""
    hardware = recording.plain_outputs()["hardware"]
    autopilot = is_autopilot(recording)
    pools = [r for r in recording.of_type(NODE_POOL) if r.name == GPU_POOL.split(" ")[1]]
    node_config = pools[0].plain_inputs.get("nodeConfig", {}) if pools else {}
    capacity = ("autopilot" if autopilot else "spot" if node_config.get("spot")
                else "flex-start" if node_config.get("flexStart") else "reservation")
    streaming = autopilot or bool((node_config.get("gcfsConfig") or {}).get("enabled"))
    cluster = recording.one(CLUSTER).plain_inputs
    zones = len(cluster.get("nodeLocations") or []) or DEFAULT_ZONES
    default_pool = 0 if autopilot else int(cluster.get("initialNodeCount") or 0) * zones
    timeout = (pools[0].options.custom_timeouts or {}).get("create") if pools else None
    ray = recording.one(RAY_CLUSTER)
    annotations = (ray.plain_inputs.get("metadata") or {}).get("annotations") or {}
    ray_timeout = annotations.get("pulumi.com/timeoutSeconds")
    entrypoint = recording.one(FINAL).plain_inputs["entrypoint"]
    found = re.search(r"trainer\.val_before_train=(\w+)", entrypoint)
    # Unset: verl's default, True (verl/trainer/config/ppo_trainer.yaml:178).
    val = found is None or found.group(1).lower() == "true"
    prepulls = [r for r in recording.of_type(DAEMON_SET) if _is_prepull(r)]
    first_step, validation = _run_figures(hardware["target"], hardware["nodes"], config, val)
    return Facts(
        target=hardware["target"], autopilot=autopilot, capacity=capacity, streaming=streaming,
        prepull=bool(prepulls),
        prepull_head=any(SYSTEM_POOL in json.dumps(r.plain_inputs) for r in prepulls),
        prewarm=any(r.custom and r.name == PREWARM for r in recording.resources),
        warm_image=warm_image, default_pool_nodes=default_pool,
        pool_timeout_min=_minutes(timeout) if timeout else None,
        ray_timeout_min=float(ray_timeout) / 60 if ray_timeout else None,
        val_before_train=val,
        post_start="postStart" in json.dumps(ray.plain_inputs),
        compute_domain=bool(recording.of_type(COMPUTE_DOMAIN)),
        first_step=first_step, validation=validation,
    )


def _is_prepull(resource: mockrun.Registered) -> bool:
    meta = resource.plain_inputs.get("metadata") or {}
    return PREPULL in (resource.name, meta.get("name"))


def _minutes(timeout: str) -> float:
    """A Pulumi custom timeout ("45m", "1h30m", "90s") in minutes."""
    units = {"h": 60.0, "m": 1.0, "s": 1 / 60}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([hms])", timeout))


def _run_figures(target: str, nodes: int, config, val: bool) -> tuple[Phase, Phase | None]:
    """The first step and the validation pass, from tools/step_model.py for the stack's job."""
    from components.facts.hardware import profile
    from components.facts.models import DEFAULT_MODEL
    from components.runspec.run import GrpoRunConfig
    from tools import step_model

    hw = config.hardware if config is not None else profile(target)
    run = config.run if config is not None else GrpoRunConfig()
    nodes = config.nodes if config is not None else nodes
    row = step_model.run_row(hw, nodes, run, step_model.program_mnnvl(hw))
    if "refused" in row:
        return (Phase("first rollout and update", 1.5, "assumption: the step model refuses this "
                      f"job ({row['refused']})", FIRST_STEP), None)
    # Step 1 saves no checkpoint (save_freq > 1): the step without its checkpoint share.
    step_s = row["step"] - row["checkpoint"]
    first = Phase("first rollout and update", round(step_s / 60, 2),
                  f"estimate: tools/step_model.py, {step_s:.0f} s for {target} at {nodes} nodes "
                  "(the step without its checkpoint share)", FIRST_STEP)
    if not val:
        return first, None
    settings = dataclasses.replace(row["settings"], train_batch=GSM8K_TEST, rollout_n=1)
    val_s = step_model.step(hw, nodes, settings, DEFAULT_MODEL)["rollout"]
    return first, Phase(
        "validation before step 1", round(val_s / 60, 2),
        f"estimate: tools/step_model.py's rollout of GSM8K's {GSM8K_TEST} test prompts, one "
        f"sample each, {val_s:.0f} s (val_before_train is True: verl's default where the job "
        "leaves it unset, verl/trainer/config/ppo_trainer.yaml:178)", FIRST_STEP)


def is_autopilot(recording: mockrun.Recording) -> bool:
    """Autopilot plans have no node pools of their own."""
    return not recording.of_type(NODE_POOL)


# Durations by type, then by logical name where one type covers very different waits.
# Component resources take no time of their own; anything not listed takes DEFAULT.
DEFAULT = one(0.05, "assumption: an API call that returns at once")
STAGING_JOB = "kubernetes:batch/v1:Job staging-job"
CLUSTER_CHECK = "pulumi-python:dynamic/verl-gke:ClusterCheckRun"
IAM = ("IAM: access changes typically take effect within 2 minutes "
       "(cloud.google.com/iam/docs/access-change-propagation)")
DURATIONS: dict[str, Duration] = {
    NODE_POOL: Duration((CPU_NODE_BOOT, POOL_OPERATION)),
    "gcp:projects/iAMMember:IAMMember": one(2, IAM),
    "gcp:storage/bucketIAMMember:BucketIAMMember": one(2, IAM),
    "gcp:compute/routerNat:RouterNat": one(1, "assumption: NAT configuration on the router"),
    "gcp:compute/network:Network": one(
        0.5, "assumption: a global VPC operation", milestone=CLUSTER_UP
    ),
    "gcp:compute/subnetwork:Subnetwork": one(
        0.5, "assumption: a regional operation", milestone=CLUSTER_UP
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": one(0.5, "assumption: a regional operation"),
    "kubernetes:helm.sh/v3:Release": one(
        2, "assumption: chart install with the provider waiting for its workloads"
    ),
    "kubernetes:yaml/v2:ConfigFile": one(
        1, "assumption: the NCCL installer DaemonSet, applied (its pods run once GPU nodes exist)"
    ),
}


def cluster_duration(f: Facts) -> Duration:
    """The control plane, and on Standard the default pool GKE creates with it and the
    provider deletes inside the same create (remove_default_node_pool; FIRST-STEP-FLOOR 3)."""
    if f.autopilot:
        return Duration((CONTROL_PLANE,))
    nodes = f.default_pool_nodes
    delete = 0.5 if nodes <= 1 else 1.0
    return Duration((
        CONTROL_PLANE,
        Phase(f"transient default pool: {nodes} node{'s' * (nodes != 1)} boot",
              CPU_NODE_BOOT.minutes, CPU_NODE_BOOT.source + ", in parallel", REGISTERED),
        Phase(f"transient default pool: {nodes} node{'s' * (nodes != 1)} deleted", delete,
              "assumption: " + ("one node drained and deleted" if nodes <= 1 else
                                f"{nodes} nodes, one per zone, drained and deleted; a one-node "
                                "pool (the cluster's node_locations = [zone]) would take 0.5")
              + " (FIRST-STEP-FLOOR 4.2: under a minute's difference)", REGISTERED),
    ))


def capacity_phase(f: Facts) -> Phase | None:
    """The capacity wait: none with a reservation, unbounded otherwise (0 when capacity is
    there, up to the timeout the plan sets, then `up` fails)."""
    if f.capacity in ("reservation", "autopilot"):
        return None
    if f.capacity == "spot":
        limit = f.pool_timeout_min or PROVIDER_POOL_TIMEOUT_MIN
        whose = ("the pool's own create timeout" if f.pool_timeout_min else
                 "the provider's default create timeout (terraform-provider-google-beta "
                 "resource_container_node_pool.go), the program setting none")
        return Phase("spot capacity wait", 0.0,
                     f"no bound: 0 when the zone has spot capacity; a stockout holds the pool "
                     f"create for {limit:g} min ({whose}), then `up` fails", REGISTERED)
    limit = f.ray_timeout_min
    return Phase("flex-start capacity wait", 0.0,
                 "no bound: flex-start VMs come \"when available\" (cloud.google.com/"
                 "kubernetes-engine/docs/concepts/dws); the pool returns with no node and the "
                 f"RayCluster waits up to {limit:g} min (its pulumi.com/timeoutSeconds), then "
                 "`up` fails", REGISTERED)


def gpu_pool_duration(f: Facts) -> Duration:
    wait = capacity_phase(f)
    if f.capacity == "flex-start":
        # initialNodeCount 0: the pool returns at once; the VMs come in the RayCluster's wait.
        return Duration((Phase("pool created with no node (flex-start)", POOL_OPERATION.minutes,
                               POOL_OPERATION.source, REGISTERED),))
    return Duration(tuple(p for p in (wait, GPU_VMS) if p))


def streamed(f: Facts) -> bool:
    """Whether the GPU nodes stream the image: streaming on, and the image in the streaming
    cache (prewarmed by PREWARM, or --warm-image after an earlier pull in the project)."""
    return f.streaming and (f.prewarm or f.warm_image)


def image_phase(f: Facts, pods_start: float, registered: float | None,
                prepull_created: float | None, prewarm_done: float | None) -> Phase:
    """How long the Ray pods wait for the verl image once they are scheduled (`pods_start`).

    Streamed (a prewarmed or warm cache): STREAMED once the prewarm is done. Pulled: from node
    registration when the pre-pull DaemonSet is in the plan, else from `pods_start`; a full
    first pull (FIRST_PULL) through the fresh remote repository, or, where the DaemonSet's pod on
    the system pool (a4/a3u: the head's) started the repository's fetch from Docker Hub before
    the GPU nodes registered, an in-region pull (IN_REGION_PULL) that cannot end before that
    first pull does. The head's own pull (a4/a3u, system pool) runs alongside and is counted
    when it ends later."""
    arm = (" (image streaming on arm64 nodes not checked, FIRST-STEP-FLOOR 4.6: assumption)"
           if f.target == "a4x" else "")
    if streamed(f):
        ready = max(pods_start, prewarm_done or 0.0) + STREAMED
        why = ("prewarmed stream: verl-image-prewarm put the image into the streaming cache"
               if f.prewarm else "streamed from a warm cache: an earlier pull in this project "
               "(--warm-image)")
        waited = (f"; the prewarm is done at {prewarm_done:.1f} min" if prewarm_done else "")
        return Phase(f"image: {why}", round(ready - pods_start, 2),
                     STREAMED_SOURCE + arm + waited, PULLED)
    prepull = f.prepull and registered is not None and prepull_created is not None
    first = prepull_created if prepull and f.prepull_head else None
    if prepull:
        began = max(registered, prepull_created)
        if first is not None and first < began:
            ready = max(began + IN_REGION_PULL, first + FIRST_PULL)
            how = (f"pulled from node registration ({began:.1f} min) by {PREPULL}, from the "
                   f"in-region repository its system-pool pod started filling at {first:.1f} "
                   "min")
            source = IN_REGION_SOURCE + f"; no sooner than that first pull ({FIRST_PULL:g} min)"
        else:
            ready = began + FIRST_PULL
            how = f"first full pull from node registration ({began:.1f} min) by {PREPULL}"
            source = FIRST_PULL_SOURCE
        head = (first + FIRST_PULL) if first is not None else None
    else:
        ready = pods_start + FIRST_PULL
        how = f"first full pull (no {PREPULL}: it starts once the pods are scheduled)"
        source = FIRST_PULL_SOURCE
        head = None
    note = ""
    if head is not None and head > ready:
        ready, note = head, f"; the head's pull on the system pool ends later, at {head:.1f} min"
    if f.prewarm and not f.streaming:
        note += "; the prewarm serves image streaming only, off on these nodes"
    left = max(0.0, ready - pods_start)
    return Phase(f"image: {how}: {left:.1f} min left when the pods start", round(left, 2),
                 source + arm + note, PULLED)


def ray_cluster_duration(f: Facts, start: float, registered: float | None,
                         prepull_created: float | None, prewarm_done: float | None) -> Duration:
    """The RayCluster from its creation to KubeRay's ready: on Autopilot (and flex-start) the
    GPU nodes first; the driver; the image; IMEX and postStart where the plan has them; Ray."""
    phases: list[Phase] = []
    if f.autopilot:
        phases.append(Phase("Autopilot provisions GPU nodes for the pending pods", 0.5,
                            "assumption: the autoscaler's decision", REGISTERED))
    if f.autopilot or f.capacity == "flex-start":
        wait = capacity_phase(f)
        phases += [p for p in (wait, GPU_VMS) if p]
        registered = start + sum(p.minutes for p in phases)
    phases.append(DRIVER)
    pods_start = start + sum(p.minutes for p in phases)  # a worker is scheduled on its GPUs
    phases.append(image_phase(f, pods_start, registered, prepull_created, prewarm_done))
    if f.compute_domain:
        phases.append(Phase("IMEX daemons for the ComputeDomain", 0.5,
                            "assumption: under a minute (FIRST-STEP-FLOOR 4.5)", RAY_READY))
    if f.post_start:
        phases.append(Phase("postStart: pip install from PyPI through Cloud NAT", 0.3,
                            "assumption: one small wheel (FIRST-STEP-FLOOR 4.8)", RAY_READY))
    phases.append(RAY_START)
    return Duration(tuple(phases))


def run_duration(f: Facts) -> Duration:
    """The GRPO job from its submission to verl's first step. The weight read is bounded by
    the cluster check's read floor (expectations.MIN_READ_MBPS, read when called): the check
    fails a mount that reads slower, so the read takes at most this long."""
    read_s = MODEL_GB * 1e9 / (MIN_READ_MBPS * 2**20)
    phases = [IMPORTS, *([LAZY_READS] if streamed(f) else []), Phase(
        f"actor rank 0 reads the {MODEL_GB:g} GB of weights once", round(read_s / 60, 2),
        f"estimate: at the cluster check's {MIN_READ_MBPS:g} MiB/s read floor "
        f"(expectations.MIN_READ_MBPS), a bound: the check fails a slower mount; {seconds(read_s)}"
        " (vLLM loads dummy weights and only rank 0 reads, FIRST-STEP-FLOOR 4.7)", FIRST_STEP,
    ), FSDP, VLLM]
    if f.validation is not None:
        phases.append(f.validation)
    phases += [f.first_step, WARM_UP]
    return Duration(tuple(phases))


def prewarm_duration() -> Duration:
    return one(FIRST_PULL, "assumption: as long as a first pull: the repository fetches every "
               "layer from Docker Hub into the streaming cache (docs.cloud.google.com/"
               "artifact-registry/docs/prewarm-images)", what="image fetched into the "
               "image-streaming cache")


def duration(resource: mockrun.Registered, f: Facts) -> Duration:
    """A resource's duration, except the RayCluster's, which depends on when others end."""
    if not resource.custom:
        return Duration(())
    key = f"{resource.type} {resource.name}"
    if key == STAGING_JOB:
        return staging_duration(f.autopilot)
    if resource.type == CLUSTER_CHECK:
        return cluster_check_duration(f.target)
    if resource.type == FINAL:
        return run_duration(f)
    if resource.type == CLUSTER:
        return cluster_duration(f)
    if key == GPU_POOL:
        return gpu_pool_duration(f)
    if resource.name == PREWARM:
        return prewarm_duration()
    return DURATIONS.get(key, DURATIONS.get(resource.type, DEFAULT))


def waits_for(resource: mockrun.Registered, custom: set[str]) -> set[str]:
    """The custom resources the engine must have created before it creates `resource`."""
    edges = set(resource.dependencies)
    if resource.options.provider:
        edges.add(resource.options.provider)
    return edges & custom


@dataclass(frozen=True)
class Step:
    resource: mockrun.Registered
    duration: Duration
    done_at: float  # minutes after `pulumi up` starts


class Walk:
    """Finish times of every custom resource of a plan, and the chain behind each."""

    def __init__(self, recording: mockrun.Recording, f: Facts | None = None) -> None:
        self.recording = recording
        self.facts = f or facts(recording)
        self.custom = {r.urn: r for r in recording.resources if r.custom}
        self.finish: dict[str, float] = {}
        self.boxes: dict[str, Duration] = {}
        self.before: dict[str, str | None] = {}

    def done_at(self, urn: str) -> float:
        if urn not in self.finish:
            resource = self.custom[urn]
            deps = waits_for(resource, set(self.custom))
            latest = max(deps, key=self.done_at, default=None)
            self.before[urn] = latest
            started = self.done_at(latest) if latest else 0.0
            if resource.type == RAY_CLUSTER:
                box = ray_cluster_duration(
                    self.facts, started, self._end(lambda r: f"{r.type} {r.name}" == GPU_POOL),
                    self._end(_is_prepull_resource), self._end(lambda r: r.name == PREWARM))
            else:
                box = duration(resource, self.facts)
            self.boxes[urn] = box
            self.finish[urn] = round(started + box.minutes, 3)
        return self.finish[urn]

    def _end(self, match: Callable[[mockrun.Registered], bool]) -> float | None:
        found = [urn for urn, r in self.custom.items() if match(r)]
        return max((self.done_at(urn) for urn in found), default=None)

    def chain(self, final_type: str = FINAL, name: str | None = None) -> list[Step]:
        final = self.recording.one(final_type, name)
        self.done_at(final.urn)
        steps: list[Step] = []
        urn: str | None = final.urn
        while urn is not None:
            steps.append(Step(self.custom[urn], self.boxes[urn], self.finish[urn]))
            urn = self.before[urn]
        return list(reversed(steps))


def _is_prepull_resource(resource: mockrun.Registered) -> bool:
    return resource.type == DAEMON_SET and _is_prepull(resource)


def critical_path(recording: mockrun.Recording, final_type: str = FINAL,
                  f: Facts | None = None) -> list[Step]:
    """The longest chain of waits that ends at the resource of `final_type`."""
    return Walk(recording, f).chain(final_type)


def staging_step(recording: mockrun.Recording, f: Facts | None = None) -> Step | None:
    """The staging Job's step on its own branch (its duration, when it is done), or None when
    staging is skipped."""
    job, _, name = STAGING_JOB.partition(" ")
    if not any(r.name == name for r in recording.of_type(job)):
        return None
    return Walk(recording, f).chain(job, name)[-1]


def staging_done_at(recording: mockrun.Recording) -> float | None:
    """When the staging Job's branch ends, or None when staging is skipped."""
    step = staging_step(recording)
    return step.done_at if step else None


def depends_transitively(recording: mockrun.Recording, urn: str, on: str) -> bool:
    """Whether creating `urn` waits, directly or not, for `on`."""
    custom = {r.urn: r for r in recording.resources if r.custom}
    seen: set[str] = set()
    frontier = [urn]
    while frontier:
        current = frontier.pop()
        for dep in waits_for(custom[current], set(custom)):
            if dep == on:
                return True
            if dep not in seen:
                seen.add(dep)
                frontier.append(dep)
    return False


def levers(f: Facts) -> list[str]:
    """Each lever the model reads, whether the plan has it, and what it moves."""
    read_s = MODEL_GB * 1e9 / (MIN_READ_MBPS * 2**20)
    rows = [
        f"{PREPULL} (DaemonSet): {'in the plan' if f.prepull else 'not in the plan'}: "
        + ("the GPU nodes pull the image from their registration, under the driver"
           + (", after its system-pool pod made the repository fetch it" if f.prepull_head
              else "") if f.prepull
           else "the pull starts only once the pods are scheduled, after the driver"),
        f"{PREWARM}: {'in the plan' if f.prewarm else 'not in the plan'}: "
        + ("the image is streamed from a prewarmed cache" if f.prewarm and f.streaming else
           "no stream on a fresh project: the image is pulled"),
        f"default pool: {f.default_pool_nodes} node(s) booted and deleted inside the cluster's "
        "create" if not f.autopilot else "default pool: none on Autopilot",
        f"read floor: expectations.MIN_READ_MBPS = {MIN_READ_MBPS:g} MiB/s bounds the "
        f"{MODEL_GB:g} GB weight read at {read_s / 60:.1f} min",
        f"staging: model_staging.DOWNLOAD_WORKERS = {model_staging.DOWNLOAD_WORKERS} files at "
        f"once, {staging_mbps():.0f} MB/s",
    ]
    if f.capacity == "spot":
        rows.append("spot: GPU pool create timeout "
                    + (f"{f.pool_timeout_min:g} min (the plan's)" if f.pool_timeout_min else
                       f"not set: the provider's {PROVIDER_POOL_TIMEOUT_MIN:g} min"))
    elif f.pool_timeout_min:
        rows.append(f"GPU pool create timeout: {f.pool_timeout_min:g} min (the plan's)")
    if f.capacity in ("flex-start", "autopilot") and f.ray_timeout_min:
        rows.append(f"RayCluster wait: {f.ray_timeout_min:g} min (pulumi.com/timeoutSeconds)")
    return rows


def report(stack: str, mode: str | None, chain: Iterable[Step], ray_ready: float,
           staging: Step | None = None, f: Facts | None = None) -> str:
    steps = list(chain)
    lines = [f"Critical path of `pulumi up` for {stack}{'/' + mode if mode else ''} "
             "(minutes after start; each phase with its figure and its source):", ""]
    for step in steps:
        lines.append(f"  {step.done_at:6.1f}  +{step.duration.minutes:<6g}{step.resource.type} "
                     f"{step.resource.name}")
        if len(step.duration.phases) > 1 or (step.duration.phases
                                              and step.duration.phases[0].what):
            for phase in step.duration.phases:
                lines.append(f"{'':17}+{phase.minutes:<6g}{phase.what}: {phase.source}")
        elif step.duration.phases and step.duration.minutes:
            lines.append(f"{'':23}{step.duration.phases[0].source}")
    total = steps[-1].done_at
    wait = f and capacity_phase(f)
    lines += [
        "",
        f"Estimate to the first training step: {total:.1f} min"
        + (f" with {f.capacity} capacity available" if wait else "")
        + f" (the RayCluster is ready after {ray_ready:.1f} min"
        + (f"; staging is done after {staging.done_at:.1f} min" if staging else "") + ").",
    ]
    if wait:
        lines.append(f"Capacity: {wait.source}.")
    if staging and staging.resource.urn not in {step.resource.urn for step in steps}:
        lines += ["", f"Staging, on its own branch: +{staging.duration.minutes:g} min, "
                      f"{staging.duration.source}"]
    if f is not None:
        lines += ["", "Levers read from the plan and the code:"]
        lines += [f"  - {row}" for row in levers(f)]
        opened = list(dict.fromkeys(
            f"{p.what or s.resource.name}: {p.minutes:g} min" for s in steps
            for p in s.duration.phases if p.minutes and p.source.startswith("assumption")))
        lines += ["", "Open assumptions on this path (to replace with a measured `up`, "
                      "docs/cost.md):"]
        lines += [f"  - {what}" for what in opened]
    return "\n".join(lines)


# --- Measured figures: the job's `timeline` output of a real `up`. ---


def read_timeline(path: Path) -> dict[str, str | None]:
    """The timeline from `pulumi stack output --json` (its `job.timeline`) or from a file
    holding the timeline itself."""
    document = json.loads(path.read_text())
    timeline = (document.get("job") or {}).get("timeline") if "job" in document else document
    if not isinstance(timeline, dict):
        raise cli.UsageError(f"{path}: no job.timeline in it; write it with `pulumi stack "
                             "output --json > outputs.json` after an `up` that reached the "
                             "first step")
    return timeline


def _at(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def measured_segments(chain: list[Step], timeline: dict[str, str | None],
                      started: datetime.datetime | None = None) -> list[dict[str, Any]]:
    """One row per milestone segment on the path: the model's minutes (the sum of its phases)
    and the measured minutes, where both ends were recorded. Without `started` the first
    segment (networks and control plane) keeps the model's figure and anchors the others."""
    phases = [p for step in chain for p in step.duration.phases if p.minutes or p.milestone]
    rows: list[dict[str, Any]] = []
    for milestone in MILESTONES:
        covered = [p for p in phases if p.milestone == milestone]
        rows.append({"milestone": milestone, "phases": [p.what or p.source for p in covered],
                     "model": round(sum(p.minutes for p in covered), 2), "measured": None})
    # Phases without a milestone (the system pool, staging, the check) fall in the segment
    # that ends at the next milestone; staging and the check end at jobStarted.
    rest = sum(p.minutes for p in phases if p.milestone is None)
    next(r for r in rows if r["milestone"] == JOB_STARTED)["model"] += round(rest, 2)
    previous = started
    for row in rows:
        now = _at(timeline.get(row["milestone"]))
        if now is not None and previous is not None:
            row["measured"] = round((now - previous).total_seconds() / 60, 2)
        previous = now if now is not None else None
    return rows


def measured_report(chain: list[Step], timeline: dict[str, str | None],
                    started: datetime.datetime | None) -> str:
    rows = measured_segments(chain, timeline, started)
    lines = ["", "Measured (the job's timeline output) against the model, segment by segment:", ""]
    total = 0.0
    for row in rows:
        used = row["measured"] if row["measured"] is not None else row["model"]
        total += used
        figure = (f"measured {row['measured']:g} min (model {row['model']:g})"
                  if row["measured"] is not None else
                  f"model {row['model']:g} min (not measured: "
                  + ("`--started` not given)" if row["milestone"] == CLUSTER_UP and not started
                     else "a missing timestamp)"))
        lines.append(f"  to {row['milestone']:<19} {figure}")
    lines += ["", f"Estimate with the measured segments: {total:.1f} min to the first step."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--mode", choices=["standard", "autopilot"])
    parser.add_argument("--warm-image", action="store_true",
                        help="an earlier pull in the project filled the image-streaming cache")
    parser.add_argument("--measured", type=Path,
                        help="`pulumi stack output --json` of a real `up` (or its job.timeline)")
    parser.add_argument("--started", help="when that `up` started (ISO 8601; `pulumi stack "
                        "history --json` gives it), to measure the control plane too")
    args = parser.parse_args(argv)
    from tools import step_model

    inputs, recording = plan.run_program(args.stack, args.mode)
    f = facts(recording, step_model.stack_config(args.stack, inputs), args.warm_image)
    walk = Walk(recording, f)
    ray_ready = walk.chain(RAY_CLUSTER)[-1].done_at
    chain = walk.chain()
    staging = staging_step(recording, f)
    print(report(args.stack, args.mode, chain, ray_ready, staging, f))
    if args.measured:
        started = _at(args.started) if args.started else None
        print(measured_report(chain, read_timeline(args.measured), started))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
