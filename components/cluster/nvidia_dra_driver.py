"""NvidiaDraDriver: the DRA side of A4X, the NVIDIA driver and the claims Ray workers make.

Creates the driver's namespace, the ResourceQuota that lets its system-critical pods run there,
the pinned `nvidia-dra-driver-gpu` Helm release (ComputeDomains only; GPUs stay with GKE's
device plugin), the ComputeDomain `verl-compute-domain` that spans the GPU nodes over
multi-node NVLink (IMEX), and the ResourceClaimTemplate `verl-rdma-nic` for one RDMA NIC of
DRANET's `mrdma.google.com` device class. The RayCluster's workers claim four of those NICs
and the ComputeDomain's channel; this component hands it the two template names.

Why the claims live here and not with the RayCluster: both name devices that only DRA drivers
publish (the ComputeDomain kind is a CRD of this chart; the NIC class is DRANET's), both are
A4X-only, and the RayCluster only references them by name. It does not install the KubeRay
operator (VerlRayCluster does, next to the RayCluster it reconciles) and does not enable DRANET
or the DRA APIs (the node pool and the cluster do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.facts import pins
from components.facts.hardware import HardwareProfile, NodeNetworking
from components.cluster.helm import pinned_release
from components.options import child_options

NAMESPACE = "nvidia-dra-driver-gpu"
RELEASE_NAME = "nvidia-dra-driver-gpu"
QUOTA_NAME = "nvidia-dra-driver-gpu-quota"
COMPUTE_DOMAIN = "verl-compute-domain"
# Created by the driver's controller from the ComputeDomain, not by this program.
CHANNEL_CLAIM_TEMPLATE = "verl-compute-domain-channel"
RDMA_CLAIM_TEMPLATE = "verl-rdma-nic"
RDMA_DEVICE_CLASS = "mrdma.google.com"  # DRANET's class: one device per RDMA NIC
# The priority classes of the driver's pods, which GKE admits outside kube-system only under a
# ResourceQuota that names them.
CRITICAL_PRIORITY_CLASSES = ["system-node-critical", "system-cluster-critical"]


@dataclass(frozen=True)
class NvidiaDraDriverArgs:
    """profile: the A4X hardware row (its GPU type places the kubelet plugin).
    nodes: GPU nodes the ComputeDomain spans, 1..max_nodes.
    workload_namespace: where the ComputeDomain and the claim templates live (the RayCluster's
        namespace: claim templates are namespaced).
    """

    profile: HardwareProfile
    nodes: int
    workload_namespace: str

    def __post_init__(self) -> None:
        found = problems(self)
        if found:
            lines = "\n".join(f"  - {p}" for p in found)
            raise ValueError(f"NvidiaDraDriverArgs has {len(found)} problem(s):\n{lines}")


def problems(args: NvidiaDraDriverArgs) -> list[str]:
    hw = args.profile
    found = []
    if hw.networking is not NodeNetworking.DRANET:
        found.append(
            f"profile = {hw.target.value} has no DRA NICs or multi-node NVLink: create "
            "NvidiaDraDriver for a4x only"
        )
    if problem := hw.nodes_problem("nodes", args.nodes):
        found.append(problem)
    if not args.workload_namespace:
        found.append("workload_namespace is empty: pass the RayCluster's namespace")
    return found


def quota_pods(nodes: int) -> int:
    """The driver's pods: one controller, and per node a kubelet plugin and an IMEX daemon."""
    return 2 * nodes + 1


def driver_values(profile: HardwareProfile) -> dict[str, Any]:
    """Helm values: the tutorial's, plus the node affinities GKE needs.

    The tutorial sets the driver root, turns GPU allocation off and tolerates the GPU and arm64
    taints. The chart's default affinities match no GKE node (the controller wants a
    control-plane node, the kubelet plugin NFD labels), so, as Google's A4X guide and Cluster
    Toolkit's kubectl-apply module do, the controller goes to a node without GPUs and the plugin
    to the GB200 nodes.
    """
    return {
        "nvidiaDriverRoot": "/home/kubernetes/bin/nvidia",
        "resources": {"gpus": {"enabled": False}},
        "controller": {
            "affinity": _required_node_affinity(
                [{"key": "nvidia.com/gpu", "operator": "DoesNotExist"}]
            )
        },
        "kubeletPlugin": {
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists"},
                {"key": "kubernetes.io/arch", "operator": "Exists"},
            ],
            "affinity": _required_node_affinity(
                [
                    {
                        "key": "cloud.google.com/gke-accelerator",
                        "operator": "In",
                        "values": [profile.gpu_type],
                    },
                    {"key": "kubernetes.io/arch", "operator": "In", "values": [profile.arch.value]},
                ]
            ),
        },
    }


