"""The critical-path model's figures, each with its source (tools/critical_path.py).

Every figure is a `Phase`: what happens, how many minutes, and where the figure comes from, a
citation, an "estimate:" that names its figures, or an "assumption:" where no source exists.
The staging and cluster-check figures are built here from their sourced parts and from the
code's own constants, read when called (model_staging.DOWNLOAD_WORKERS, expectations'
floors); which phases a resource has, given the plan, is tools/path_phases.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from components.facts import expectations
from components.storage import model_staging

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
    floor = expectations.EXPECTATIONS[target].min_busbw_gbs
    # busbw = algbw x 2(n-1)/n (nccl-tests), so one all-reduce of S bytes at the floor takes
    # S x 2(n-1)/n / floor, less than 2 S / floor for any n.
    size_gb = defaults["size-mb"] * 2**20 / 1e9
    all_reduce_s = (defaults["iters"] + 2) * 2 * size_gb / floor  # two warm-ups
    read_s = defaults["read-mb"] / expectations.MIN_READ_MBPS
    # A time limit on the read, where the script has one (--read-seconds).
    read_s = min(read_s, defaults.get("read-seconds", read_s))
    return Duration((
        Phase("Ray starts one rank per GPU, NCCL connects", 1.0, "assumption"),
        Phase(f"{defaults['iters']}+2 all-reduces of {defaults['size-mb']} MiB", round(
            all_reduce_s / 60, 3),
            f"estimate: at {target}'s own {floor:g} GB/s bus-bandwidth floor "
            f"(components/facts/expectations.py), {seconds(all_reduce_s)} at most"),
        Phase(f"{defaults['read-mb']} MiB read from /data", round(read_s / 60, 3),
              f"estimate: at the {expectations.MIN_READ_MBPS:g} MiB/s read floor "
              f"(expectations.MIN_READ_MBPS), {seconds(read_s)} at most; sizes from "
              "components/check/cluster_check_script.py's defaults"),
    ))


# --- The GPU branch. ---
# Google publishes no creation-time figure for a control plane; public
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
# local SSD, 9 or 5 NICs): 4-8 min is an estimate, not a source.
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
# NVIDIA-NeMo/Speech#11824, and verl's vLLM 0.11 image builds FROM nvcr.io/nvidia/nemo).
IMAGE_GB = 30
FIRST_PULL = 7.5
FIRST_PULL_SOURCE = (
    f"assumption: ~{IMAGE_GB} GB (a NeMo-based image, NVIDIA-NeMo/Speech#11824), a first "
    "pull through the fresh "
    "in-region remote repository, which first fetches every layer from Docker Hub: 5-10 min"
)
# An earlier pull through the mirror (the DaemonSet's pod on the system pool, a4/a3u) has made
# the remote repository fetch the layers from Docker Hub: what is left is the in-region pull.
IN_REGION_PULL = 5.0
IN_REGION_SOURCE = (
    f"assumption: ~{IMAGE_GB} GB from the in-region repository onto local SSD, the Docker Hub "
    "leg done by the earlier pull: the low end of the 5-10 min first pull"
)
STREAMED = 0.5
STREAMED_SOURCE = (
    "GKE image streaming: container start \"from several minutes (in the case of large "
    "images) to a couple of seconds\" (cloud.google.com/blog/products/containers-kubernetes/"
    "introducing-container-image-streaming-in-gke); 0.5 min with the mount, assumption"
)
RAY_START = Phase(
    "Ray head and workers start, KubeRay ready", 0.5,
    "assumption: tens of seconds once the image is local", RAY_READY,
)
# What the spot pool's create waits at most on a stockout when the program sets no timeout:
# terraform-provider-google-beta resource_container_node_pool.go, default create timeout.
PROVIDER_POOL_TIMEOUT_MIN = 30.0

# --- The run (GrpoRun): verl's start-up, its one weight read, the first step. ---
IMPORTS = Phase(
    "Ray job submitted, worker actors, imports", 1.0,
    "assumption: 0.5-1.5 min", FIRST_STEP,
)
LAZY_READS = Phase(
    "imports read lazily from the streamed image", 0.5,
    "GKE image streaming: \"if your workloads read many files in an image during "
    "initialization, you might notice increased initialization times\" (GKE image-streaming "
    "limitations); the figure is an assumption", FIRST_STEP,
)
FSDP = Phase(
    "FSDP wrap, broadcast from rank 0, optimizer", 0.75,
    "assumption: 0.5-1 min", FIRST_STEP,
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

