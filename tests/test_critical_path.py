"""The critical path of `pulumi up` (tools/critical_path.py) and the parallelism it relies on.

What may run at the same time must not wait for each other: staging needs the bucket, its grant
and a CPU node, never the GPU pool; the KubeRay operator, the DRA driver and the head's
NetworkPolicy install while GPU nodes are created; only the RayCluster waits for them.
"""

from __future__ import annotations

import pytest

from tests.conftest import STACK_MODES, rendered
from tools import critical_path
from tools.critical_path import FINAL, RAY_CLUSTER, depends_transitively

GPU_POOL = ("gcp:container/nodePool:NodePool", "gpu-pool")
STAGING = ("kubernetes:batch/v1:Job", "staging-job")


def _urn(recording, type_, name=None):
    return recording.one(type_, name).urn


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_staging_and_the_gpu_branch_run_side_by_side(stack, mode):
    """Staging never waits for GPU nodes or the RayCluster, nor they for staging; the job
    waits for both."""
    _, recording = rendered(stack, mode)
    staging, ray, job = _urn(recording, *STAGING), _urn(recording, RAY_CLUSTER), _urn(recording, FINAL)
    assert not depends_transitively(recording, staging, ray)
    assert not depends_transitively(recording, ray, staging)
    assert depends_transitively(recording, job, staging) and depends_transitively(recording, job, ray)
    if mode == "standard":
        pool = _urn(recording, *GPU_POOL)
        assert not depends_transitively(recording, staging, pool)
        assert depends_transitively(recording, ray, pool)


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_only_the_ray_cluster_waits_for_gpu_nodes(stack, mode):
    """The head's NetworkPolicy, the KubeRay operator and the DRA driver (A4X) are installed
    while the GPU pool is created; the bucket's grant while the cluster is."""
    _, recording = rendered(stack, mode)
    policy = _urn(recording, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    grant = _urn(recording, "gcp:storage/bucketIAMMember:BucketIAMMember")
    cluster = _urn(recording, "gcp:container/cluster:Cluster")
    assert not depends_transitively(recording, grant, cluster)
    # ...and whatever mounts the bucket waits for that grant.
    assert depends_transitively(recording, _urn(recording, *STAGING), grant)
    if mode != "standard":
        return
    pool = _urn(recording, *GPU_POOL)
    assert not depends_transitively(recording, policy, pool)
    releases = recording.of_type("kubernetes:helm.sh/v3:Release")
    assert len(releases) == (2 if stack == "a4x" else 0)
    for release in releases:
        assert not depends_transitively(recording, release.urn, pool), release.name


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_the_critical_path_is_a_chain_of_waits_to_the_first_step(stack, mode):
    """It ends at the GRPO job, starts at a resource that waits for nothing, each step waits
    for the one before it, and the estimate is the sum of the durations along it."""
    _, recording = rendered(stack, mode)
    chain = critical_path.critical_path(recording)
    assert chain[-1].resource.type == FINAL
    custom = {r.urn for r in recording.resources if r.custom}
    assert not critical_path.waits_for(chain[0].resource, custom)
    for earlier, later in zip(chain, chain[1:]):
        assert earlier.resource.urn in critical_path.waits_for(later.resource, custom)
    assert chain[-1].done_at == pytest.approx(sum(step.duration.minutes for step in chain))
    names = [step.resource.name for step in chain]
    assert "staging-job" in names  # 66 GB of model outweighs GPU nodes plus the image pull


def test_every_duration_says_where_it_comes_from():
    """A figure is cited or marked as an assumption."""
    for key, duration in critical_path.DURATIONS.items():
        assert duration.minutes > 0, key
        assert duration.source.startswith("assumption:") or "cloud.google.com" in duration.source, key


def test_the_report_names_the_path_and_the_estimate():
    """What `make critical-path` prints: each step with its finish time, the estimate, sources."""
    _, recording = rendered("a4x", "standard")
    chain = critical_path.critical_path(recording)
    ray_ready = critical_path.critical_path(recording, RAY_CLUSTER)[-1].done_at
    text = critical_path.report("a4x", None, chain, ray_ready)
    assert f"Estimate to the first training step: {chain[-1].done_at:.0f} min" in text
    assert "gke-cluster" in text and "assumption:" in text
    assert ray_ready < chain[-1].done_at
