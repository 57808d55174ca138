"""The fabric check's bandwidth floors (components/facts/expectations.py): set from a published
healthy measurement and the NICs' bus-bandwidth relation, at a share that a broken fabric falls
below and a healthy one clears."""

from __future__ import annotations

import pytest

from components.facts.expectations import (
    EXPECTATIONS, FLOOR_FRACTION, HEALTHY_FRACTION, network_busbw_bound_gbs,
)
from components.facts.hardware import Target, profile
from components.check import cluster_check

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


def _deployed(busbw: float) -> dict:
    """A ClusterCheckRun's outputs as a deployed stack holds them, checked at the old 25 GB/s
    floor (before this program took its floors from a healthy figure)."""
    want = cluster_check.expected(_args())
    old = {**{k: v for k, v in want.items() if k != "healthy_busbw_gbs"}, "min_busbw_gbs": 25.0}
    return {"submission_id": "verl-gke-a4-check-old", "entrypoint": "python3 -c ...",
            "runtime_env": {}, "expected": old, "access": {}, "timeout_s": 1260,
            "metadata": {}, "version": cluster_check.PROVIDER_VERSION, "status": "PASSED",
            "bus_bandwidth_gbs": busbw, "read_mbps": 900.0, "world_size": 16, "inventory": []}


def _args() -> cluster_check.ClusterCheckArgs:
    return cluster_check.ClusterCheckArgs(
        profile=profile("a4"), nodes=2, model_path="/data/m", runtime_env={}, namespace="default",
        head_service="h",
    )


def test_new_floors_judge_the_last_measurement_without_running_the_check_again():
    """A program upgrade that only moves the floors does not re-run the check (a re-run stops
    the training job first): the diff is an update, and the update holds the measurement made
    to the new floor, failing `up` with the figures and the fix when it falls short."""
    provider = cluster_check.ClusterCheckProvider()
    news = {**_deployed(0.0), "expected": cluster_check.expected(_args()),
            "submission_id": "verl-gke-a4-check-new"}
    news = {k: v for k, v in news.items() if k not in ("status", "bus_bandwidth_gbs")}
    healthy = _deployed(352.0)
    diff = provider.diff("verl-gke-a4-check-old", healthy, news)
    assert diff.changes and not diff.replaces
    assert provider.update("verl-gke-a4-check-old", healthy, news).outs["bus_bandwidth_gbs"] == 352.0
    with pytest.raises(cluster_check.RayAccessError, match=r"130 GB/s is below the a4 floor of 215"):
        provider.update("verl-gke-a4-check-old", _deployed(130.0), news)
    reshaped = {**news, "expected": {**news["expected"], "nodes": 4}}
    assert provider.diff("verl-gke-a4-check-old", healthy, reshaped).replaces == ["submission_id", "expected"]


def test_the_check_reports_its_figure_against_a_healthy_clusters():
    """The check's summary line and the stack outputs put the measured bus bandwidth next to a
    healthy cluster's and the floor."""
    want = cluster_check.expected(_args())
    measured = {"inventory": [{"node": "n", "gpus": 8, "names": []}] * 2,
                "allReduce": {"busbw_gbs": 179.0, "world_size": 16}, "read": {"mbps": 900.0, "path": "/data/m"}}
    line = cluster_check.summary(measured, want)
    assert "179.0 GB/s over 16 ranks (50% of a healthy a4's 358.3 GB/s, floor 215)" in line
