"""VerlRayCluster: the KubeRay RayCluster that runs verl, generated from the hardware profile.

One head pod and one GPU worker per node, for every target and cluster mode, built from the
profile instead of the tutorial's three hand-kept manifests (ray-cluster-standard.yaml,
ray-cluster-auto.yaml, ray-cluster-a4x.yaml): worker count, GPUs, CPUs, memory, ephemeral storage
and /dev/shm per machine type; the pod network interfaces from the NIC list (A4, A3 Ultra) or
DRA claims on RDMA NICs and the ComputeDomain channel (A4X); the GCS FUSE volume with the gcsfuse
sidecar's resource annotations; the workload-identity service account. The RayCluster carries
`pulumi.com/waitFor`, so `pulumi up` returns only once KubeRay reports every pod running.

The head stays behind a ClusterIP service and a NetworkPolicy admits its ports (6379 GCS,
8265 dashboard and Jobs API, 10001 client) only from pods of the same namespace. Where the
cluster has no GKE Ray add-on (A4X), the component also installs the namespace-scoped KubeRay
operator from its pinned Helm chart, so the operator exists before the RayCluster it reconciles.

Every head runs the Ray log shipper sidecar (components/observability/log_shipper.py), which
puts the job's log lines into Cloud Logging in the shape the log-based metrics read. Without
the GKE Ray add-on (A4X), which otherwise collects Ray's logs and metrics, the shipper also
ships Ray's system logs from every pod, and a PodMonitoring has Managed Prometheus scrape
every Ray pod's metrics port, so that A4X is observed like the other targets.

It does not create the service account, the claim, the RDMA networks or the DRA claim
templates: those are passed in (GcsFuseStorage, RdmaNetworks, NvidiaDraDriver).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.facts import pins
from components.schema.choices import ClusterMode
from components.facts.hardware import Arch, HardwareProfile, NodeNetworking, PodShape, Target
from components.cluster.helm import pinned_release
from components.facts.layout import CHECKPOINT_MOUNT, DASHBOARD_PORT, DATA_MOUNT
from components.observability import log_shipper
from components.options import child_options
from components.storage.gcs_fuse_storage import CSI_DRIVER, MountUse, inline_attributes

HEAD_PORTS = {"gcs-server": 6379, "dashboard": DASHBOARD_PORT, "client": 10001}
# Ray's Prometheus endpoint on every Ray pod (KubeRay's default `metrics-export-port`).
METRICS_PORT = 8080
WORKER_GROUP = "gpu-group"
# Where Google Managed Prometheus runs its collectors; the GKE Ray add-on's monitoring scrapes
# the Ray pods from there.
MANAGED_PROMETHEUS_NAMESPACE = "gmp-system"

# The tutorial names the A3 Ultra cluster b200-ray-cluster too; name each after its GPU.
CLUSTER_NAMES = {
    Target.A4: "b200-ray-cluster",
    Target.A3_ULTRA: "h200-ray-cluster",
    Target.A4X: "gb200-ray-cluster",
}

# KubeRay sets `.status.state` to "ready" once the head and every worker pod run. Upstream
# marks the field deprecated in favour of conditions, but it is the one readiness signal that
# both the GKE Ray add-on's KubeRay and the pinned chart set.
WAIT_FOR_READY = "jsonpath={.status.state}=ready"
# Pulling the 20+ GB verl image and scaling GPU nodes up takes longer than the provider's
# 10-minute default.
READY_TIMEOUT_SECONDS = 3600

# Host paths GKE installs the GPU driver and the gIB NCCL plugin into.
NVIDIA_HOST_PATH = "/home/kubernetes/bin/nvidia"
GIB_HOST_PATH = "/home/kubernetes/bin/gib"
NVIDIA_LIB64 = "/usr/local/nvidia/lib64"

# The head's /dev/shm: Ray sizes a node's object store at 30% of its memory
# (ray/_private/ray_constants.py DEFAULT_OBJECT_STORE_MEMORY_PROPORTION), 9.6 GB of the head's
# 32 GB; a Memory emptyDir counts against the pod's memory limit, so it is bounded there too.
HEAD_SHM_SIZE = "10Gi"

BUCKET_VOLUME = "training-bucket-vol"
CHECKPOINT_VOLUME = "checkpoint-bucket-vol"
COMPUTE_DOMAIN_CLAIM = "compute-domain-channel"


class RayOperator(str, enum.Enum):
    """Who reconciles the RayCluster."""

    # The cluster's GKE Ray add-on (A4, A3 Ultra: the tutorial's `--addons=RayOperator`).
    GKE_ADDON = "gke-addon"
    # The namespace-scoped kuberay-operator Helm chart (A4X, built without the add-on).
    HELM = "helm"


@dataclass(frozen=True)
class VerlRayClusterArgs:
    """What the RayCluster is built from. Construction rejects inconsistent input.

    profile: the hardware row; shapes the pods.
    mode: the cluster mode (its value "standard" or "autopilot" also works); A4X is Standard
        only.
    nodes: GPU nodes = worker replicas (min = max = replicas: no autoscaling), 1..max_nodes.
    namespace: namespace of the RayCluster, its pods and the NetworkPolicy.
    service_account: Kubernetes service account of every Ray pod (workload identity).
    pvc_name: the GCS FUSE claim mounted at /data (options for reading the model).
    bucket_name: the same bucket, mounted again at CHECKPOINT_MOUNT with options for writing
        checkpoints, in the head (the driver writes the tracker, the export writes the merged
        model) and in every worker (each rank writes its shards).
    rdma_networks: Network object names in NIC order (`RdmaNetworks.pod_networks`:
        gVNIC first, then one per RDMA NIC) on A4 / A3 Ultra; empty on A4X.
    head_node_selector: where the head runs on Standard A4 / A3 Ultra (the CPU system pool,
        `{"cloud.google.com/gke-nodepool": "<pool>"}`), required there. Leave it unset on
        Autopilot (the head goes to a c2 Performance node) and on A4X (the arm64-only image
        puts the head on a GB200 node).
    rdma_claim_template / compute_domain_claim_template: A4X only, required there
        (`NvidiaDraDriver` outputs): the ResourceClaimTemplates of one RDMA NIC and of the
        ComputeDomain's IMEX channel.
    operator: default GKE_ADDON; HELM installs the pinned namespace-scoped KubeRay operator.
    image: default `pins.VERL_IMAGES[profile.arch]`; a tag or digest, never a floating tag.
    tracker_secret: a Secret of env vars for every Ray container (`envFrom`, optional so a pod
        never waits on it); default: none.
    pod_prerequisites: what must exist before Ray pods can run (the GPU pool, the network
        objects, the NCCL installer). Only the RayCluster waits for them: the operator and the
        NetworkPolicy are installed while the GPU nodes are still being created.
    """

    profile: HardwareProfile
    mode: ClusterMode
    nodes: int
    namespace: str
    service_account: pulumi.Input[str]
    pvc_name: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    rdma_networks: Sequence[str] = ()
    head_node_selector: Mapping[str, pulumi.Input[str]] | None = None
    rdma_claim_template: pulumi.Input[str] | None = None
    compute_domain_claim_template: pulumi.Input[str] | None = None
    operator: RayOperator = RayOperator.GKE_ADDON
    image: str | None = None
    # A Secret whose keys become env vars of the head and the workers (the trackers' keys,
    # components/ray/trackers.py); default: none.
    tracker_secret: pulumi.Input[str] | None = None
    pod_prerequisites: Sequence[pulumi.Resource] = ()

    def __post_init__(self) -> None:
        if self.mode in tuple(ClusterMode):
            object.__setattr__(self, "mode", ClusterMode(self.mode))
        found = problems(self)
        if found:
            lines = "\n".join(f"  - {p}" for p in found)
            raise ValueError(f"VerlRayClusterArgs has {len(found)} problem(s):\n{lines}")

    @property
    def autopilot(self) -> bool:
        return self.mode is ClusterMode.AUTOPILOT

    @property
    def image_ref(self) -> str:
        return self.image or pins.VERL_IMAGES[self.profile.arch]

    @property
    def cluster_name(self) -> str:
        return CLUSTER_NAMES[self.profile.target]

    @property
    def without_addon(self) -> bool:
        """No GKE Ray add-on: this component must ship Ray's logs and metrics itself."""
        return self.operator is RayOperator.HELM

    @property
    def head_on_gpu_node(self) -> bool:
        # The arm64-only image cannot run on the amd64 system pool, so on A4X the head shares a
        # GB200 node with a worker (the tutorial's choice).
        return self.profile.arch is Arch.ARM64


