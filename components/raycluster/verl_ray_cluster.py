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
templates: those are passed in (GcsFuseStorage, RdmaNetworks, NvidiaDraDriver). What it is built
from, and the checks of that, are in components/raycluster/ray_cluster_args.py; the RayCluster and the
PodMonitoring as plain data in components/raycluster/ray_cluster_spec.py.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster.helm import pinned_release
from components.facts import pins
from components.facts.layout import DASHBOARD_PORT
from components.options import child_options
from components.raycluster.ray_cluster_args import RayOperator, VerlRayClusterArgs
from components.raycluster.ray_cluster_spec import (
    HEAD_PORTS, METRICS_PORT, WORKER_GROUP, render_pod_monitoring, render_ray_cluster,
)

# Where Google Managed Prometheus runs its collectors; the GKE Ray add-on's monitoring scrapes
# the Ray pods from there.
MANAGED_PROMETHEUS_NAMESPACE = "gmp-system"


class VerlRayCluster(pulumi.ComponentResource):
    """The RayCluster, the NetworkPolicy around its head and, on request, its operator."""

    ray_cluster: k8s.apiextensions.CustomResource
    head_policy: k8s.networking.v1.NetworkPolicy
    head_budget: k8s.policy.v1.PodDisruptionBudget
    operator_release: k8s.helm.v3.Release | None
    pod_monitoring: k8s.apiextensions.CustomResource | None  # without the add-on only
    name: pulumi.Output[str]
    head_service: pulumi.Output[str]
    # Changes whenever the Ray pods are recreated: the run's `ray_pods` input, which replaces it.
    pods_digest: pulumi.Output[str]
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
            **_recreation(args),
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
        self.head_budget = _head_budget(name, args, child)
        self.pod_monitoring = _pod_monitoring(name, args, child) if args.without_addon else None

        # Outputs that resolve only once the RayCluster is ready, so that whatever reads them
        # (the job submission) waits for it.
        ready = self.ray_cluster.id
        self.name = ready.apply(lambda _: args.cluster_name)
        self.head_service = ready.apply(lambda _: f"{args.cluster_name}-head-svc")
        # A digest of the spec the Ray pods are made from; it also depends on the RayCluster, so
        # that a replacement of it (delete first) finds the run unknown and replaces it first
        # (the engine's dependent replacement).
        self.pods_digest = pulumi.Output.all(ready, rendered["spec"]).apply(
            lambda values: spec_digest(values[1])
        )
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


def spec_digest(spec: Any) -> str:
    """16 hex digits of the RayCluster's spec without the worker counts, as KubeRay's own
    upgrade hash leaves them out (utils/util.go:645-668 at v1.7.0)."""
    counted = json.loads(json.dumps(spec, sort_keys=True, default=str))
    for group in counted.get("workerGroupSpecs") or []:
        for key in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(key, None)
    counted.pop("upgradeStrategy", None)
    text = json.dumps(counted, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _recreation(args: VerlRayClusterArgs) -> dict[str, Any]:
    """How a changed spec reaches the running pods. KubeRay patches the CR and keeps the pods
    unless `spec.upgradeStrategy` is Recreate (v1.6+), which the pinned chart (A4X) has
    (ray_cluster_spec.py `_upgrade_strategy`). The GKE Ray add-on's KubeRay version is unknown,
    so there a changed spec replaces the RayCluster, delete first (its name is fixed): the
    operator deletes the old pods with it and creates new ones from the new spec. The run is
    replaced with it either way (its `ray_pods` input, grpo_job.py). The supervisor's
    `spec.suspend` is not among the sent fields, so it changes nothing here."""
    if args.without_addon:
        return {}
    return {"replace_on_changes": ["spec"], "delete_before_replace": True}


def _head_budget(
    name: str, args: VerlRayClusterArgs, opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget:
    """No voluntary eviction of the Ray head: a drain (node upgrade, auto-repair, the cluster
    autoscaler consolidating the system pool) waits instead of taking the run's driver and GCS
    with it. A head that is not ready may still be evicted (`unhealthyPodEvictionPolicy:
    AlwaysAllow`, GA in Kubernetes 1.31), so a broken head never holds a node. What a budget
    does not stop (node pressure, spot reclaims, GKE's time limits on upgrades) is in
    docs/operations.md, "Node upgrades and repairs"."""
    selector = {"ray.io/cluster": args.cluster_name, "ray.io/node-type": "head"}
    return k8s.policy.v1.PodDisruptionBudget(
        f"{name}-head-budget",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=f"{args.cluster_name}-head", namespace=args.namespace
        ),
        spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
            max_unavailable=0,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
            unhealthy_pod_eviction_policy="AlwaysAllow",
        ),
        opts=opts,
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