def _required_node_affinity(expressions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def render_compute_domain(namespace: str, nodes: int) -> dict[str, Any]:
    """The ComputeDomain: one IMEX domain over `nodes` GPU nodes, with its channel template."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": COMPUTE_DOMAIN, "namespace": namespace},
        "spec": {
            "numNodes": nodes,
            "channel": {"resourceClaimTemplate": {"name": CHANNEL_CLAIM_TEMPLATE}},
        },
    }


class NvidiaDraDriver(pulumi.ComponentResource):
    """The NVIDIA DRA driver for ComputeDomains, the ComputeDomain and the RDMA NIC template."""

    namespace: k8s.core.v1.Namespace
    quota: k8s.core.v1.ResourceQuota
    release: k8s.helm.v3.Release
    compute_domain: k8s.apiextensions.CustomResource
    rdma_template: k8s.resource.v1.ResourceClaimTemplate
    namespace_name: pulumi.Output[str]
    release_name: str
    release_version: str
    rdma_claim_template: pulumi.Output[str]
    compute_domain_claim_template: pulumi.Output[str]

    def __init__(
        self, name: str, args: NvidiaDraDriverArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:NvidiaDraDriver", name, None, opts)
        child = child_options(self, opts)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE), opts=child
        )
        self.namespace_name = self.namespace.metadata.name
        self.quota = _quota(name, self.namespace_name, args.nodes, child)
        # The quota first: without it GKE rejects the driver's system-node-critical pods.
        self.release = _release(
            name,
            args.profile,
            self.namespace_name,
            child_options(self, opts, depends_on=[self.quota]),
        )
        # The ComputeDomain kind is a CRD of the chart.
        self.compute_domain = _compute_domain(
            name, args, child_options(self, opts, depends_on=[self.release])
        )
        self.rdma_template = _rdma_template(name, args.workload_namespace, child)

        self.release_name = RELEASE_NAME
        self.release_version = pins.NVIDIA_DRA_DRIVER.version
        self.rdma_claim_template = self.rdma_template.metadata.name
        # The channel template appears once the driver reconciles the ComputeDomain; tying the
        # name to the ComputeDomain makes the RayCluster wait for it.
        self.compute_domain_claim_template = self.compute_domain.id.apply(
            lambda _: CHANNEL_CLAIM_TEMPLATE
        )
        self.register_outputs(
            {
                "namespace": self.namespace_name,
                "releaseName": self.release_name,
                "releaseVersion": self.release_version,
                "rdmaClaimTemplate": self.rdma_claim_template,
                "computeDomainClaimTemplate": self.compute_domain_claim_template,
            }
        )


def _quota(
    name: str, namespace: pulumi.Input[str], nodes: int, opts: pulumi.ResourceOptions
) -> k8s.core.v1.ResourceQuota:
    return k8s.core.v1.ResourceQuota(
        f"{name}-quota",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=QUOTA_NAME, namespace=namespace),
        spec=k8s.core.v1.ResourceQuotaSpecArgs(
            hard={"pods": str(quota_pods(nodes))},
            scope_selector=k8s.core.v1.ScopeSelectorArgs(
                match_expressions=[
                    k8s.core.v1.ScopedResourceSelectorRequirementArgs(
                        operator="In",
                        scope_name="PriorityClass",
                        values=CRITICAL_PRIORITY_CLASSES,
                    )
                ]
            ),
        ),
        opts=opts,
    )


def _release(
    name: str,
    profile: HardwareProfile,
    namespace: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v3.Release:
    return pinned_release(
        f"{name}-release", RELEASE_NAME, pins.NVIDIA_DRA_DRIVER, namespace,
        driver_values(profile), opts,
    )


def _compute_domain(
    name: str, args: NvidiaDraDriverArgs, opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    # No waitFor: the domain turns Ready only once workload pods claim its channel, so waiting
    # here would wait for the RayCluster that waits for this.
    rendered = render_compute_domain(args.workload_namespace, args.nodes)
    return k8s.apiextensions.CustomResource(
        f"{name}-compute-domain",
        api_version=rendered["apiVersion"],
        kind=rendered["kind"],
        metadata=k8s.meta.v1.ObjectMetaArgs(**rendered["metadata"]),
        spec=rendered["spec"],
        opts=opts,
    )


def _rdma_template(
    name: str, namespace: str, opts: pulumi.ResourceOptions
) -> k8s.resource.v1.ResourceClaimTemplate:
    """One RDMA NIC per claim; a worker makes one claim per NIC of its node."""
    return k8s.resource.v1.ResourceClaimTemplate(
        f"{name}-rdma-nic",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=RDMA_CLAIM_TEMPLATE, namespace=namespace),
        spec=k8s.resource.v1.ResourceClaimTemplateSpecArgs(
            spec=k8s.resource.v1.ResourceClaimSpecArgs(
                devices=k8s.resource.v1.DeviceClaimArgs(
                    requests=[
                        k8s.resource.v1.DeviceRequestArgs(
                            name="nic",
                            exactly=k8s.resource.v1.ExactDeviceRequestArgs(
                                device_class_name=RDMA_DEVICE_CLASS,
                                allocation_mode="ExactCount",
                                count=1,
                            ),
                        )
                    ]
                )
            )
        ),
        opts=opts,
    )