def problems(args: VerlRayClusterArgs) -> list[str]:
    """Every inconsistency of the args, each naming the field, the value and the fix."""
    hw = args.profile
    found: list[str] = []
    if not isinstance(args.mode, ClusterMode):
        found.append(f"mode = {args.mode!r} is not a cluster mode: use 'standard' or 'autopilot'")
    elif args.autopilot and not hw.autopilot_supported:
        found.append(
            f"mode = 'autopilot' is not available for target {hw.target.value}: "
            "A4X runs on a Standard cluster only"
        )
    if problem := hw.nodes_problem("nodes", args.nodes):
        found.append(problem)
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", args.namespace):
        found.append(
            f"namespace = {args.namespace!r} is not a Kubernetes namespace name: use lowercase "
            "letters, digits and '-'"
        )
    found += _network_problems(args)
    found += _head_selector_problems(args)
    if _floating(args.image_ref):
        found.append(
            f"image = {args.image_ref!r} has a floating tag: pin a tag that names one build "
            "(e.g. verlai/verl:vllm011.dev7) or a digest (@sha256:...)"
        )
    return found


def _network_problems(args: VerlRayClusterArgs) -> list[str]:
    hw = args.profile
    found = []
    dranet = hw.networking is NodeNetworking.DRANET
    if dranet and args.rdma_networks:
        found.append(
            f"rdma_networks = {list(args.rdma_networks)} is set, but {hw.target.value} gets its "
            "NICs through DRA claims: leave it empty"
        )
    expected = hw.rdma_nics + 1  # the gVNIC, then one per RDMA NIC
    if not dranet and len(args.rdma_networks) != expected:
        found.append(
            f"rdma_networks lists {len(args.rdma_networks)} networks, but {hw.machine_type} "
            f"needs {expected} (the gVNIC, then {hw.rdma_nics} RDMA NICs): pass "
            "RdmaNetworks.pod_networks"
        )
    templates = (args.rdma_claim_template, args.compute_domain_claim_template)
    if dranet and any(t is None for t in templates):
        found.append(
            "rdma_claim_template and compute_domain_claim_template are required on "
            f"{hw.target.value}: pass NvidiaDraDriver.rdma_claim_template and "
            "NvidiaDraDriver.compute_domain_claim_template"
        )
    if not dranet and any(t is not None for t in templates):
        found.append(
            f"rdma_claim_template / compute_domain_claim_template are set, but "
            f"{hw.target.value} maps its NICs through networks: leave them unset"
        )
    return found


