"""Infrastructure components on their own, under the mock runtime, for inputs the stacks don't use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.cluster.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.schema.choices import Capacity
from components.facts.hardware import profile
from components.network.rdma_networks import RdmaNetworks, RdmaNetworksArgs
from tools import mockrun

POOL = "gcp:container/nodePool:NodePool"
ROOT = Path(__file__).resolve().parent.parent


def test_rdma_networks_follow_the_nic_count():
    """Nothing assumes 8 NICs (tutorial defect 3): 4 NICs give 4 subnets and 4 rdma networks."""
    seen = {}

    def program():
        networks = RdmaNetworks(
            "net",
            RdmaNetworksArgs(
                project="p", region="r1", zone="r1-a", gvnic_prefix="g", rdma_prefix="d", nic_count=4
            ),
        )
        seen["pod_networks"] = networks.pod_networks
        seen["node_networks"] = len(networks.node_networks)

    recording = mockrun.run(program)
    subnets = sorted(r.plain_inputs["name"] for r in recording.of_type("gcp:compute/subnetwork:Subnetwork"))
    assert subnets == ["d-sub-0", "d-sub-1", "d-sub-2", "d-sub-3", "g-sub"]
    assert seen == {"pod_networks": ["gvnic-1", "rdma-0", "rdma-1", "rdma-2", "rdma-3"], "node_networks": 5}
    component = recording.one("verl-gke:index:RdmaNetworks", "net")
    assert all(r.parent == component.urn for r in recording.resources if r is not component)


def _pool(capacity: Capacity, reservation: str | None = None, target: str = "a4") -> dict:
    def program():
        GpuNodePool(
            "gpu",
            GpuNodePoolArgs(
                project="p", region="us-central1", zone="us-central1-b", cluster="c",
                hardware=profile(target), nodes=2, capacity=capacity, reservation=reservation,
                placement_policy="c-1x72-placement" if target == "a4x" else None,
            ),
        )

    return mockrun.run(program).one(POOL).plain_inputs


def test_spot_pool_consumes_no_reservation_and_may_scale_to_zero():
    """Spot capacity: spot VMs, explicitly no reservation; the nodes start with the pool, and the
    autoscaler may remove them all once the released RayCluster leaves them empty."""
    pool = _pool(Capacity.SPOT)
    assert pool["nodeConfig"]["spot"] is True
    assert pool["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert pool["initialNodeCount"] == 2
    assert pool["autoscaling"]["totalMinNodeCount"] == 0
    assert pool["autoscaling"]["totalMaxNodeCount"] == 2


def _documented_minimums() -> dict[str, str]:
    """docs/cost.md's "What releasing the GPUs saves": each bullet names its provisioning modes
    and the pool minimum in parentheses, e.g. `- flex-start / spot pools (min 0): ...`."""
    text = (ROOT / "docs" / "cost.md").read_text()
    section = text.split("## What releasing the GPUs saves", 1)[1].split("\n## ", 1)[0]
    claims = {}
    for modes, minimum in re.findall(r"^- ([a-z /-]+) pools \((min [^)]*)\)", section, re.M):
        for mode in modes.split(" / "):
            claims[mode.strip()] = minimum
    return claims


def test_each_provisioning_modes_pool_minimum_is_what_the_docs_say():
    """What the docs promise after a release (the GPU nodes go, or stay and bill) is what the
    pool's autoscaler allows: docs/cost.md's minimum per mode, and the README's list of modes
    whose GPU nodes go, match each mode's rendered `totalMinNodeCount`."""
    claims = _documented_minimums()
    assert set(claims) == {c.value for c in Capacity}, claims
    readme = " ".join((ROOT / "README.md").read_text().split())
    going = re.search(r"on ([a-z -]+), the GPU nodes go once", readme)
    assert going, "README.md no longer says which pools' GPU nodes go after a release"
    for capacity in Capacity:
        pool = _pool(capacity, "res" if capacity is Capacity.RESERVATION else None)
        minimum = pool["autoscaling"]["totalMinNodeCount"]
        assert claims[capacity.value] == ("min 0" if minimum == 0 else "min = max nodes"), capacity
        assert (capacity.value in going.group(1).replace(" or ", " ")) == (minimum == 0), capacity


def test_flex_start_pool_starts_empty_and_scales_up():
    """Flex-start capacity arrives through the autoscaler: start at 0, allow 0..max."""
    pool = _pool(Capacity.FLEX_START)
    assert pool["nodeConfig"]["flexStart"] is True
    assert pool["initialNodeCount"] == 0
    assert pool["autoscaling"]["totalMinNodeCount"] == 0
    assert pool["autoscaling"]["totalMaxNodeCount"] == 2  # the RayCluster's workers, no more


@pytest.mark.parametrize(
    ("capacity", "reservation", "placement", "auto_repair"),
    [
        # Cluster Toolkit's gke-a4 / gke-a3-ultragpu reservation pools: no placement policy.
        (Capacity.RESERVATION, "res", None, True),
        (Capacity.SPOT, None, {"type": "COMPACT"}, True),
        # CT preconditions: flex-start needs auto_repair false; COMPACT with flex-start is
        # supported on A3 Ultra and A4.
        (Capacity.FLEX_START, None, {"type": "COMPACT"}, False),
    ],
)
@pytest.mark.parametrize("target", ["a4", "a3u"])
def test_placement_and_repair_follow_cluster_toolkits_preconditions(
    target, capacity, reservation, placement, auto_repair
):
    """Per capacity on A4 / A3 Ultra: which placement policy and whether GKE repairs nodes."""
    pool = _pool(capacity, reservation, target)
    assert pool.get("placementPolicy") == placement
    assert pool["management"] == {"autoRepair": auto_repair, "autoUpgrade": True}


def test_a4x_pool_uses_its_workload_policy_and_its_bundled_local_ssds():
    """A4X: COMPACT with the named 1x72 policy; ephemeral storage on the machine's own local
    SSDs (count 0 = the bundled set), not on the 100 GB boot disk that cannot hold 520 Gi."""
    pool = _pool(Capacity.RESERVATION, "res", "a4x")
    assert pool["placementPolicy"] == {"type": "COMPACT", "policyName": "c-1x72-placement"}
    assert pool["nodeConfig"]["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 0}


@pytest.mark.parametrize("reservation", ["res", "res/reservationBlocks/block-7"])
def test_reservation_names_and_blocks_pass_through(reservation):
    """A reservation or one of its blocks is consumed SPECIFICally, as Cluster Toolkit does."""
    affinity = _pool(Capacity.RESERVATION, reservation)["nodeConfig"]["reservationAffinity"]
    assert affinity["consumeReservationType"] == "SPECIFIC_RESERVATION"
    assert affinity["values"] == [reservation]
