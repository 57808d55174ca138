"""Which input changes make the provider replace a resource instead of updating it in place.

Read from the providers' own source, not guessed:

- Google Cloud: `ForceNew: true` fields of terraform-provider-google (which pulumi-gcp bridges),
  commit e03b7622a2 (main, 2026-08-21): google/services/container/resource_container_cluster.go,
  resource_container_node_pool.go and node_config.go (schemaNodeConfig), google/services/compute/
  resource_compute_network.go, _subnetwork.go, _firewall.go, _resource_policy.go, _router.go,
  _router_nat.go, google/services/storage/resource_storage_bucket.go and iam_storage_bucket.go,
  google/services/resourcemanager/resource_google_service_account.go, google/services/
  artifactregistry/resource_artifact_registry_repository.go, google/services/logging/
  resource_logging_metric.go, google/services/monitoring/resource_monitoring_alert_policy.go and
  _dashboard.go, google/tpgiamresource/resource_iam_member.go. Paths are Terraform's (snake_case, singular
  block names); `matches` maps the plan's camelCase, pluralised Pulumi names onto them.
  Not listed: node_config itself, whose schema is ForceNew as a block (adding or removing it)
  while GKE updates most of its fields in place (labels, taints, resource labels ...).
- Kubernetes: pulumi-kubernetes provider/pkg/provider/diff.go (`forceNew`, commit cafe8c4ac4),
  with the provider's defaults (enableSecretMutable and enableConfigMapMutable off: a Secret's or
  ConfigMap's data is replaced, not patched). metadata.name and .namespace replace every kind.
- This program's dynamic providers are not listed: tools/plan_report.py asks their own `diff()`,
  unpickled from the plan (a hand-kept copy of their rules would drift).
"""

from __future__ import annotations

import re

_NODE_CONFIG = (
    "advanced_machine_features", "boot_disk_kms_key", "confidential_nodes.confidential_instance_type",
    "enable_confidential_storage", "ephemeral_storage_local_ssd_config", "flex_start",
    "guest_accelerator", "host_maintenance_policy", "local_nvme_ssd_block_config", "local_ssd_count",
    "local_ssd_encryption_mode", "max_run_duration", "metadata", "min_cpu_platform", "node_group",
    "oauth_scopes", "preemptible", "reservation_affinity", "sandbox_config", "secondary_boot_disks",
    "service_account", "shielded_instance_config", "sole_tenant_config", "spot",
)

GOOGLE: dict[str, tuple[str, ...]] = {
    "gcp:container/cluster:Cluster": (
        "cluster_autoscaling.auto_provisioning_defaults.boot_disk_kms_key", "cluster_ipv4_cidr",
        "confidential_nodes", "datapath_provider", "dataplane_optimization_mode",
        "default_max_pods_per_node", "description", "enable_autopilot", "enable_kubernetes_alpha",
        "enable_tpu", "initial_node_count", "ip_allocation_policy", "location",
        "master_auth.client_certificate_config", "name", "network", "networking_mode", "node_pool",
        "private_cluster_config.master_ipv4_cidr_block",
        "private_cluster_config.private_endpoint_subnetwork", "project", "subnetwork",
        "user_managed_keys_config",
    ) + tuple(f"node_config.{f}" for f in _NODE_CONFIG),
    "gcp:container/nodePool:NodePool": (
        "cluster", "location", "project", "name", "name_prefix", "initial_node_count",
        "max_pods_per_node", "network_config.accelerator_network_profile",
        "network_config.additional_node_network_configs", "network_config.additional_pod_network_configs",
        "network_config.create_pod_range", "network_config.pod_cidr_overprovision_config",
        "network_config.pod_ipv4_cidr_block", "network_config.pod_range", "network_config.subnetwork",
        "placement_policy", "queued_provisioning",
    ) + tuple(f"node_config.{f}" for f in _NODE_CONFIG),
    "gcp:compute/network:Network": (
        "auto_create_subnetworks", "description", "internal_ipv6_range", "name", "network_profile",
        "params", "project",
    ),
    "gcp:compute/subnetwork:Subnetwork": (
        "description", "external_ipv6_prefix", "internal_ipv6_prefix", "name", "network", "params",
        "project", "region", "reserved_internal_range", "resolve_subnet_mask",
    ),
    "gcp:compute/firewall:Firewall": ("direction", "name", "params", "project"),
    # `name` lost ForceNew in v5.38 (components/options.py): the program's replaceOnChanges says it.
    "gcp:compute/resourcePolicy:ResourcePolicy": (
        "disk_consistency_group_policy.enabled", "group_placement_policy.gpu_topology", "project",
        "region", "workload_policy",
    ),
    "gcp:storage/bucket:Bucket": (
        "custom_placement_config.data_locations", "enable_object_retention", "hierarchical_namespace",
        "location", "name", "project",
    ),
    "gcp:compute/router:Router": (
        "encrypted_interconnect_router", "name", "ncc_gateway", "network", "params", "project", "region",
    ),
    "gcp:compute/routerNat:RouterNat": (
        "endpoint_types", "initial_nat_ips", "name", "project", "region", "router", "type",
    ),
    "gcp:serviceaccount/account:Account": ("account_id", "project"),
    "gcp:artifactregistry/repository:Repository": (
        "format", "kms_key_name", "location", "maven_config", "mode", "project",
        "remote_repository_config", "repository_id",
    ),
    # `name` (the metric's id) is updatable in the provider: the program's replaceOnChanges says it.
    "gcp:logging/metric:Metric": ("project",),
    "gcp:monitoring/alertPolicy:AlertPolicy": ("project",),
    "gcp:monitoring/dashboard:Dashboard": ("project",),
    "gcp:storage/bucketIAMMember:BucketIAMMember": ("bucket", "role", "member", "condition"),
    "gcp:projects/iAMMember:IAMMember": ("project", "role", "member", "condition"),
}

