"""The critical path of `pulumi up` (tools/critical_path.py) and the parallelism it relies on.

What may run at the same time must not wait for each other: staging needs the bucket, its grant
and a CPU node, never the GPU pool, and its branch ends before the GPU branch; the KubeRay operator, the DRA driver and the head's
NetworkPolicy install while GPU nodes are created; only the RayCluster waits for them.
"""

from __future__ import annotations

import pytest

from tests.conftest import STACK_MODES, rendered
from tools import critical_path, plan
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
    while the GPU pool is created; whatever mounts the bucket waits for the bucket's grant."""
    _, recording = rendered(stack, mode)
    policy = _urn(recording, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    grant = _urn(recording, "gcp:storage/bucketIAMMember:BucketIAMMember")
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
def test_the_bucket_grant_waits_for_the_cluster_and_its_workload_pool(stack, mode):
    """The grant names a member of the project's Workload Identity pool, which GKE creates with
    the first Workload Identity cluster; IAM refuses a member of a pool that does not exist, so
    on a fresh project the grant must be created after the cluster (REAL-PROVIDER-REVIEW-3
    finding 1): plan.json records the edge. On Standard the grant is made while the system pool
    is created, off the critical path."""
    inputs, recording = rendered(stack, mode)
    resources = plan.plan_document(stack, inputs, recording)["resources"]
    [grant] = [r for r in resources if r["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember"]
    [cluster] = [r for r in resources if r["type"] == "gcp:container/cluster:Cluster"]
    assert cluster["urn"] in grant["dependsOn"]
    assert "workloadIdentityPools/" in grant["inputs"]["member"]
    if mode == "standard":
        names = [step.resource.name for step in critical_path.critical_path(recording)]
        assert grant["name"] not in names


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


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_staging_ends_before_the_gpu_branch_and_is_off_the_critical_path(stack, mode):
    """The path to the first step runs through the cluster, the GPU nodes and the RayCluster,
    never through staging, whose branch ends first: with the estimate's throughput, and with
    half of it, so an estimate off by 2x still leaves the GPUs never waiting for the model."""
    _, recording = rendered(stack, mode)
    names = [step.resource.name for step in critical_path.critical_path(recording)]
    assert "staging-job" not in names and "ray-ray-cluster" in names
    ray_ready = critical_path.critical_path(recording, RAY_CLUSTER)[-1].done_at
    staging_ready = critical_path.staging_done_at(recording)
    assert staging_ready is not None and staging_ready < ray_ready
    model = critical_path.MODEL_GB * 1000 / critical_path.staging_mbps() / 60
    assert staging_ready + model < ray_ready  # the model part twice as long


def test_staging_throughput_is_bounded_by_its_sources():
    """The staging estimate is the least of its cited ceilings: never above hf_transfer's, the
    node's or the measured pipeline's, and lower with fewer files at once."""
    mbps = critical_path.staging_mbps()
    ceilings = (critical_path.HF_TRANSFER_MBPS, critical_path.NODE_MBPS, critical_path.PIPELINE_MBPS)
    assert mbps <= min(ceilings)
    assert critical_path.staging_mbps(workers=1) < mbps
    duration = critical_path.DURATIONS[critical_path.STAGING_JOB]
    assert f"{mbps:.0f} MB/s" in duration.source and "hf_transfer" in duration.source


def test_the_cluster_check_estimate_comes_from_its_script():
    """The check's duration is read from its script's all-reduce and read sizes at their floors,
    not a placeholder: it names them and takes more than Ray's start-up alone."""
    defaults = critical_path._script_defaults(critical_path.CLUSTER_CHECK_SCRIPT)
    assert {"size-mb", "iters", "read-mb"} <= set(defaults)
    duration = critical_path.DURATIONS[critical_path.CLUSTER_CHECK]
    assert duration.minutes > 1
    assert f"{defaults['read-mb']} MiB" in duration.source
    assert f"{defaults['size-mb']} MiB" in duration.source


def test_every_duration_says_where_it_comes_from():
    """A figure is cited, marked as an assumption, or an estimate that names its figures."""
    for key, duration in critical_path.DURATIONS.items():
        assert duration.minutes > 0, key
        marked = duration.source.startswith(("assumption:", "estimate:"))
        cited = marked or "cloud.google.com" in duration.source
        assert cited, key


def test_the_report_names_the_path_and_the_estimate():
    """What `make critical-path` prints: each step with its finish time, the estimate, sources,
    and staging's own branch with its estimate."""
    _, recording = rendered("a4x", "standard")
    chain = critical_path.critical_path(recording)
    ray_ready = critical_path.critical_path(recording, RAY_CLUSTER)[-1].done_at
    staging = critical_path.staging_step(recording)
    text = critical_path.report("a4x", None, chain, ray_ready, staging)
    assert f"Estimate to the first training step: {chain[-1].done_at:.0f} min" in text
    assert "gke-cluster" in text and "assumption:" in text
    assert ray_ready < chain[-1].done_at
    # Staging is off the path, so its estimate is shown on its own, with its sources.
    assert f"staging is done after {staging.done_at:.0f} min" in text
    assert f"Staging, on its own branch: +{staging.duration.minutes:g} min, estimate:" in text


def test_any_stack_file_has_a_critical_path_and_a_missing_one_is_named(tmp_path, monkeypatch, capsys):
    """`make critical-path STACK=<own>` plans a stack file of the user's own; a stack without
    a file exits 2 naming the file and the fix, without a traceback."""
    from pathlib import Path

    from tools import cli

    root = Path(__file__).resolve().parents[1]
    monkeypatch.setattr(plan, "STACK_DIR", tmp_path)
    (tmp_path / "Pulumi.team-b.yaml").write_text((root / "Pulumi.a4.yaml").read_text())
    assert cli.run(critical_path.main, ["--stack", "team-b"]) == 0
    out = capsys.readouterr().out
    assert "Critical path of `pulumi up` for team-b" in out and "Estimate to the first training step" in out
    assert cli.run(critical_path.main, ["--stack", "nope"]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.nope.yaml" in err and "pulumi stack init nope" in err and "Traceback" not in err
