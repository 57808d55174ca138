"""PrimaryNetwork: the VPC and subnet the cluster's nodes live in, private, with a way out.

The tutorial and the earlier program put the cluster on the project's `default` VPC, which many
organisations delete or lock down. This component creates the stack's own: a custom-mode VPC, one
subnet in the region with the secondary ranges a VPC-native cluster needs (pods, services) and
Private Google Access (private nodes reach Google APIs without external addresses), and a Cloud
Router with Cloud NAT, because private nodes must still pull the verl image from Docker Hub and
the staging Job must reach huggingface.co, PyPI and GitHub. The NAT gives each node ports for
the most connections one node opens at once (`egress_connections_per_vm`, the staging pod's
hf_transfer fan-out), not Cloud NAT's default of 64. A user who names an existing network
(`verl-gke:network` / `subnetwork`) gets none of this and provides NAT themselves, sized the
same way (docs/staging.md, "A network of your own").
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.facts.addressing import NODE_CIDR, PODS_CIDR, SERVICES_CIDR
from components.options import child_options, fixed_name
from components.schema import names

PODS_RANGE = "pods"
SERVICES_RANGE = "services"
# Cluster Toolkit's gke-a4 / gke-a3-ultragpu blueprints give the primary VPC the same jumbo MTU
# as the GPU networks.
MTU = 8896
# Dynamic port allocation's ceiling per VM. A VM that uses its ports gets twice as many, up to
# this; 16384 is a quarter of one NAT address's 64512 ports, so one busy node never takes them
# all from the others (the NAT allocates more addresses, AUTO_ONLY, as nodes need them).
MAX_PORTS_PER_VM = 16384


def nat_min_ports_per_vm(connections: int) -> int:
    """Ports each VM starts with: twice the connections it opens at once, as a power of two.

    Cloud NAT drops new connections to one destination beyond a VM's ports (the NAT logs
    OUT_OF_RESOURCES) and, with dynamic allocation, takes only a power of two of at least 32
    for the minimum (terraform-provider-google resource_compute_router_nat.go,
    `enable_dynamic_port_allocation`). Doubling leaves room for what else the node opens (pip,
    git, image layers) while a burst waits for dynamic allocation to add ports.
    """
    if connections < 1:
        raise ValueError(f"connections must be positive, got {connections}")
    ports = 32
    while ports < 2 * connections:
        ports *= 2
    if ports >= MAX_PORTS_PER_VM:
        raise ValueError(
            f"{connections} connections per VM need {ports} NAT ports, at or above "
            f"MAX_PORTS_PER_VM ({MAX_PORTS_PER_VM}): open fewer at once"
        )
    return ports


@dataclass(frozen=True)
class PrimaryNetworkArgs:
    project: str
    region: str
    cluster_name: str  # names derive from it (components/schema/names.py)
    # The most connections one node opens at once to the same destination through the NAT: the
    # caller derives it from the workload (model_staging.PEAK_CONNECTIONS); the NAT's ports per
    # VM are sized from it (nat_min_ports_per_vm).
    egress_connections_per_vm: int


class PrimaryNetwork(pulumi.ComponentResource):
    network: pulumi.Output[str]
    subnetwork: pulumi.Output[str]

    def __init__(
        self, name: str, args: PrimaryNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:PrimaryNetwork", name, None, opts)
        child = child_options(self, opts)
        vpc = gcp.compute.Network(
            f"{name}-vpc",
            gcp.compute.NetworkArgs(
                name=names.primary_network_name(args.cluster_name),
                project=args.project,
                auto_create_subnetworks=False,
                mtu=MTU,
            ),
            opts=fixed_name(child),
        )
        subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            gcp.compute.SubnetworkArgs(
                name=names.primary_subnet_name(args.cluster_name),
                project=args.project,
                region=args.region,
                network=vpc.id,
                ip_cidr_range=NODE_CIDR,
                secondary_ip_ranges=[
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=PODS_RANGE, ip_cidr_range=PODS_CIDR
                    ),
                    gcp.compute.SubnetworkSecondaryIpRangeArgs(
                        range_name=SERVICES_RANGE, ip_cidr_range=SERVICES_CIDR
                    ),
                ],
                private_ip_google_access=True,
            ),
            opts=fixed_name(child),
        )
        router = gcp.compute.Router(
            f"{name}-router",
            gcp.compute.RouterArgs(
                name=names.router_name(args.cluster_name),
                project=args.project,
                region=args.region,
                network=vpc.id,
            ),
            opts=fixed_name(child),
        )
        gcp.compute.RouterNat(
            f"{name}-nat",
            gcp.compute.RouterNatArgs(
                name=names.nat_name(args.cluster_name),
                project=args.project,
                region=args.region,
                router=router.name,
                nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
                # Dynamic allocation instead of a fixed 64 ports per VM: the staging pod opens
                # hundreds of connections to the Hugging Face CDN from one node. It cannot be
                # combined with endpoint-independent mapping, so that is turned off explicitly.
                enable_dynamic_port_allocation=True,
                enable_endpoint_independent_mapping=False,
                min_ports_per_vm=nat_min_ports_per_vm(args.egress_connections_per_vm),
                max_ports_per_vm=MAX_PORTS_PER_VM,
                # ERRORS_ONLY records OUT_OF_RESOURCES drops, the sign these are too few.
                log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            ),
            opts=fixed_name(child),
        )
        self.network = vpc.name
        self.subnetwork = subnet.name
        self.register_outputs({"network": self.network, "subnetwork": self.subnetwork})
