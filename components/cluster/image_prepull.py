"""ImagePrepull: a DaemonSet that starts each node's pull of the verl image when the node joins.

Without it a node pulls the ~30 GB verl image only once a Ray pod is scheduled there, and the
RayCluster is created only after the whole GPU pool operation has returned (its
`pod_prerequisites`): on a fresh `up` the GPU nodes, and on A4 / A3 Ultra the head's system
pool, sit idle for minutes before their pull starts. This DaemonSet exists from the moment the
Kubernetes provider does (right after the system pool, components/cluster/gke_cluster.py), so
each node starts the pull when it registers: under the GPU driver's install and the tail of the
pool operation ("can start running even before the GPU driver is installed",
GoogleCloudPlatform/ai-on-gke best-practices/startup-latency.md:179 @8676d66d; ray-project/ray
doc/source/cluster/kubernetes/user-guides/reduce-image-pull-latency.md, "Preload images on every
node using a Daemonset"). Its container is the RayCluster's own image reference, so the pull it
starts is the one the Ray pod needs, never a second copy.

Where: the GPU nodes (by accelerator type) and, on A4 / A3 Ultra, the system pool, where the
Ray head runs (on A4X the head shares a GB200 node, so the GPU nodes cover it; the system pool is
amd64 and the A4X image arm64 only). On A4 / A3 Ultra the system pool's pull, ~10 minutes before
the GPU nodes exist, is also the first pull through the stack's Docker Hub mirror: the remote
repository fetches every layer from Docker Hub then, so the GPU nodes read them from the region
(components/registry/image_mirror.py says why Artifact Registry's prewarm is not used instead).

It asks for almost nothing (PREPULL_RESOURCES: the A4 / A3 Ultra workers request 220 of 224
vCPUs, components/facts/hardware.py), tolerates the GPU pool's taint (gpu_node_pool.GPU_TAINT)
and GKE's arm64 taint, and carries `pulumi.com/skipAwait`: `pulumi up` never waits for a pull,
and nothing waits for this DaemonSet, so a slow or failed pull can never fail `up` (the Ray pod
then pulls as it always did).

Not on Autopilot: there a node exists only once a pod asks for it, so the Ray pod that brought
the node starts the same pull at the same moment; a DaemonSet would add a pod to every node
(Autopilot bills DaemonSet pods on general-purpose nodes) and win nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.cluster.gke_cluster import SYSTEM_POOL
from components.cluster.gpu_node_pool import GPU_TAINT
from components.facts.hardware import Arch, HardwareProfile
from components.options import child_options

# The DaemonSet's name, in the plan and in the cluster: tools/critical_path.py finds it by it.
PREPULL_NAME = "verl-image-prepull"
LABELS = {"app.kubernetes.io/name": PREPULL_NAME, "app.kubernetes.io/part-of": "verl-gke"}
# `sleep` is all the container does; requests = limits, so the pod never takes what a Ray pod
# was sized for and its own QoS is Guaranteed (the last to be evicted under node pressure).
PREPULL_RESOURCES = {"cpu": "5m", "memory": "16Mi", "ephemeral-storage": "16Mi"}
# GKE taints arm64 nodes kubernetes.io/arch=arm64:NoSchedule (GKE, "Prepare an Arm workload for
# deployment"); the Ray pods tolerate it the same way (components/raycluster/ray_cluster_spec.py).
ARM64_TAINT_KEY = "kubernetes.io/arch"
# Node label GKE puts on a node of a GPU pool, valued with the accelerator type.
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"


@dataclass(frozen=True)
class ImagePrepullArgs:
    """profile: the hardware row (GPU type and architecture of the GPU nodes).
    image: the verl image exactly as the RayCluster names it (through the stack's mirror).
    namespace: where the DaemonSet lives (the workload namespace).
    head_on_system_pool: A4 / A3 Ultra on Standard: the head runs on the system pool, which the
        DaemonSet then covers too. False on A4X (the head is on a GB200 node).
    """

    profile: HardwareProfile
    image: str
    namespace: str
    head_on_system_pool: bool


class ImagePrepull(pulumi.ComponentResource):
    daemon_set: k8s.apps.v1.DaemonSet

    def __init__(
        self, name: str, args: ImagePrepullArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """`opts` must carry the cluster's Kubernetes provider. Name the component `verl-image`
        so that its DaemonSet is `verl-image-prepull` (PREPULL_NAME) in the plan too."""
        super().__init__("verl-gke:index:ImagePrepull", name, None, opts)
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-prepull",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=PREPULL_NAME,
                namespace=args.namespace,
                labels=LABELS,
                # Created, not awaited: a DaemonSet's await waits for every pod to be ready,
                # i.e. for every pull; nothing in `up` should wait for those.
                annotations={"pulumi.com/skipAwait": "true"},
            ),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=LABELS),
                # A new image starts its pull on every node at once, not one node at a time.
                update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=k8s.apps.v1.RollingUpdateDaemonSetArgs(max_unavailable="100%"),
                ),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=LABELS),
                    spec=_pod_spec(args),
                ),
            ),
            opts=child_options(self, opts),
        )
        self.name = self.daemon_set.metadata.name
        self.register_outputs({"name": self.name})


def node_terms(args: ImagePrepullArgs) -> list[k8s.core.v1.NodeSelectorTermArgs]:
    """The nodes that pull: GPU nodes of the profile's accelerator, and on A4 / A3 Ultra the
    system pool (the terms are ORed). Each term also names the image's architecture, so an
    image is never pulled onto a node that could not run it."""
    arch = k8s.core.v1.NodeSelectorRequirementArgs(
        key="kubernetes.io/arch", operator="In", values=[args.profile.arch.value]
    )
    gpu = k8s.core.v1.NodeSelectorRequirementArgs(
        key=ACCELERATOR_LABEL, operator="In", values=[args.profile.gpu_type]
    )
    terms = [k8s.core.v1.NodeSelectorTermArgs(match_expressions=[gpu, arch])]
    if args.head_on_system_pool:
        pool = k8s.core.v1.NodeSelectorRequirementArgs(
            key=NODEPOOL_LABEL, operator="In", values=[SYSTEM_POOL]
        )
        terms.append(k8s.core.v1.NodeSelectorTermArgs(match_expressions=[pool, arch]))
    return terms


def tolerations(profile: HardwareProfile) -> list[k8s.core.v1.TolerationArgs]:
    """The GPU pool's taint (gpu_node_pool.GPU_TAINT), and GKE's arm64 taint on A4X."""
    found = [
        k8s.core.v1.TolerationArgs(key=GPU_TAINT.key, operator="Exists", effect="NoSchedule")
    ]
    if profile.arch is Arch.ARM64:
        found.append(
            k8s.core.v1.TolerationArgs(key=ARM64_TAINT_KEY, operator="Exists", effect="NoSchedule")
        )
    return found


def _pod_spec(args: ImagePrepullArgs) -> k8s.core.v1.PodSpecArgs:
    return k8s.core.v1.PodSpecArgs(
        affinity=k8s.core.v1.AffinityArgs(
            node_affinity=k8s.core.v1.NodeAffinityArgs(
                required_during_scheduling_ignored_during_execution=(
                    k8s.core.v1.NodeSelectorArgs(node_selector_terms=node_terms(args))
                )
            )
        ),
        tolerations=tolerations(args.profile),
        automount_service_account_token=False,
        enable_service_links=False,
        # `sleep` ignores SIGTERM as PID 1: do not wait 30 s for it on every delete.
        termination_grace_period_seconds=1,
        containers=[
            k8s.core.v1.ContainerArgs(
                name="prepull",
                image=args.image,
                # Same reference as the Ray pods, same policy: the node keeps one copy.
                image_pull_policy="IfNotPresent",
                command=["sleep", "infinity"],
                resources=k8s.core.v1.ResourceRequirementsArgs(
                    requests=dict(PREPULL_RESOURCES), limits=dict(PREPULL_RESOURCES)
                ),
                security_context=k8s.core.v1.SecurityContextArgs(
                    allow_privilege_escalation=False,
                    read_only_root_filesystem=True,
                    run_as_non_root=True,
                    run_as_user=65534,  # nobody: `sleep` needs no user of the image's
                    capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
                ),
            )
        ],
    )