def _head_selector_problems(args: VerlRayClusterArgs) -> list[str]:
    needs_pool = not args.autopilot and not args.head_on_gpu_node
    if needs_pool and not args.head_node_selector:
        return [
            "head_node_selector is required on a Standard cluster: pass "
            '{"cloud.google.com/gke-nodepool": "<the CPU system pool>"}'
        ]
    if not needs_pool and args.head_node_selector:
        where = "Autopilot places it by compute class" if args.autopilot else (
            "the arm64-only image must run on a GB200 node"
        )
        return [
            f"head_node_selector = {dict(args.head_node_selector)} cannot be used here ({where}): "
            "leave it unset"
        ]
    return []


def _floating(image: str) -> bool:
    """True when the reference names no fixed build: no tag, or a `latest`-style tag."""
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return True  # no tag means `latest`
    tag = last.split(":", 1)[1]
    return re.search(r"(^|[._-])latest($|[._-])", tag) is not None


# --- The RayCluster, as plain data --------------------------------------------------------


def render_ray_cluster(args: VerlRayClusterArgs) -> dict[str, Any]:
    """The RayCluster object (a dict; Pulumi inputs pass through unchanged)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": args.cluster_name,
            "namespace": args.namespace,
            "annotations": {
                "pulumi.com/waitFor": WAIT_FOR_READY,
                "pulumi.com/timeoutSeconds": str(READY_TIMEOUT_SECONDS),
            },
        },
        "spec": {
            "rayVersion": args.profile.ray_version,
            "headGroupSpec": _head_group(args),
            "workerGroupSpecs": [_worker_group(args)],
        },
    }


def _env_from(args: VerlRayClusterArgs) -> dict[str, Any]:
    """The trackers' Secret as env vars: the raylet, and every Ray worker it starts (the
    trainer's TaskRunner included), inherit the container's env."""
    if args.tracker_secret is None:
        return {}
    return {"envFrom": [{"secretRef": {"name": args.tracker_secret, "optional": True}}]}


def _head_group(args: VerlRayClusterArgs) -> dict[str, Any]:
    # No Ray task or actor on the head, on every target: KubeRay would otherwise give the head
    # its CPU limit as Ray CPUs, and verl's TaskRunner (ray.remote(num_cpus=1), "please make
    # sure main_task is not scheduled on head", verl/trainer/main_ppo.py:80 at b178a3cd5), its
    # dataloader and its agent-loop and reward workers (agent_loop.py:932-945) would land in the
    # head's 32 GB (TRAINING-REVIEW.md finding 9). KubeRay: "setting num-cpus:"0" for the Ray
    # head pod will prevent Ray workloads with non-zero CPU requirements from being scheduled
    # on the head". The job's driver still runs there: an entrypoint with no resources does.
    start_params = {"dashboard-host": "0.0.0.0", "num-cpus": "0"}
    container = {
        "name": "ray-head",
        "image": args.image_ref,
        "ports": [{"containerPort": port, "name": name} for name, port in HEAD_PORTS.items()],
        "resources": _resources(args.profile.head),
        "volumeMounts": [
            {"name": "ray-logs", "mountPath": "/tmp/ray"},
            {"name": "shared-memory", "mountPath": "/dev/shm"},
            {"name": BUCKET_VOLUME, "mountPath": DATA_MOUNT},
            {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT},
        ],
        **_env_from(args),
    }
    patterns = log_shipper.JOB_LOG_PATTERNS
    if args.without_addon:
        patterns += log_shipper.SYSTEM_LOG_PATTERNS
    pod_spec = {
        "serviceAccountName": args.service_account,
        "nodeSelector": _head_node_selector(args),
        "initContainers": [
            log_shipper.shipper_container(args.image_ref, "ray-logs", "/tmp/ray", patterns)
        ],
        "containers": [_with_post_start(container, args.profile.arch)],
        "volumes": [
            {"name": "ray-logs", "emptyDir": {}},
            # Ray's object store: without it Ray falls back to /tmp ("The object store is using
            # /tmp instead of /dev/shm"), inside the container's ephemeral-storage limit.
            {"name": "shared-memory",
             "emptyDir": {"medium": "Memory", "sizeLimit": HEAD_SHM_SIZE}},
            _bucket_volume(args),
            _checkpoint_volume(args),
        ],
    }
    tolerations = _tolerations(args.profile) if args.head_on_gpu_node else []
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        # ClusterIP is KubeRay's default; stated so that nobody exposes the dashboard by accident.
        "serviceType": "ClusterIP",
        "rayStartParams": start_params,
        "template": {
            "metadata": {"annotations": _gcsfuse_annotations(args, "head")},
            "spec": pod_spec,
        },
    }


def _worker_group(args: VerlRayClusterArgs) -> dict[str, Any]:
    hw = args.profile
    container = {
        "name": "ray-worker",
        "image": args.image_ref,
        "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB64}],
        "resources": _resources(hw.worker, gpus=hw.gpus_per_node),
        "volumeMounts": [
            {"name": "nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True},
            {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True},
            {"name": "shared-memory", "mountPath": "/dev/shm"},
            {"name": "ray-tmp-storage", "mountPath": "/tmp"},
            {"name": BUCKET_VOLUME, "mountPath": DATA_MOUNT},
            {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT},
        ],
        **_env_from(args),
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": args.service_account,
        "nodeSelector": _worker_node_selector(args),
        "affinity": _one_worker_per_node(args.cluster_name),
        "tolerations": _tolerations(hw),
        "containers": [_with_post_start(container, hw.arch)],
        "volumes": [
            {"name": "nvidia", "hostPath": {"path": NVIDIA_HOST_PATH}},
            {"name": "gib", "hostPath": {"path": GIB_HOST_PATH}},
            {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": hw.shm_size}},
            {"name": "ray-tmp-storage", "emptyDir": {}},
            _bucket_volume(args),
            _checkpoint_volume(args),
            # GCS FUSE's file cache, on the node's ephemeral storage: the local SSDs of these
            # machines (GKE: a volume named gke-gcsfuse-cache holds the sidecar's file cache).
            {"name": "gke-gcsfuse-cache", "emptyDir": {}},
        ],
    }
    if args.without_addon:
        pod_spec["initContainers"] = [
            log_shipper.shipper_container(
                args.image_ref, "ray-tmp-storage", "/tmp", log_shipper.SYSTEM_LOG_PATTERNS
            )
        ]
    annotations = _gcsfuse_annotations(args, "worker")
    if hw.networking is NodeNetworking.DRANET:
        claims = _resource_claims(args)
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
        pod_spec["resourceClaims"] = claims
    else:
        annotations.update(_network_annotations(args.rdma_networks))
    return {
        "groupName": WORKER_GROUP,
        "replicas": args.nodes,
        "minReplicas": args.nodes,
        "maxReplicas": args.nodes,
        "rayStartParams": {"num-cpus": str(hw.worker_ray_cpus)},
        "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
    }


def _resources(shape: PodShape, gpus: int | None = None) -> dict[str, Any]:
    amounts = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "ephemeral-storage": shape.ephemeral_storage,
    }
    if gpus is not None:
        amounts["nvidia.com/gpu"] = str(gpus)
    return {"limits": dict(amounts), "requests": dict(amounts)}


def _bucket_volume(args: VerlRayClusterArgs) -> dict[str, Any]:
    return {"name": BUCKET_VOLUME, "persistentVolumeClaim": {"claimName": args.pvc_name}}


def _checkpoint_volume(args: VerlRayClusterArgs) -> dict[str, Any]:
    attributes = inline_attributes(args.bucket_name, args.profile.arch, MountUse.CHECKPOINTS)
    return {"name": CHECKPOINT_VOLUME, "csi": {"driver": CSI_DRIVER, "volumeAttributes": attributes}}


def _with_post_start(container: dict[str, Any], arch: Arch) -> dict[str, Any]:
    """The arm64 image's verl needs TransferQueue, which it does not ship (the tutorial's hook)."""
    if arch is Arch.ARM64:
        install = f"pip3 install --quiet TransferQueue=={pins.TRANSFER_QUEUE_VERSION}"
        container["lifecycle"] = {
            "postStart": {"exec": {"command": ["/bin/bash", "-c", install]}}
        }
    return container


def _tolerations(hw: HardwareProfile) -> list[dict[str, str]]:
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if hw.arch is Arch.ARM64:
        # GKE taints arm64 nodes so that amd64-only images never land there by accident.
        tolerations.append(
            {"key": "kubernetes.io/arch", "operator": "Exists", "effect": "NoSchedule"}
        )
    return tolerations


def _head_node_selector(args: VerlRayClusterArgs) -> Mapping[str, Any]:
    if args.head_on_gpu_node:
        return {"cloud.google.com/gke-accelerator": args.profile.gpu_type}
    if args.autopilot:
        # The tutorial also asks for Spot here; a preempted head takes the GRPO driver and the
        # run's progress since the last checkpoint with it, so the head stays on-demand.
        return {
            "cloud.google.com/machine-family": "c2",
            "cloud.google.com/compute-class": "Performance",
        }
    return dict(args.head_node_selector or {})


def _worker_node_selector(args: VerlRayClusterArgs) -> dict[str, str]:
    hw = args.profile
    selector = {"cloud.google.com/gke-accelerator": hw.gpu_type}
    if args.autopilot:
        selector.update(
            {
                # A string: node selector values are strings (the tutorial's bare 8 is rejected).
                "cloud.google.com/gke-accelerator-count": str(hw.gpus_per_node),
                "cloud.google.com/gke-spot": "true",
                "cloud.google.com/compute-class": "Performance",
            }
        )
    return selector


def _one_worker_per_node(cluster_name: str) -> dict[str, Any]:
    """Required anti-affinity: each worker owns a whole node's GPUs and NICs."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            "ray.io/cluster": cluster_name,
                            "ray.io/group": WORKER_GROUP,
                        }
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def _interfaces_annotation(networks: Sequence[str]) -> str:
    """`networking.gke.io/interfaces`: eth0 on the default network, then eth1.. in NIC order."""
    names = ["default", *networks]
    return json.dumps(
        [{"interfaceName": f"eth{i}", "network": network} for i, network in enumerate(names)]
    )


