"""Address plan of the A4 / A3 Ultra node networks, and the node count it allows.

One /24 per network: the gVNIC subnet and one subnet per RDMA NIC (the tutorial's
`192.168.0.0/24` and `192.168.<n+1>.0/24`). Every GPU node takes one address in each, so the
smallest subnet bounds the number of GPU nodes. Compute Engine reserves four addresses of every
subnet's primary range (network, gateway, second-to-last, broadcast: "Reserved IP addresses in
IPv4 subnets", cloud.google.com/vpc/docs/subnets#reserved_ip_addresses_in_every_subnet).
"""

from __future__ import annotations

import ipaddress

GVNIC_CIDR = "192.168.0.0/24"
# The firewall admits the gVNIC subnet and every RDMA subnet (192.168.1-8.0/24).
GVNIC_FIREWALL_SOURCE = "192.168.0.0/16"
RESERVED_PER_SUBNET = 4


def rdma_cidr(index: int) -> str:
    return f"192.168.{index + 1}.0/24"


def nodes_per_subnet(cidr: str) -> int:
    return ipaddress.ip_network(cidr).num_addresses - RESERVED_PER_SUBNET


# 252: what one /24 per NIC allows. A larger cluster needs larger subnets, not a larger number.
MAX_RDMA_VPC_NODES = min(nodes_per_subnet(GVNIC_CIDR), nodes_per_subnet(rdma_cidr(0)))


# The primary network the stack creates (components/network/primary_network.py), clear of the
# 192.168.0.0/16 GPU networks: 4,092 nodes, a /14 of pods (GKE gives each node a /24 by default,
# so 1,024 nodes' worth), 4,096 Services.
NODE_CIDR = "10.0.0.0/20"
PODS_CIDR = "10.4.0.0/14"
SERVICES_CIDR = "10.8.0.0/20"
