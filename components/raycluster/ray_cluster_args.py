"""What a VerlRayCluster is built from (VerlRayClusterArgs) and every check of it.

Construction of the args rejects inconsistent input with one message per problem, each naming
the field, the value and the fix, before any resource exists. The RayCluster rendered from them
is in components/raycluster/ray_cluster_spec.py, the component in components/raycluster/verl_ray_cluster.py.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi

from components.facts import pins
from components.facts.hardware import PROFILES, Arch, HardwareProfile, NodeNetworking
from components.schema.choices import Capacity, ClusterMode
from components.forms.image_refs import floating_tag



def cluster_name(profile: HardwareProfile) -> str:
    """The RayCluster's name, after the row's GPU: b200-, h200-, gb200-ray-cluster (the tutorial
    names the A3 Ultra cluster b200-ray-cluster too). A name is a contract: a changed GPU name
    renames, and so replaces, every deployed RayCluster of the target."""
    return f"{profile.gpu.name.lower()}-ray-cluster"


CLUSTER_NAMES = {target: cluster_name(profile) for target, profile in PROFILES.items()}


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
    capacity: where the GPU nodes come from (`verl-gke:provisioning`); default reservation.
        Sets how long `pulumi up` waits for the RayCluster to be ready
        (ray_cluster_spec.ready_timeout_seconds): flex-start's wait for capacity happens there.
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
    # components/run/trackers.py); default: none.
    tracker_secret: pulumi.Input[str] | None = None
    pod_prerequisites: Sequence[pulumi.Resource] = ()
    capacity: Capacity = Capacity.RESERVATION

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
        return cluster_name(self.profile)

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
    # The same rule as verl-gke:job.image's (components/forms/image_refs.py).
    if floating_tag(args.image_ref):
        found.append(
            f"image = {args.image_ref!r} has a floating tag: pin a tag that names one build "
            "(e.g. verlai/verl:vllm023.dev1) or a digest (@sha256:...)"
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