def _network_annotations(networks: Sequence[str]) -> dict[str, str]:
    return {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": _interfaces_annotation(networks),
    }


def _resource_claims(args: VerlRayClusterArgs) -> list[dict[str, Any]]:
    """One claim per RDMA NIC of the node, then the ComputeDomain's IMEX channel."""
    nics = [
        {"name": f"rdma-nic-{i}", "resourceClaimTemplateName": args.rdma_claim_template}
        for i in range(args.profile.rdma_nics)
    ]
    channel = {
        "name": COMPUTE_DOMAIN_CLAIM,
        "resourceClaimTemplateName": args.compute_domain_claim_template,
    }
    return [*nics, channel]


# gcsfuse sidecar limits, per cluster mode and Ray role. On Standard, "0" leaves the sidecar
# unbounded so it can use the node's local SSD for the unlimited file cache and never OOMs on
# a 66 GB model read (gcs-fuse-csi-driver #314, #372); Autopilot refuses "0", so there the
# limits are explicit: at most 2 CPU and 14 GiB on GPU nodes (the driver's documented Autopilot
# cap), and room for the model in the file cache on workers. The head reads no model.
_SIDECAR_LIMITS: dict[tuple[ClusterMode, str], tuple[str, str, str]] = {
    (ClusterMode.STANDARD, "head"): ("0", "0", "0"),
    (ClusterMode.STANDARD, "worker"): ("0", "0", "0"),
    (ClusterMode.AUTOPILOT, "head"): ("1", "4Gi", "10Gi"),
    (ClusterMode.AUTOPILOT, "worker"): ("2", "14Gi", "200Gi"),
}


