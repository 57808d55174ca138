"""GpuNodePool: the GPU nodes of a Standard cluster, as the tutorial and Cluster Toolkit set them.

The tutorial's pool (machine type, accelerators with the default driver, reservation affinity,
additional node networks) plus what Cluster Toolkit's gke-node-pool module adds for these
machines: gVNIC, image streaming, local-SSD ephemeral storage, the GPU taint, workload identity
metadata, and for A4X the `auto` accelerator network profile (DRANET) with a HIGH_THROUGHPUT
1x72 workload policy. Placement and repair follow Cluster Toolkit's preconditions per capacity
(see `_placement` and `_management`). Autopilot clusters have no node pools: this component is
not used there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.facts.hardware import HardwareProfile, NodeNetworking
from components.cluster.node_identity import node_baseline
from components.options import child_options, fixed_name
from components.schema import names
from components.schema.choices import Capacity

POOL_NAME = "gpu-pool"
GPU_TAINT = gcp.container.NodePoolNodeConfigTaintArgs(
    key="nvidia.com/gpu", value="present", effect="NO_SCHEDULE"
)

# How long `pulumi up` waits for the pool's create, per capacity, instead of the provider's
# default (30 min: terraform-provider-google resource_container_node_pool.go, Timeouts.Create).
# The create returns once the initial nodes have registered; a spot stockout holds it ("Common
# cause for that is GCE_STOCKOUT which will wait for resources and return error after timeout",
# resourceContainerNodePoolCreate, hashicorp/terraform-provider-google-beta @003e704f36), so the
# bound is what decides when `up` fails (the operation's own error, GCE_STOCKOUT, is in GKE's
# operation and the node pool's status: docs/operations.md). Budgets, not measurements:
# no create-to-registered figure for A4 / A3 Ultra / A4X VMs is published (GKE gives 80-120 s of
# boot for general-purpose nodes, kubernetes-engine/docs/how-to/capacity-provisioning); these
# are about twice an estimated 5-10 min for these machines.
# - reservation: 30 min, the provider's own default stated: the capacity is held for the
#   project, so a long create is a boot problem, not a wait for capacity.
# - spot: 20 min: a stockout fails `up` after 20 minutes, not 30.
# - flex-start: 10 min: the pool starts with 0 nodes (its capacity arrives through the
#   autoscaler, once the RayCluster's pods ask), so its create waits for no VM at all; the wait
#   for capacity is bounded by the RayCluster's (ray_cluster_spec.ready_timeout_seconds).
# A custom timeout is a resource option, not an input: an existing pool sees no change.
CREATE_TIMEOUTS: dict[Capacity, str] = {
    Capacity.RESERVATION: "30m",
    Capacity.SPOT: "20m",
    Capacity.FLEX_START: "10m",
}


@dataclass(frozen=True)
class GpuNodePoolArgs:
    project: str
    region: str
    zone: str
    cluster: pulumi.Input[str]
    hardware: HardwareProfile
    nodes: int
    capacity: Capacity
    reservation: str | None  # `<name>` or `<name>/reservationBlocks/<block>`
    # A4X's workload policy name (components/schema/names.py); None for A4 / A3 Ultra.
    placement_policy: str | None = None
    # The nodes' service account (NodeIdentity); never the Compute Engine default.
    service_account: pulumi.Input[str] | None = None
    # Google Cloud labels of the nodes' VMs (cost attribution), and of the placement policy.
    labels: dict[str, str] = field(default_factory=dict)
    # (network, subnetwork) pairs from RdmaNetworks, in NIC order; empty on A4X.
    node_networks: list[tuple[pulumi.Input[str], pulumi.Input[str]]] = field(default_factory=list)


class GpuNodePool(pulumi.ComponentResource):
    pool: gcp.container.NodePool

    def __init__(
        self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:GpuNodePool", name, None, opts)
        hw = args.hardware
        child = child_options(self, opts)
        policy = None
        if hw.networking is NodeNetworking.DRANET:
            policy = _workload_policy(name, args, child)

        self.pool = gcp.container.NodePool(
            f"{name}-pool",
            gcp.container.NodePoolArgs(
                name=POOL_NAME,
                project=args.project,
                location=args.region,
                cluster=args.cluster,
                node_locations=[args.zone],
                initial_node_count=0 if args.capacity is Capacity.FLEX_START else args.nodes,
                autoscaling=_autoscaling(args),
                management=_management(args),
                placement_policy=_placement(args, policy),
                network_config=_network_config(args),
                node_config=_node_config(args),
            ),
            # The autoscaler and GKE repairs change the node count; a later `pulumi up` must not
            # try to put it back (that would replace the pool).
            opts=fixed_name(
                child,
                ignore_changes=["initialNodeCount"],
                custom_timeouts=pulumi.CustomTimeouts(create=CREATE_TIMEOUTS[args.capacity]),
            ),
        )
        self.name = self.pool.name
        self.register_outputs({"name": self.name})


def _workload_policy(
    name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions
) -> gcp.compute.ResourcePolicy:
    if not args.placement_policy:
        raise ValueError(f"GpuNodePool {name!r}: A4X needs GpuNodePoolArgs.placement_policy")
    return gcp.compute.ResourcePolicy(
        f"{name}-placement",
        gcp.compute.ResourcePolicyArgs(
            # Regional and project-wide: named after the cluster so two stacks never collide.
            name=args.placement_policy,
            project=args.project,
            region=args.region,
            workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                type="HIGH_THROUGHPUT", accelerator_topology=names.A4X_TOPOLOGY
            ),
        ),
        # Its name is not ForceNew in the provider: fixed_name makes a rename a replacement.
        opts=fixed_name(opts),
    )


def _placement(
    args: GpuNodePoolArgs, policy: gcp.compute.ResourcePolicy | None
) -> gcp.container.NodePoolPlacementPolicyArgs | None:
    """Cluster Toolkit's placement per capacity (modules/compute/gke-node-pool, examples/gke-*).

    - A4X: COMPACT with the 1x72 workload policy (CT resource-policy module: type COMPACT plus
      the policy name).
    - A4 / A3 Ultra on a reservation: none. CT's gke-a4 and gke-a3-ultragpu reservation pools
      set no placement policy: the reservation (or its block) already places the VMs, and
      Compute Engine's compact policies do not work with shared reservations.
    - A4 / A3 Ultra on spot or flex-start: COMPACT, for low latency between nodes. CT allows
      COMPACT with DWS flex-start only "for A3 Ultra, A4, and H4D machine types", the two here.
    """
    if policy is not None:
        return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", policy_name=policy.name)
    if args.capacity is Capacity.RESERVATION:
        return None
    return gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT")


def _management(args: GpuNodePoolArgs) -> gcp.container.NodePoolManagementArgs:
    # Cluster Toolkit gke-node-pool precondition: "enable_flex_start needs node auto_repair set
    # to false" (a repaired flex-start node would be a new request for capacity).
    repair = args.capacity is not Capacity.FLEX_START
    return gcp.container.NodePoolManagementArgs(auto_repair=repair, auto_upgrade=True)


def _autoscaling(args: GpuNodePoolArgs) -> gcp.container.NodePoolAutoscalingArgs:
    """Exactly the nodes the RayCluster uses: one worker per node, so a larger pool would only
    cost money. Flex-start capacity arrives through the autoscaler only, so it starts at 0.

    Spot and flex-start pools may shrink to 0: once the supervisor suspends the RayCluster (its
    pods deleted), the cluster autoscaler removes the empty nodes, and a resumed RayCluster's
    pending pods bring them back (GKE, "About cluster autoscaling": empty nodes are removed,
    pending Pods that fit nowhere add nodes, within min..max). A reservation pool keeps min =
    max: the reservation bills its VMs whether they run or not, and keeping them keeps the
    capacity that another project could otherwise take."""
    minimum = args.nodes if args.capacity is Capacity.RESERVATION else 0
    return gcp.container.NodePoolAutoscalingArgs(
        total_min_node_count=minimum,
        total_max_node_count=args.nodes,
        location_policy="ANY",
    )


def _network_config(args: GpuNodePoolArgs) -> gcp.container.NodePoolNetworkConfigArgs:
    if args.hardware.networking is NodeNetworking.DRANET:
        # DRANET: GKE creates the RDMA networks and exposes each NIC as a DRA device; additional
        # node networks must not be given with this profile.
        return gcp.container.NodePoolNetworkConfigArgs(accelerator_network_profile="auto")
    return gcp.container.NodePoolNetworkConfigArgs(
        additional_node_network_configs=[
            gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                network=network, subnetwork=subnet
            )
            for network, subnet in args.node_networks
        ]
    )


def _node_config(args: GpuNodePoolArgs) -> gcp.container.NodePoolNodeConfigArgs:
    hw = args.hardware
    return gcp.container.NodePoolNodeConfigArgs(
        machine_type=hw.machine_type,
        disk_type=hw.boot_disk_type,
        **node_baseline(args.service_account, args.labels),
        guest_accelerators=[
            gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=hw.gpu_type,
                count=hw.gpus_per_node,
                gpu_driver_installation_config=(
                    gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                        gpu_driver_version="DEFAULT"
                    )
                ),
            )
        ],
        reservation_affinity=_reservation_affinity(args),
        spot=True if args.capacity is Capacity.SPOT else None,
        flex_start=True if args.capacity is Capacity.FLEX_START else None,
        ephemeral_storage_local_ssd_config=(
            None
            if hw.ephemeral_local_ssds is None
            else gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(
                local_ssd_count=hw.ephemeral_local_ssds
            )
        ),
        taints=[GPU_TAINT],
        labels=_labels(hw),
    )


# pulumi-gcp has no DRANET switch: `accelerator_network_profile = "auto"` only attaches the
# accelerator networks (and their policy routing). GKE installs its managed DRANET driver, which
# publishes each RDMA NIC as a device of class mrdma.google.com, on nodes carrying this label:
# what Cluster Toolkit's gke-node-pool `enable_dranet` sets next to the profile.
DRANET_LABEL = {"cloud.google.com/gke-networking-dra-driver": "true"}


def _labels(hw: HardwareProfile) -> dict[str, str]:
    labels = {"verl-gke/role": "gpu"}
    if hw.networking is NodeNetworking.DRANET:
        labels.update(DRANET_LABEL)
    return labels


def _reservation_affinity(
    args: GpuNodePoolArgs,
) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    if args.capacity is not Capacity.RESERVATION:
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="NO_RESERVATION"
        )
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="SPECIFIC_RESERVATION",
        key="compute.googleapis.com/reservation-name",
        values=[args.reservation],
    )
