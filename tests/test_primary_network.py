"""The primary network's Cloud NAT has ports for what one node opens at once (issue 17, item 4).

Cloud NAT's default is 64 static ports per VM; the staging pod opens DOWNLOAD_WORKERS x
CONNECTIONS_PER_FILE connections to the Hugging Face CDN from one node. The NAT's minimum is
derived from that figure, never typed a second time.
"""

from __future__ import annotations

import pulumi
import pytest

from components.network.primary_network import (
    MAX_PORTS_PER_VM,
    PrimaryNetwork,
    PrimaryNetworkArgs,
    nat_min_ports_per_vm,
)
from components.storage import model_staging
from tests.conftest import STACK_MODES, rendered
from tools import mockrun

NAT = "gcp:compute/routerNat:RouterNat"


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_every_stacks_nat_fits_the_staging_pods_connections(stack, mode):
    """Dynamic port allocation (endpoint-independent mapping off, which it excludes), a minimum
    of at least twice staging's peak connections as a power of two, and a higher ceiling."""
    nat = rendered(stack, mode)[1].one(NAT).plain_inputs
    assert nat["enableDynamicPortAllocation"] is True
    assert nat["enableEndpointIndependentMapping"] is False
    minimum = nat["minPortsPerVm"]
    assert minimum == nat_min_ports_per_vm(model_staging.PEAK_CONNECTIONS)
    assert minimum >= 2 * model_staging.PEAK_CONNECTIONS and minimum & (minimum - 1) == 0
    assert minimum < nat["maxPortsPerVm"] == MAX_PORTS_PER_VM
    # Drops (OUT_OF_RESOURCES) stay visible.
    assert nat["logConfig"] == {"enable": True, "filter": "ERRORS_ONLY"}


def test_the_nat_follows_the_connections_it_is_given():
    """The component sizes the NAT from its argument: more connections, more ports."""

    def minimum(connections: int) -> int:
        def program() -> None:
            PrimaryNetwork(
                "primary-network",
                PrimaryNetworkArgs(
                    project="p", region="us-central1", cluster_name="c",
                    egress_connections_per_vm=connections,
                ),
            )
            pulumi.export("ok", True)

        return mockrun.run(program).one(NAT).plain_inputs["minPortsPerVm"]

    assert minimum(400) == 1024
    assert minimum(1000) == 2048


@pytest.mark.parametrize(
    ("connections", "ports"), [(1, 32), (16, 32), (17, 64), (400, 1024), (512, 1024)]
)
def test_minimum_is_a_power_of_two_of_at_least_32(connections, ports):
    """Cloud NAT takes only a power of two >= 32 as the dynamic minimum (terraform-provider-google
    resource_compute_router_nat.go, enable_dynamic_port_allocation)."""
    assert nat_min_ports_per_vm(connections) == ports


def test_more_connections_than_the_ceiling_allows_are_refused():
    """A workload that would need the ceiling itself is an error naming both figures."""
    with pytest.raises(ValueError, match=f"MAX_PORTS_PER_VM \\({MAX_PORTS_PER_VM}\\)"):
        nat_min_ports_per_vm(MAX_PORTS_PER_VM // 2)
    with pytest.raises(ValueError, match="positive"):
        nat_min_ports_per_vm(0)
