"""`pulumi destroy` order, from the dependencies plan.json records (tools/destroy_graph.py).

After the DeletionProtection guard (deleted first; it stops the destroy while protected), every
stack tears down in this order, each layer only once the one before it is gone:
job, RayCluster, what the Ray pods mount, node pools, cluster, networks (VPCs, subnets,
firewalls; the nodes' Cloud NAT after everything on the nodes). And nothing the bucket holds is
deleted.
"""

from __future__ import annotations

import pytest

from tests.conftest import STACK_MODES, rendered
from tools import destroy_graph, plan

GUARD = "pulumi-python:dynamic/verl-gke:DeletionProtection"


def _document(stack: str, mode: str) -> dict:
    inputs, recording = rendered(stack, mode)
    return plan.plan_document(stack, inputs, recording)


def _mounts(resources: list[dict]) -> set[str]:
    """The PVCs the Ray pods mount, and the PVs those claims bind."""
    [ray] = [r for r in resources if r["type"] == "kubernetes:ray.io/v1:RayCluster"]
    spec = ray["inputs"]["spec"]
    templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for t in templates for v in t["spec"].get("volumes", []) if "persistentVolumeClaim" in v
    }
    pvcs = [r for r in resources if r["type"] == "kubernetes:core/v1:PersistentVolumeClaim"
            and r["inputs"]["metadata"]["name"] in claims]
    volumes = {r["inputs"]["spec"]["volumeName"] for r in pvcs}
    pvs = [r for r in resources if r["type"] == "kubernetes:core/v1:PersistentVolume"
           and r["inputs"]["metadata"]["name"] in volumes]
    assert len(pvcs) == len(claims) >= 1 and len(pvs) == len(pvcs)
    return {r["urn"] for r in pvcs + pvs}


def _layers(resources: list[dict]) -> list[tuple[str, set[str]]]:
    """The issue's destroy order as sets of URNs, first deleted first."""
    of = lambda *types: {r["urn"] for r in resources if r["type"] in types}  # noqa: E731
    return [
        ("job", of("pulumi-python:dynamic/verl-gke:GrpoRun")),
        ("RayCluster", of("kubernetes:ray.io/v1:RayCluster")),
        ("mounts", _mounts(resources)),
        ("node pools", of("gcp:container/nodePool:NodePool")),
        ("cluster", of("gcp:container/cluster:Cluster")),
        ("networks", of("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork",
                        "gcp:compute/firewall:Firewall")),
    ]


def _out_of_order(resources: list[dict]) -> set[tuple[str, str, str, str]]:
    """(earlier layer, resource, later layer, resource) pairs no dependency path orders."""
    before = destroy_graph.deleted_before(resources)
    names = {r["urn"]: r["name"] for r in resources}
    layers = [(name, urns) for name, urns in _layers(resources) if urns]
    return {
        (earlier, names[first], later, names[then])
        for i, (earlier, firsts) in enumerate(layers)
        for later, thens in layers[i + 1:]
        for then in thens
        for first in firsts - before[then]
    }


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def test_destroy_deletes_job_raycluster_mounts_pools_cluster_networks_in_that_order(stack, mode):
    """Every resource of a later layer is deleted only after every resource of each earlier
    layer (a dependency path forces it, not luck of scheduling), the guard before them all.
    The claim before the GPU pool: its finalizer holds the delete until no pod mounts it, so no
    GPU node goes while a gcsfuse sidecar on it still flushes checkpoint writes."""
    resources = _document(stack, mode)["resources"]
    [guard] = [r["urn"] for r in resources if r["type"] == GUARD]
    assert destroy_graph.first_deleted(resources) == {guard}
    names = [name for name, urns in _layers(resources) if urns]
    expected = ["job", "RayCluster", "mounts", "node pools", "cluster", "networks"]
    if mode == "autopilot":
        expected.remove("node pools")
    assert names == expected
    assert _out_of_order(resources) == set()


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def test_the_nodes_way_out_goes_after_everything_that_runs_on_nodes(stack, mode):
    """Cloud Router and NAT (the private nodes' egress) are deleted after the job, the
    RayCluster, the mounts and every node pool. Not necessarily after the control plane, which
    does not use them: holding the cluster's creation for them would put the NAT on `pulumi up`'s
    critical path for nothing (PrimaryNetwork runs beside the control plane on purpose)."""
    resources = _document(stack, mode)["resources"]
    before = destroy_graph.deleted_before(resources)
    egress = {r["urn"] for r in resources if r["type"] in ("gcp:compute/router:Router", "gcp:compute/routerNat:RouterNat")}
    assert len(egress) == 2
    on_nodes = set().union(*(urns for name, urns in _layers(resources) if name in ("job", "RayCluster", "mounts", "node pools")))
    for urn in egress:
        assert on_nodes <= before[urn], on_nodes - before[urn]


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def test_destroy_deletes_nothing_the_bucket_holds(stack, mode):
    """The bucket is retained and never emptied (retainOnDelete, no forceDestroy), and the PV
    keeps the data when its claim goes (Retain): model, data and checkpoints survive a destroy."""
    resources = _document(stack, mode)["resources"]
    [bucket] = [r for r in resources if r["type"] == "gcp:storage/bucket:Bucket"]
    assert bucket["options"]["retainOnDelete"] is True
    assert bucket["inputs"]["forceDestroy"] is False
    assert not bucket["options"]["deleteBeforeReplace"]
    for pv in (r for r in resources if r["type"] == "kubernetes:core/v1:PersistentVolume"):
        assert pv["inputs"]["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # Nothing else in the stack is a GCS object or folder that a destroy would delete.
    assert not [r["type"] for r in resources if r["type"].startswith("gcp:storage/")
                and r["type"] not in ("gcp:storage/bucket:Bucket", "gcp:storage/bucketIAMMember:BucketIAMMember")]


@pytest.mark.parametrize("stack", ["a4", "a4x"])
def test_staging_does_not_wait_for_the_gpu_pool(stack):
    """The claim waits for the GPU pool; the staging Job, mounting the bucket inline, does not:
    it still fills the bucket while the GPU nodes come up."""
    resources = _document(stack, "standard")["resources"]
    before = destroy_graph.deleted_before(resources)
    urn = {r["name"]: r["urn"] for r in resources}
    assert urn["storage-pvc"] in before[urn["gpu-pool"]] and urn["storage-pv"] in before[urn["gpu-pool"]]
    assert urn["staging-job"] not in before[urn["gpu-pool"]]