_K8S_POD = (
    "affinity", "automountServiceAccountToken", "nodeName", "nodeSelector", "restartPolicy",
    "securityContext", "serviceAccountName", "terminationGracePeriodSeconds", "volumes",
    "containers", "initContainers",
)
KUBERNETES: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:Secret": ("type", "data", "stringData"),
    "kubernetes:core/v1:ConfigMap": ("data", "binaryData"),
    "kubernetes:core/v1:Service": ("spec.clusterIP",),
    "kubernetes:core/v1:PersistentVolume": ("spec.csi", "spec.hostPath", "spec.nfs", "spec.local"),
    "kubernetes:core/v1:PersistentVolumeClaim": (
        "spec.accessModes", "spec.selector", "spec.storageClassName", "spec.volumeName",
    ),
    "kubernetes:core/v1:Pod": tuple(f"spec.{f}" for f in _K8S_POD),
    "kubernetes:batch/v1:Job": ("spec.completions", "spec.parallelism", "spec.selector", "spec.template"),
    "kubernetes:apps/v1:Deployment": ("spec.selector",),
    "kubernetes:apps/v1:DaemonSet": ("spec.selector",),
    "kubernetes:apps/v1:StatefulSet": (
        "spec.podManagementPolicy", "spec.revisionHistoryLimit", "spec.selector", "spec.serviceName",
        "spec.volumeClaimTemplates",
    ),
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": ("roleRef",),
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": ("roleRef",),
    "kubernetes:storage.k8s.io/v1:StorageClass": ("parameters", "provisioner"),
}
KUBERNETES_ALWAYS = ("metadata.name", "metadata.namespace")


def _snake(segment: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", segment).lower()


def _segments(path: str) -> list[str]:
    """`nodeConfig.guestAccelerators[0].count` -> ['nodeConfig', 'guestAccelerators', 'count']."""
    return [s for s in re.sub(r"\[\d+\]", "", path).split(".") if s]


def _same_field(plan_segment: str, table_segment: str) -> bool:
    """Pulumi pluralises list blocks (guestAccelerators <- guest_accelerator, allows <- allow)."""
    mine = _snake(plan_segment) if "_" in table_segment or table_segment.islower() else plan_segment
    return mine in (table_segment, table_segment + "s") or mine + "s" == table_segment


def matches(plan_path: str, table_path: str) -> bool:
    """True when the plan's changed input path lies at or under a table path."""
    mine, theirs = _segments(plan_path), table_path.split(".")
    return len(mine) >= len(theirs) and all(_same_field(a, b) for a, b in zip(mine, theirs))


def replacing_field(resource_type: str, plan_path: str) -> str | None:
    """The provider's field that makes a change at `plan_path` a replacement, or None."""
    if resource_type.startswith("kubernetes:"):
        table = KUBERNETES_ALWAYS + KUBERNETES.get(resource_type, ())
    else:
        table = GOOGLE.get(resource_type, ())
    return next((field for field in table if matches(plan_path, field)), None)


def known(resource_type: str) -> bool:
    """Whether the table covers this type (else a change is shown as update, replace unknown)."""
    return resource_type in GOOGLE or (
        resource_type.startswith("kubernetes:") and not resource_type.startswith("kubernetes:helm")
    )