def _gcsfuse_annotations(args: VerlRayClusterArgs, role: str) -> dict[str, str]:
    cpu, memory, storage = _SIDECAR_LIMITS[(args.mode, role)]
    return {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": cpu,
        "gke-gcsfuse/memory-limit": memory,
        "gke-gcsfuse/ephemeral-storage-limit": storage,
    }


def render_pod_monitoring(args: VerlRayClusterArgs) -> dict[str, Any]:
    """Managed Prometheus scrapes Ray's metrics port on every pod of the RayCluster.

    The add-on's `ray_cluster_monitoring_config` does this on A4 / A3 Ultra; A4X runs without
    the add-on. PodMonitoring v1 (GoogleCloudPlatform/prometheus-engine
    charts/operator/crds/monitoring.googleapis.com_podmonitorings.yaml): `endpoints[].port`
    takes a number; KubeRay starts every Ray node with `--metrics-export-port=8080`.
    """
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {"name": f"{args.cluster_name}-metrics", "namespace": args.namespace},
        "spec": {
            "selector": {"matchLabels": {"ray.io/cluster": args.cluster_name}},
            "endpoints": [{"port": METRICS_PORT, "interval": "30s"}],
        },
    }


# --- The component --------------------------------------------------------------------------


class VerlRayCluster(pulumi.ComponentResource):
    """The RayCluster, the NetworkPolicy around its head and, on request, its operator."""

    ray_cluster: k8s.apiextensions.CustomResource
    head_policy: k8s.networking.v1.NetworkPolicy
    operator_release: k8s.helm.v3.Release | None
    pod_monitoring: k8s.apiextensions.CustomResource | None  # without the add-on only
    name: pulumi.Output[str]
    head_service: pulumi.Output[str]
    dashboard_port: int
    worker_replicas: int
    worker_group: str
    cluster_name: str  # the RayCluster's name, known before it exists (for RBAC rules)

    def __init__(
        self, name: str, args: VerlRayClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:VerlRayCluster", name, None, opts)
        child = child_options(self, opts)
        self.operator_release = (
            _operator_release(name, args.namespace, child)
            if args.operator is RayOperator.HELM
            else None
        )
        cluster_opts = child_options(
            self,
            opts,
            depends_on=[
                *args.pod_prerequisites,
                *([self.operator_release] if self.operator_release else []),
            ],
        )
        rendered = render_ray_cluster(args)
        self.ray_cluster = k8s.apiextensions.CustomResource(
            f"{name}-ray-cluster",
            api_version=rendered["apiVersion"],
            kind=rendered["kind"],
            metadata=k8s.meta.v1.ObjectMetaArgs(**rendered["metadata"]),
            spec=rendered["spec"],
            opts=cluster_opts,
        )
        self.head_policy = _head_policy(name, args, child)
        self.pod_monitoring = _pod_monitoring(name, args, child) if args.without_addon else None

        # Outputs that resolve only once the RayCluster is ready, so that whatever reads them
        # (the job submission) waits for it.
        ready = self.ray_cluster.id
        self.name = ready.apply(lambda _: args.cluster_name)
        self.head_service = ready.apply(lambda _: f"{args.cluster_name}-head-svc")
        self.dashboard_port = DASHBOARD_PORT
        self.worker_replicas = args.nodes
        self.worker_group = WORKER_GROUP
        self.cluster_name = args.cluster_name
        self.register_outputs(
            {
                "name": self.name,
                "headService": self.head_service,
                "dashboardPort": self.dashboard_port,
                "workerReplicas": self.worker_replicas,
                "workerGroup": self.worker_group,
            }
        )


def _pod_monitoring(
    name: str, args: VerlRayClusterArgs, opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    rendered = render_pod_monitoring(args)
    return k8s.apiextensions.CustomResource(
        f"{name}-pod-monitoring",
        api_version=rendered["apiVersion"],
        kind=rendered["kind"],
        metadata=k8s.meta.v1.ObjectMetaArgs(**rendered["metadata"]),
        spec=rendered["spec"],
        opts=opts,
    )


def operator_values(namespace: str) -> dict[str, Any]:
    """kuberay-operator chart values: RBAC and watch limited to the workload namespace."""
    return {"singleNamespaceInstall": True, "watchNamespace": [namespace]}


def _operator_release(
    name: str, namespace: str, opts: pulumi.ResourceOptions
) -> k8s.helm.v3.Release:
    return pinned_release(
        f"{name}-kuberay-operator", "kuberay-operator", pins.KUBERAY_OPERATOR, namespace,
        operator_values(namespace), opts,
    )


def _head_policy(
    name: str, args: VerlRayClusterArgs, opts: pulumi.ResourceOptions
) -> k8s.networking.v1.NetworkPolicy:
    """Ingress to the head: its public ports from the namespace, everything from its own cluster.

    Ray's own traffic to the head (raylet, object manager, worker ports) uses ports Ray picks at
    start, so the cluster's pods are admitted on every port, as KubeRay's own network policies
    do. Other pods of the namespace (the job submitter) reach only the three head ports; the
    metrics port is open to Managed Prometheus, which the GKE Ray add-on's monitoring uses.
    Nothing outside the namespace reaches the dashboard: use `kubectl port-forward`.
    """
    np = k8s.networking.v1
    selector = k8s.meta.v1.LabelSelectorArgs
    head_ports = [np.NetworkPolicyPortArgs(port=p, protocol="TCP") for p in HEAD_PORTS.values()]
    metrics_port = [np.NetworkPolicyPortArgs(port=METRICS_PORT, protocol="TCP")]
    own_cluster = selector(match_labels={"ray.io/cluster": args.cluster_name})
    same_namespace = selector()  # a pod selector without a namespace selector: this namespace
    managed_prometheus = selector(
        match_labels={"kubernetes.io/metadata.name": MANAGED_PROMETHEUS_NAMESPACE}
    )
    return np.NetworkPolicy(
        f"{name}-head-policy",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=f"{args.cluster_name}-head", namespace=args.namespace
        ),
        spec=np.NetworkPolicySpecArgs(
            pod_selector=selector(
                match_labels={"ray.io/cluster": args.cluster_name, "ray.io/node-type": "head"}
            ),
            policy_types=["Ingress"],
            ingress=[
                np.NetworkPolicyIngressRuleArgs(
                    from_=[np.NetworkPolicyPeerArgs(pod_selector=own_cluster)]
                ),
                np.NetworkPolicyIngressRuleArgs(
                    from_=[np.NetworkPolicyPeerArgs(pod_selector=same_namespace)],
                    ports=head_ports,
                ),
                np.NetworkPolicyIngressRuleArgs(
                    from_=[np.NetworkPolicyPeerArgs(namespace_selector=managed_prometheus)],
                    ports=metrics_port,
                ),
            ],
        ),
        opts=opts,
    )
