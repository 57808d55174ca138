"""PrimaryNetwork: the VPC and subnet the cluster's nodes live in, private, with a way out.

The tutorial and the earlier program put the cluster on the project's `default` VPC, which many
organisations delete or lock down. This component creates the stack's own: a custom-mode VPC, one
subnet in the region with the secondary ranges a VPC-native cluster needs (pods, services) and
Private Google Access (private nodes reach Google APIs without external addresses), and a Cloud
Router with Cloud NAT, because private nodes must still pull the verl image from Docker Hub and
the staging Job must reach huggingface.co and GitHub. A user who names an existing network
(`verl-gke:network` / `subnetwork`) gets none of this and provides NAT themselves.
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


@dataclass(frozen=True)
class PrimaryNetworkArgs:
    project: str
    region: str
    cluster_name: str  # names derive from it (components/schema/names.py)


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
                log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            ),
            opts=fixed_name(child),
        )
        self.network = vpc.name
        self.subnetwork = subnet.name
        self.register_outputs({"network": self.network, "subnetwork": self.subnetwork})
