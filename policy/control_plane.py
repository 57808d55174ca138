"""The GKE control plane: no public IP endpoint open to every address.

A cluster's IP endpoint is public unless the cluster asks otherwise, and, without authorized
networks, open to any address (credentials still required). This program reaches the control
plane through the DNS-based endpoint, where IAM authorises every request, and disables the IP
endpoints; `verl-gke:controlPlaneCidrs` keeps a public IP endpoint behind those ranges. The rule
reads the cluster's inputs the way terraform-provider-google-beta turns them into the request
(@93c65b2d60, google-beta/services/container/resource_container_cluster.go, "beta" below).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

from pulumi_policy import ReportViolation, ResourceValidationArgs

from policy.common import CLUSTER, lookup


def open_ip_endpoint(props: Mapping[str, Any]) -> str | None:
    """Why the cluster's IP endpoint is public and unrestricted, or None if it is not."""
    # IPEndpointsConfig.enabled goes out true unless set false (beta :7112-7118).
    if lookup(props, "controlPlaneEndpointsConfig.ipEndpointsConfig.enabled") is False:
        return None
    # EnablePublicEndpoint = !enable_private_endpoint, unset counting as false (beta :7126-7128).
    if lookup(props, "privateClusterConfig.enablePrivateEndpoint") is True:
        return None
    networks = lookup(props, "masterAuthorizedNetworksConfig")
    if not networks:
        # Absent, the provider sends authorized networks disabled (beta :6909-6919).
        return "its public IP endpoint takes any address (no masterAuthorizedNetworksConfig)"
    if lookup(networks, "gcpPublicCidrsAccessEnabled") is True:
        return ("masterAuthorizedNetworksConfig.gcpPublicCidrsAccessEnabled lets every Compute "
                "Engine address in")
    for block in lookup(networks, "cidrBlocks", []) or []:
        cidr = lookup(block, "cidrBlock")
        try:
            everyone = ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0
        except ValueError:
            continue  # the provider's own validation rejects it (beta :95, IsCIDRNetwork)
        if everyone:
            return f"masterAuthorizedNetworksConfig allows {cidr}, every address"
    return None


def validate_control_plane_not_open(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A cluster's control plane is reached through the DNS endpoint (IAM), or through an IP
    endpoint that is private or limited to named ranges, never a public IP open to all."""
    if args.resource_type != CLUSTER:
        return
    reason = open_ip_endpoint(args.props)
    if reason:
        report(f"the control plane's {reason}: disable the IP endpoints "
               "(controlPlaneEndpointsConfig.ipEndpointsConfig.enabled false, the DNS endpoint "
               "only) or limit them to your ranges (verl-gke:controlPlaneCidrs)")
