"""The fabric check's bandwidth floors (components/facts/expectations.py): set from a published
healthy measurement and the NICs' bus-bandwidth relation, at a share that a broken fabric falls
below and a healthy one clears."""

from __future__ import annotations

import pytest

from components.facts.expectations import (
    EXPECTATIONS, FLOOR_FRACTION, HEALTHY_FRACTION, network_busbw_bound_gbs,
)
from components.facts.hardware import Target

# Cluster Toolkit examples/gke-a4/README.md (commit 2c54caab): two a4-highgpu-8g nodes, 16
# ranks, out-of-place busbw at 1 GiB, the cluster check's message size.
PUBLISHED_A4_BUSBW_GBS = 358.32


def test_a_healthy_a4_cluster_as_published_clears_the_floor_with_room_for_a_slow_day():
    """The published two-node A4 figure is the a4 healthy figure, and it clears the floor even
    25% slower: a healthy cluster on a slow day does not fail `pulumi up`."""
    a4 = EXPECTATIONS[Target.A4]
    assert a4.healthy_busbw_gbs == pytest.approx(PUBLISHED_A4_BUSBW_GBS, abs=0.05)
    assert 0.75 * PUBLISHED_A4_BUSBW_GBS > a4.min_busbw_gbs


@pytest.mark.parametrize("target", list(Target))
def test_a_broken_fabric_falls_below_the_floor(target):
    """What the check exists to catch measures under the floor on every target: NCCL on TCP
    over the gVNIC (a few GB/s), and a dead NIC whose channel doubles up on a neighbour's NIC
    (the collective at about half the healthy rate). One NIC's line rate, which the old floor
    was derived from, is far below a working fabric: a floor under it passed a half-speed
    fabric."""
    expected = EXPECTATIONS[target]
    assert 5.0 < expected.min_busbw_gbs
    assert expected.healthy_busbw_gbs / 2 < expected.min_busbw_gbs
    assert expected.nic_gbps_per_gpu / 8 < expected.min_busbw_gbs


def test_the_bound_is_every_nic_of_a_node_at_line_rate():
    """Bus bandwidth across nodes is bounded by the node's NICs together (one NCCL channel per
    NIC), not by one NIC: 8 x 400 Gbps = 400 GB/s on a4 and a3u, 4 x 400 Gbps = 200 GB/s on a4x;
    the published A4 figure sits at 0.896 of it."""
    assert {t: e.network_busbw_gbs for t, e in EXPECTATIONS.items()} == {
        Target.A4: 400.0, Target.A3_ULTRA: 400.0, Target.A4X: 200.0,
    }
    assert network_busbw_bound_gbs(8, 400) * HEALTHY_FRACTION == pytest.approx(PUBLISHED_A4_BUSBW_GBS)
    for expected in EXPECTATIONS.values():
        assert expected.min_busbw_gbs == pytest.approx(
            expected.network_busbw_gbs * HEALTHY_FRACTION * FLOOR_FRACTION, abs=0.1
        )
