"""RdmaNetworks: the gVNIC and RDMA VPCs of A4 / A3 Ultra nodes, and their in-cluster mapping.

Creates the gVNIC VPC (one subnet, an internal firewall rule) and the RoCE VPC (one subnet per
RDMA NIC) the GPU node pool attaches as additional node networks, then, once a cluster exists,
the GKENetworkParamSet / Network pairs that let pods ask for those interfaces by name.
It does nothing for A4X, whose node pool uses the `auto` accelerator network profile (DRANET).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.schema import names
from components.facts.addressing import GVNIC_CIDR, GVNIC_FIREWALL_SOURCE, rdma_cidr
from components.options import child_options, fixed_name

# Cluster Toolkit's gpu-rdma-vpc module and its gke-a4 / gke-a3-ultragpu blueprints set this MTU
# on both VPCs: RoCE and the gVNIC data path both need jumbo frames for line rate.
MTU = 8896

GVNIC_NETWORK = "gvnic-1"


def rdma_network(index: int) -> str:
    return f"rdma-{index}"


@dataclass(frozen=True)
class RdmaNetworksArgs:
    project: str
    region: str
    zone: str
    gvnic_prefix: str  # VPC, subnet and firewall names derive from it (components/schema/names.py)
    rdma_prefix: str  # VPC and one subnet per NIC
    nic_count: int  # RDMA NICs per node: 8 on a4-highgpu-8g and a3-ultragpu-8g


class RdmaNetworks(pulumi.ComponentResource):
    """gVNIC + RDMA VPCs; `pod_networks` are the Network names a pod lists, in NIC order."""

    node_networks: list[tuple[pulumi.Output[str], pulumi.Output[str]]]
    pod_networks: list[str]

    def __init__(
        self, name: str, args: RdmaNetworksArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:RdmaNetworks", name, None, opts)
        self._name = name
        self._args = args
        self._child = child_options(self, opts)

        self.gvnic_network = self._vpc("gvnic", args.gvnic_prefix, profile=None)
        self.gvnic_subnet = self._subnet(
            "gvnic-sub", names.subnet_name(args.gvnic_prefix), self.gvnic_network, GVNIC_CIDR
        )
        gcp.compute.Firewall(
            f"{name}-gvnic-internal",
            gcp.compute.FirewallArgs(
                name=names.firewall_name(args.gvnic_prefix),
                project=args.project,
                network=self.gvnic_network.id,
                allows=[
                    gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["0-65535"]),
                    gcp.compute.FirewallAllowArgs(protocol="udp", ports=["0-65535"]),
                    gcp.compute.FirewallAllowArgs(protocol="icmp"),
                ],
                source_ranges=[GVNIC_FIREWALL_SOURCE],
            ),
            opts=fixed_name(self._child),
        )
        # The RoCE profile must be given as a full URL (Cluster Toolkit gpu-rdma-vpc); it pins
        # the VPC to the zone whose RDMA fabric the nodes sit on.
        roce_profile = (
            f"https://www.googleapis.com/compute/beta/projects/{args.project}"
            f"/global/networkProfiles/{args.zone}-vpc-roce"
        )
        self.rdma_network = self._vpc("rdma", args.rdma_prefix, profile=roce_profile)
        self.rdma_subnets = [
            self._subnet(
                f"rdma-sub-{n}",
                names.rdma_subnet_name(args.rdma_prefix, n),
                self.rdma_network,
                rdma_cidr(n),
            )
            for n in range(args.nic_count)
        ]

        self.node_networks = [(self.gvnic_network.name, self.gvnic_subnet.name)] + [
            (self.rdma_network.name, subnet.name) for subnet in self.rdma_subnets
        ]
        self.pod_networks = [GVNIC_NETWORK] + [rdma_network(n) for n in range(args.nic_count)]
        self.register_outputs(
            {
                "gvnicNetwork": self.gvnic_network.name,
                "rdmaNetwork": self.rdma_network.name,
                "podNetworks": self.pod_networks,
            }
        )

    def _vpc(self, role: str, prefix: str, profile: str | None) -> gcp.compute.Network:
        return gcp.compute.Network(
            f"{self._name}-{role}",
            gcp.compute.NetworkArgs(
                name=names.network_name(prefix),
                project=self._args.project,
                auto_create_subnetworks=False,
                mtu=MTU,
                network_profile=profile,
            ),
            opts=fixed_name(self._child),
        )

    def _subnet(
        self, role: str, subnet_name: str, network: gcp.compute.Network, cidr: str
    ) -> gcp.compute.Subnetwork:
        return gcp.compute.Subnetwork(
            f"{self._name}-{role}",
            gcp.compute.SubnetworkArgs(
                name=subnet_name,
                project=self._args.project,
                region=self._args.region,
                network=network.id,
                ip_cidr_range=cidr,
            ),
            opts=fixed_name(self._child),
        )

    def map_into_cluster(self, provider: k8s.Provider) -> list[pulumi.Resource]:
        """Create one GKENetworkParamSet + Network pair per pod network, in the cluster."""
        pairs = [(GVNIC_NETWORK, self.gvnic_network.name, self.gvnic_subnet.name, "NetDevice")]
        pairs += [
            (rdma_network(n), self.rdma_network.name, subnet.name, "RDMA")
            for n, subnet in enumerate(self.rdma_subnets)
        ]
        opts = pulumi.ResourceOptions.merge(self._child, pulumi.ResourceOptions(provider=provider))
        created: list[pulumi.Resource] = []
        for network, vpc, subnet, device_mode in pairs:
            params = k8s.apiextensions.CustomResource(
                f"{self._name}-{network}-params",
                api_version="networking.gke.io/v1",
                kind="GKENetworkParamSet",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=network),
                spec={"vpc": vpc, "vpcSubnet": subnet, "deviceMode": device_mode},
                opts=opts,
            )
            created.append(params)
            created.append(
                k8s.apiextensions.CustomResource(
                    f"{self._name}-{network}",
                    api_version="networking.gke.io/v1",
                    kind="Network",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=network),
                    spec=_network_spec(network),
                    opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[params])),
                )
            )
        return created


def _network_spec(network: str) -> dict[str, Any]:
    return {
        "type": "Device",
        "parametersRef": {
            "group": "networking.gke.io",
            "kind": "GKENetworkParamSet",
            "name": network,
        },
    }
