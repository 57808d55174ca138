"""The networks: the nodes' VPC, subnet and Cloud NAT (primary_network.py) and the RDMA VPCs of
A4 and A3 Ultra (rdma_networks.py).

Imported by __main__.py; it imports the facts and components/schema below it."""
