"""GkeCluster: the GKE control plane (Standard or Autopilot), its system pool, and a provider.

Standard: Dataplane V2, workload identity, VPC-native, multi-networking, the Ray operator and
GCS FUSE CSI add-ons, and a separately managed CPU system pool (c2-standard-16, 1 to 5 nodes in
the GPU zone) for the Ray head and the staging job. Autopilot: multi-networking and the Ray
operator. Both get DCGM + Managed Prometheus metrics, system and workload logging, and a
maintenance exclusion that keeps GKE from upgrading nodes under a running training job.

The control plane has no public IP address by default: it is reached only through GKE's
DNS-based endpoint, where Google authorises every request with IAM (`container.clusters.connect`)
before Kubernetes sees it, and the IP endpoints are disabled. `control_plane_cidrs` keeps an IP
endpoint, public and limited to those ranges, for whoever needs one (docs/design.md).

The component also builds the Kubernetes provider for everything in the cluster, from the
endpoint the cluster is reached by, authenticating with gke-gcloud-auth-plugin, and exports the
same kubeconfig as a secret. It does not create GPU nodes (GpuNodePool does).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.cluster.kubeconfig import dns_endpoint, kubeconfig, provider_identity
from components.cluster.node_identity import OAUTH_SCOPES, node_baseline
from components.options import child_options, fixed_name

SYSTEM_POOL = "system-pool"


EXCLUSION_START_PATH = "maintenancePolicy.maintenanceExclusions[0].startTime"
SYSTEM_MACHINE_TYPE = "c2-standard-16"
SYSTEM_NODES = (1, 5)  # the tutorial's autoscaling range, as totals in one zone
SYSTEM_DISK_GB = 200

# DRA driver 25.3.x (NvidiaDraDriver) still speaks resource.k8s.io/v1beta1, which GKE 1.34
# serves only when asked (Cluster Toolkit gke-a4x enables exactly these).
DRA_BETA_APIS = [
    "resource.k8s.io/v1beta1/deviceclasses",
    "resource.k8s.io/v1beta1/resourceclaims",
    "resource.k8s.io/v1beta1/resourceclaimtemplates",
    "resource.k8s.io/v1beta1/resourceslices",
]


@dataclass(frozen=True)
class GkeClusterArgs:
    project: str
    region: str
    # The GPU zone. The system pool lives there too: the Ray head sits next to its workers, and
    # the pool's node counts are totals, not counts per zone of the region.
    zone: str
    cluster_name: str
    autopilot: bool
    # The version a new cluster starts at: the minor alias (`1.34`) of what GKE offers today
    # (components/preflight/gke_version.py); the release channel upgrades it afterwards.
    version: str
    # GKE's deletion protection, and Pulumi's `protect` on the cluster: both on by default.
    deletion_protection: bool
    # RFC 3339 start of the no-upgrade window; None: the day of creation, never revisited (a
    # default of "today" would otherwise change the cluster on every later `pulumi up`).
    exclusion_start: str | None
    # The GKE Ray add-on manages KubeRay cluster-wide. A4X installs a namespace-scoped KubeRay
    # with Helm instead (VerlRayCluster's operator release), so the add-on must stay off there.
    ray_addon: bool = True
    dra_beta_apis: bool = False
    # The nodes' network: the stack's PrimaryNetwork, or the user's. With `secondary_ranges`
    # (pods, services) the cluster uses those named ranges; without, GKE creates them.
    network: pulumi.Input[str] | None = None
    subnetwork: pulumi.Input[str] | None = None
    secondary_ranges: tuple[str, str] | None = None
    # The service account of every node (NodeIdentity); never the Compute Engine default.
    node_service_account: pulumi.Input[str] | None = None
    # Google Cloud labels of the cluster (cost attribution); GKE copies them to its nodes.
    labels: dict[str, str] = field(default_factory=dict)
    # CIDR ranges that may reach the control plane's public IP endpoint; empty (the default): no
    # IP endpoint at all, the DNS-based endpoint only (IAM-authorised).
    control_plane_cidrs: tuple[str, ...] = ()
    # What nodes need before they start (the node account's roles, the network's NAT): the
    # system pool and everything in the cluster wait for them, the control plane does not.
    node_prerequisites: tuple[pulumi.Resource, ...] = ()


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    system_pool: gcp.container.NodePool | None  # Standard only
    provider: k8s.Provider
    kubeconfig: pulumi.Output[str]
    name: pulumi.Output[str]
    location: pulumi.Output[str]
    endpoint: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:GkeCluster", name, None, opts)
        child = child_options(self, opts)
        cluster_args = _autopilot_args(args) if args.autopilot else _standard_args(args)
        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            cluster_args,
            opts=fixed_name(
                child,
                ignore_changes=ignored_inputs(args),
                # Pulumi refuses to delete or replace a protected resource, before GKE's own
                # deletion protection is even asked.
                protect=args.deletion_protection,
            ),
        )
        node_opts = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=list(args.node_prerequisites))
        )
        self.system_pool = (
            None if args.autopilot else _system_pool(name, args, self.cluster, node_opts)
        )

        self.name = self.cluster.name
        self.location = self.cluster.location
        # The address the kubeconfig reaches the API server at: the DNS endpoint, or with
        # control_plane_cidrs the public IP, as before (and with the same kubeconfig, so that a
        # stack keeping its IP endpoint sees no change to its Kubernetes provider).
        if args.control_plane_cidrs:
            self.endpoint = self.cluster.endpoint
            ca_certificate = self.cluster.master_auth.cluster_ca_certificate
        else:
            self.endpoint = self.cluster.control_plane_endpoints_config.apply(dns_endpoint)
            ca_certificate = pulumi.Output.from_input(None)
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.name, self.endpoint, ca_certificate).apply(
                lambda v: kubeconfig(*v)
            )
        )
        # Everything in the cluster waits for the system pool: a provider that depends on it
        # keeps Kubernetes objects from being applied to a cluster with no node to run them.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            k8s.ProviderArgs(
                kubeconfig=self.kubeconfig,
                enable_server_side_apply=True,
                # Replaced with the cluster, never on a credential rotation (kubeconfig.py).
                cluster_identifier=provider_identity(
                    name, self.cluster, args.project, args.region, args.cluster_name, self
                ),
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    *args.node_prerequisites,
                    *([] if args.autopilot else [self.system_pool]),
                ],
            ),
        )
        self.register_outputs(
            {
                "name": self.name,
                "location": self.location,
                "endpoint": self.endpoint,
                "kubeconfig": self.kubeconfig,
            }
        )


def ignored_inputs(args: GkeClusterArgs) -> list[str]:
    """Inputs the cluster sends at creation only.

    - minMasterVersion: the creation version is only that. A newer default on a later run must
      not become an upgrade request (the provider upgrades the master whenever
      min_master_version grows), and the channel moves the cluster on anyway.
    - nodeConfig (Standard): it configures the default pool, which the provider deletes right
      after creating the cluster (remove_default_node_pool). The provider then reads nodeConfig
      from the API, which fills it from "the first node pool" (container.v1 Cluster.nodeConfig):
      none at that moment, so the state holds none, and later, the system pool's config. The
      block is ForceNew (terraform-provider-google node_config.go schemaNodeConfig), so without
      this every later `up` and preview would plan to replace the cluster. Cluster Toolkit
      ignores it for the same reason (modules/scheduler/gke-cluster/main.tf @1047080375,
      lifecycle.ignore_changes = [node_config, min_master_version]: "Ignore all changes to the
      default node pool. It's being removed after creation.").
    - the maintenance exclusion's start, when it defaults to the day of creation.
    - nodeLocations (Standard): the zone of the throw-away default pool (`_standard_args`).
      Sent at creation only: `node_locations` is "the list of zones in which the cluster's
      nodes are located" (pulumi-gcp 10.2.0 container.Cluster), updatable in place, and a
      cluster made before this setting holds the region's default zones; an update would move
      whatever pool follows the cluster's locations (neither pool here does: both name their own
      zone), and an existing stack must see no change at all.
    """
    return [
        "minMasterVersion",
        *([] if args.autopilot else ["nodeConfig", "nodeLocations"]),
        *([] if args.exclusion_start else [EXCLUSION_START_PATH]),
    ]


def _common(args: GkeClusterArgs) -> dict:
    """Settings both modes share."""
    return dict(
        name=args.cluster_name,
        project=args.project,
        location=args.region,
        deletion_protection=args.deletion_protection,
        enable_multi_networking=True,
        datapath_provider="ADVANCED_DATAPATH",  # Dataplane V2: needed by multi-networking
        release_channel=gcp.container.ClusterReleaseChannelArgs(channel="REGULAR"),
        min_master_version=args.version,
        addons_config=_addons(args),
        monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
            # DCGM: per-GPU utilisation, memory and NVLink metrics in Managed Prometheus.
            enable_components=["SYSTEM_COMPONENTS", "DCGM"],
            managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(
                enabled=True
            ),
        ),
        logging_config=gcp.container.ClusterLoggingConfigArgs(
            enable_components=["SYSTEM_COMPONENTS", "WORKLOADS"]
        ),
        maintenance_policy=_maintenance_policy(args),
        network=args.network,
        subnetwork=args.subnetwork,
        ip_allocation_policy=_ip_allocation(args),
        control_plane_endpoints_config=_control_plane_endpoints(args),
        private_cluster_config=_private_cluster(args),
        master_authorized_networks_config=_authorized_networks(args),
        resource_labels=args.labels or None,
        # GKE cost allocation: the bill broken down by namespace and label
        # (kubernetes-engine/docs/how-to/cost-allocations).
        cost_management_config=gcp.container.ClusterCostManagementConfigArgs(enabled=True),
    )


def _ip_allocation(args: GkeClusterArgs) -> gcp.container.ClusterIpAllocationPolicyArgs:
    if args.secondary_ranges is None:
        return gcp.container.ClusterIpAllocationPolicyArgs()
    pods, services = args.secondary_ranges
    return gcp.container.ClusterIpAllocationPolicyArgs(
        cluster_secondary_range_name=pods, services_secondary_range_name=services
    )


def _control_plane_endpoints(
    args: GkeClusterArgs,
) -> gcp.container.ClusterControlPlaneEndpointsConfigArgs:
    """The DNS endpoint takes traffic from outside Google (`pulumi up`, kubectl, the preview
    in CI), authorised by IAM; the IP endpoints exist only with `control_plane_cidrs`.

    What the provider sends (terraform-provider-google-beta @93c65b2d60, google-beta/services/
    container/resource_container_cluster.go expandControlPlaneEndpointsConfig :7095-7144):
    DNSEndpointConfig.allowExternalTraffic always (ForceSendFields, :7097-7100), and
    IPEndpointsConfig.enabled, true unless set false (:7112-7118); with enabled false it sends
    nothing else of the IP side (no public endpoint, no authorized networks, :7119-7124). Left
    unset, allowExternalTraffic would go out as false: the DNS endpoint then serves only
    Google-internal traffic (container.v1 DNSEndpointConfig.allowExternalTraffic, discovery
    document container.v1.json:5067). The block is not ForceNew (schema :2254-2312, and no
    CustomizeDiff forces it, :256-271): a change is one UpdateCluster with
    DesiredControlPlaneEndpointsConfig (:4105-4119), in place. The API
    reads both fields back as sent (flattenDnsEndpointConfig, flattenIpEndpointsConfig
    :8047-8070). Standard and Autopilot alike (no ConflictsWith on enable_autopilot).
    enableK8sTokensViaDns / enableK8sCertsViaDns stay off: the kubeconfig authenticates with
    Google OAuth tokens from gke-gcloud-auth-plugin, not Kubernetes tokens or certificates.
    """
    ip_enabled = bool(args.control_plane_cidrs)
    # pulumi-gcp 10.2.0's typed Args (.venv pulumi_gcp/container/_inputs.py:7062, 7119, 7196).
    return gcp.container.ClusterControlPlaneEndpointsConfigArgs(
        dns_endpoint_config=gcp.container.ClusterControlPlaneEndpointsConfigDnsEndpointConfigArgs(
            allow_external_traffic=True
        ),
        ip_endpoints_config=gcp.container.ClusterControlPlaneEndpointsConfigIpEndpointsConfigArgs(
            enabled=ip_enabled
        ),
    )


def _private_cluster(args: GkeClusterArgs) -> gcp.container.ClusterPrivateClusterConfigArgs:
    """Private nodes: no external addresses; they leave through the network's Cloud NAT.

    GKE >= 1.29 runs the control plane's private side over Private Service Connect, so no
    master CIDR block is needed. The API now prefers NetworkConfig.defaultEnablePrivateNodes
    (container.v1 PrivateClusterConfig: "Deprecated: Use
    NetworkConfig.default_enable_private_nodes"); pulumi-gcp 10.2 has no such cluster argument,
    and the API still honours this one.

    enable_private_endpoint=False (a public IP endpoint, limited to `control_plane_cidrs`) only
    when there is an IP endpoint: with the IP endpoints disabled the provider does not send it
    (expandControlPlaneEndpointsConfig returns before :7126), reads back whatever the API
    dictates, and suppresses that diff (containerClusterApiDictatedPrivateEndpointField,
    :9073-9076 and 9108-9134, in google-beta since 8e44798f52, 2026-08-19, an ancestor of the
    8.0.0 release pulumi-gcp 10 bridges). Sending nothing there says what happens.
    """
    if not args.control_plane_cidrs:
        return gcp.container.ClusterPrivateClusterConfigArgs(enable_private_nodes=True)
    return gcp.container.ClusterPrivateClusterConfigArgs(
        enable_private_nodes=True, enable_private_endpoint=False
    )


def _authorized_networks(
    args: GkeClusterArgs,
) -> gcp.container.ClusterMasterAuthorizedNetworksConfigArgs | None:
    """The IP endpoint's allowed ranges (sent inside IPEndpointsConfig.authorizedNetworksConfig,
    expandControlPlaneEndpointsConfig :7138, and read back from there, :3743-3748). None
    without an IP endpoint."""
    if not args.control_plane_cidrs:
        return None
    return gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
        cidr_blocks=[
            gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                cidr_block=cidr, display_name=f"verl-gke-{n}"
            )
            for n, cidr in enumerate(args.control_plane_cidrs)
        ]
    )


def _standard_args(args: GkeClusterArgs) -> gcp.container.ClusterArgs:
    return gcp.container.ClusterArgs(
        **_common(args),
        networking_mode="VPC_NATIVE",
        # The default pool exists for a moment before it is removed: even it never runs as the
        # Compute Engine default service account.
        node_config=gcp.container.ClusterNodeConfigArgs(
            service_account=args.node_service_account, oauth_scopes=OAUTH_SCOPES
        ),
        workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
            workload_pool=f"{args.project}.svc.id.goog"
        ),
        # The default pool cannot be managed separately; replace it with SYSTEM_POOL.
        remove_default_node_pool=True,
        initial_node_count=1,
        # ...and until the provider has deleted it, inside the cluster's create, it is one node
        # in the GPU zone instead of one per default zone of the region (initial_node_count is
        # per zone: "The number of nodes to create in this cluster's default node pool. In
        # regional or multi-zonal clusters, this is the number of nodes per zone", pulumi-gcp
        # container.Cluster). A smaller boot and delete on the way to every other resource; no
        # pool follows these locations (both name their own). Creation only (ignored_inputs).
        node_locations=[args.zone],
        enable_k8s_beta_apis=(
            gcp.container.ClusterEnableK8sBetaApisArgs(enabled_apis=DRA_BETA_APIS)
            if args.dra_beta_apis
            else None
        ),
    )


def _autopilot_args(args: GkeClusterArgs) -> gcp.container.ClusterArgs:
    # Autopilot always runs VPC-native with workload identity; asking again is an error. Its
    # nodes take their service account from the auto-provisioning defaults.
    return gcp.container.ClusterArgs(
        **_common(args),
        enable_autopilot=True,
        cluster_autoscaling=gcp.container.ClusterClusterAutoscalingArgs(
            auto_provisioning_defaults=(
                gcp.container.ClusterClusterAutoscalingAutoProvisioningDefaultsArgs(
                    service_account=args.node_service_account, oauth_scopes=OAUTH_SCOPES
                )
            )
        ),
    )


def _addons(args: GkeClusterArgs) -> gcp.container.ClusterAddonsConfigArgs:
    ray = [
        gcp.container.ClusterAddonsConfigRayOperatorConfigArgs(
            enabled=True,
            ray_cluster_logging_config=(
                gcp.container.ClusterAddonsConfigRayOperatorConfigRayClusterLoggingConfigArgs(
                    enabled=True
                )
            ),
            ray_cluster_monitoring_config=(
                gcp.container.ClusterAddonsConfigRayOperatorConfigRayClusterMonitoringConfigArgs(
                    enabled=True
                )
            ),
        )
    ]
    return gcp.container.ClusterAddonsConfigArgs(
        ray_operator_configs=ray if args.ray_addon else None,
        gcs_fuse_csi_driver_config=(
            None
            if args.autopilot  # always on in Autopilot
            else gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True)
        ),
    )


def _maintenance_policy(args: GkeClusterArgs) -> gcp.container.ClusterMaintenancePolicyArgs:
    return gcp.container.ClusterMaintenancePolicyArgs(
        # Patch upgrades of the control plane are allowed, at night (UTC).
        daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time="03:00"
        ),
        # Cluster Toolkit's choice: no minor or node upgrades until the version's end of support,
        # so GPU nodes are never drained in the middle of a multi-day run.
        maintenance_exclusions=[
            gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                exclusion_name="no-node-upgrades-during-training",
                start_time=args.exclusion_start or _today(),
                exclusion_options=(
                    gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                        scope=exclusion_scope(args.autopilot),
                        end_time_behavior="UNTIL_END_OF_SUPPORT",
                    )
                ),
            )
        ],
    )


def exclusion_scope(autopilot: bool) -> str:
    """NO_MINOR_OR_NODE_UPGRADES ("excludes all minor upgrades for the cluster, and also exclude
    all node pool upgrades", container.v1 MaintenanceExclusionOptions.scope) is about node pools,
    which an Autopilot cluster does not have: Google manages its nodes. Autopilot gets
    NO_MINOR_UPGRADES, the scope whose meaning holds for every cluster."""
    return "NO_MINOR_UPGRADES" if autopilot else "NO_MINOR_OR_NODE_UPGRADES"


def _today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT00:00:00Z")


def _system_pool(
    name: str, args: GkeClusterArgs, cluster: gcp.container.Cluster, opts: pulumi.ResourceOptions
) -> gcp.container.NodePool:
    return gcp.container.NodePool(
        f"{name}-system-pool",
        gcp.container.NodePoolArgs(
            name=SYSTEM_POOL,
            project=args.project,
            location=args.region,
            # Without node_locations the pool takes the cluster's, every default zone of the
            # region, and initial/min/max counts apply per zone: the tutorial's `--num-nodes=1
            # --min-nodes=1 --max-nodes=5` on a regional cluster is 3 to 15 nodes in a
            # three-zone region (terraform-provider-google resource_container_node_pool.go,
            # min_node_count: "Minimum number of nodes per zone in the node pool"). One zone,
            # in totals, as Cluster Toolkit's gke-cluster system pool counts (total_min_nodes).
            # Moving an existing pool here is an update, not a replacement (node_locations is
            # not ForceNew; the provider sends UpdateNodePool with the new locations).
            node_locations=[args.zone],
            cluster=cluster.name,
            initial_node_count=1,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=SYSTEM_NODES[0], total_max_node_count=SYSTEM_NODES[1]
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            upgrade_settings=gcp.container.NodePoolUpgradeSettingsArgs(
                strategy="SURGE", max_surge=1, max_unavailable=0
            ),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=SYSTEM_MACHINE_TYPE,
                # The staging Job and the Ray head pull the ~25 GB verl image here and stage
                # through gcsfuse's sidecar disk: the 100 GB default boot disk is too tight.
                disk_size_gb=SYSTEM_DISK_GB,
                **node_baseline(args.node_service_account, args.labels),
                labels={"verl-gke/role": "system"},
            ),
        ),
        # The autoscaler owns the node count after creation.
        opts=fixed_name(opts, ignore_changes=["initialNodeCount"]),
    )
