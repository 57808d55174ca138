"""The critical path of `pulumi up` (tools/critical_path.py) and the parallelism it relies on.

What may run at the same time must not wait for each other: staging needs the bucket, its grant
and a CPU node, never the GPU pool, and its branch ends before the GPU branch; the KubeRay operator, the DRA driver and the head's
NetworkPolicy install while GPU nodes are created; only the RayCluster waits for them.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from tests.conftest import STACK_MODES, rendered
from tools import critical_path, mockrun, plan
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
def test_staging_ends_before_the_gpu_branch_on_a_fresh_project(stack, mode):
    """On a fresh project (the image pulled, not streamed) the path runs through the cluster,
    the GPU nodes and the RayCluster, never through staging, whose branch ends first."""
    _, recording = rendered(stack, mode)
    names = [step.resource.name for step in critical_path.critical_path(recording)]
    assert "staging-job" not in names and "ray-ray-cluster" in names
    ray_ready = critical_path.critical_path(recording, RAY_CLUSTER)[-1].done_at
    staging_ready = critical_path.staging_done_at(recording)
    assert staging_ready is not None and staging_ready < ray_ready


def test_staging_takes_the_path_once_the_image_streams():
    """With a streamed image the GPU branch shrinks below staging's:
    the check then waits for staging, and the path shows it, with its own figures."""
    _, recording = rendered("a4", "standard")
    f = dataclasses.replace(critical_path.facts(recording), warm_image=True)
    chain = critical_path.critical_path(recording, f=f)
    ray_ready = critical_path.critical_path(recording, RAY_CLUSTER, f=f)[-1].done_at
    staging = critical_path.staging_step(recording, f)
    if staging.done_at > ray_ready:
        assert "staging-job" in [step.resource.name for step in chain]
    else:
        assert "staging-job" not in [step.resource.name for step in chain]


def test_staging_throughput_is_bounded_by_its_sources():
    """The staging estimate is the least of its cited ceilings: never above hf_transfer's, the
    node's or the measured pipeline's, and lower with fewer files at once."""
    mbps = critical_path.staging_mbps()
    ceilings = (critical_path.HF_TRANSFER_MBPS, critical_path.NODE_MBPS, critical_path.PIPELINE_MBPS)
    assert mbps <= min(ceilings)
    assert critical_path.staging_mbps(workers=1) < mbps
    duration = critical_path.staging_duration(autopilot=False)
    assert f"{mbps:.0f} MB/s" in duration.source and "hf_transfer" in duration.source


def test_staging_parallelism_is_read_from_the_code(monkeypatch):
    """Staging's rate follows model_staging.DOWNLOAD_WORKERS as the code sets it, not a copy:
    more files at once, a faster staging and an earlier end of its branch."""
    from components.storage import model_staging

    before = critical_path.staging_duration(autopilot=False).minutes
    monkeypatch.setattr(model_staging, "DOWNLOAD_WORKERS", model_staging.DOWNLOAD_WORKERS * 2)
    after = critical_path.staging_duration(autopilot=False)
    assert after.minutes < before
    assert f"{model_staging.DOWNLOAD_WORKERS} files at once" in after.source


def test_the_cluster_check_estimate_comes_from_its_script():
    """The check's duration is read from its script's all-reduce and read sizes at their floors,
    not a placeholder: it names them and takes more than Ray's start-up alone."""
    defaults = critical_path._script_defaults(critical_path.CLUSTER_CHECK_SCRIPT)
    assert {"size-mb", "iters", "read-mb"} <= set(defaults)
    duration = critical_path.cluster_check_duration("a4")
    assert duration.minutes > 1
    assert f"{defaults['read-mb']:g} MiB" in duration.source
    assert f"{defaults['size-mb']:g} MiB" in duration.source


@pytest.mark.parametrize("target", ["a4", "a3u", "a4x"])
def test_the_check_quotes_the_stacks_own_fabric_floor_and_durations_as_they_are(target):
    """RE-16: the all-reduce is timed at this target's own floor, which the text names as its
    own, and a duration under a second prints as it is (`0.4 s`), never as `0 s`."""
    from components.facts.expectations import EXPECTATIONS

    source = critical_path.cluster_check_duration(target).source
    assert f"at {target}'s own {EXPECTATIONS[target].min_busbw_gbs:g} GB/s" in source
    assert "lowest of any target" not in source
    assert " 0 s" not in source and re.search(r"\d\.\d s at most", source)


def _cited(source: str) -> bool:
    """An assumption, an estimate that names its figures, or a citation (a page, a file, an
    issue)."""
    return ("assumption" in source or source.startswith("estimate:")
            or re.search(r"[\w-]+\.(com|md|py|go|yaml)\b|#\d+", source) is not None)


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_every_phase_says_where_its_figure_comes_from(stack, mode):
    """Each phase on the path and on staging's branch is cited, an estimate naming its
    figures, or marked as an assumption."""
    _, recording = rendered(stack, mode)
    steps = critical_path.critical_path(recording) + [critical_path.staging_step(recording)]
    for step in steps:
        for phase in step.duration.phases:
            assert _cited(phase.source), (step.resource.name, phase)


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_the_long_boxes_are_split_into_their_phases(stack, mode):
    """The GPU nodes (VMs to registered, driver), the RayCluster (image, Ray start) and the
    run (imports, the weight read, vLLM, the first step) are phases of their own, each closed
    by a milestone the job's timeline records."""
    _, recording = rendered(stack, mode)
    phases = [p for step in critical_path.critical_path(recording) for p in step.duration.phases]
    by_milestone = {}
    for phase in phases:
        by_milestone.setdefault(phase.milestone, []).append(phase.what)
    assert any("GPU VMs" in w for w in by_milestone[critical_path.REGISTERED])
    assert any("driver" in w for w in by_milestone[critical_path.ALLOCATABLE])
    assert any(w.startswith("image:") for w in by_milestone[critical_path.PULLED])
    assert any("Ray head" in w for w in by_milestone[critical_path.RAY_READY])
    run = by_milestone[critical_path.FIRST_STEP]
    for part in ("imports", "reads the 66 GB", "vLLM", "first rollout and update"):
        assert any(part in w for w in run), part


# --- The levers: each built into (or filtered out of) a recorded plan, so that each figure is
# seen to move for its lever's reason whichever of them the program has. ---


def _copy(recording):
    return dataclasses.replace(recording, resources=list(recording.resources))


def _without(recording, match):
    copy = _copy(recording)
    copy.resources = [r for r in copy.resources if not match(r)]
    return copy


def _is_prepull(resource):
    return resource.type == critical_path.DAEMON_SET and critical_path._is_prepull(resource)


def _with_prepull(recording, head: bool):
    """The plan with the pre-pull DaemonSet as the program creates it: after the Kubernetes
    provider (the system pool), on the GPU nodes and, with `head`, the system pool."""
    from components.cluster.gke_cluster import SYSTEM_POOL

    copy = _without(recording, _is_prepull)
    provider = copy.one("pulumi:providers:kubernetes")
    terms = [{"matchExpressions": [{"key": "cloud.google.com/gke-accelerator"}]}]
    if head:
        terms.append({"matchExpressions": [{"key": "cloud.google.com/gke-nodepool",
                                            "values": [SYSTEM_POOL]}]})
    copy.resources.append(mockrun.Registered(
        urn=f"{provider.urn}$DaemonSet::{critical_path.PREPULL}", type=critical_path.DAEMON_SET,
        name=critical_path.PREPULL, parent=None, custom=True,
        inputs={"metadata": {"name": critical_path.PREPULL},
                "spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": terms}}}}}}},
        dependencies=frozenset({provider.urn}),
        options=mockrun.Options(provider=provider.urn),
    ))
    return copy


def _with_prewarm(recording):
    """The plan with an image-streaming prewarm after the mirror's repository."""
    copy = _copy(recording)
    repository = copy.one("gcp:artifactregistry/repository:Repository")
    copy.resources.append(mockrun.Registered(
        urn=f"{repository.urn}$ImagePrewarm::{critical_path.PREWARM}",
        type="pulumi-python:dynamic/verl-gke:ImagePrewarm", name=critical_path.PREWARM,
        parent=None, custom=True, inputs={}, dependencies=frozenset({repository.urn}),
    ))
    return copy


def _phase(recording, starts: str):
    """The first phase named `starts` on the path to the RayCluster or to the first step."""
    walk = critical_path.Walk(recording)
    steps = walk.chain(RAY_CLUSTER) + walk.chain()
    phases = [p for s in steps for p in s.duration.phases]
    return next(p for p in phases if p.what.startswith(starts))


def _total(recording) -> float:
    return critical_path.critical_path(recording)[-1].done_at


@pytest.mark.parametrize("stack", ["a4", "a3u", "a4x"])
def test_the_prepull_daemonset_starts_the_pull_at_node_registration(stack):
    """Without the DaemonSet the GPU nodes pull the whole image once their pods are scheduled,
    after the driver; with it they pull from registration (under the driver), and on a4/a3u
    from a repository its system-pool pod has already made fetch the layers from Docker Hub:
    the image phase, the RayCluster and the first step come earlier, and the phase says why."""
    _, recording = rendered(stack, "standard")
    without = _without(recording, _is_prepull)
    image = _phase(without, "image:")
    assert image.minutes == critical_path.FIRST_PULL and "no verl-image-prepull" in image.what

    gpu_only = _with_prepull(recording, head=False)
    pulled = _phase(gpu_only, "image:")
    assert "from node registration" in pulled.what and critical_path.PREPULL in pulled.what
    # The pull overlaps the driver and the RayCluster's creation: it saves at least the driver.
    saved = image.minutes - pulled.minutes
    assert saved >= critical_path.DRIVER.minutes
    assert _total(gpu_only) == pytest.approx(_total(without) - saved, abs=0.01)

    with_head = _with_prepull(recording, head=True)
    in_region = _phase(with_head, "image:")
    assert "in-region repository" in in_region.what
    assert in_region.minutes < pulled.minutes
    assert _total(with_head) < _total(gpu_only)


@pytest.mark.parametrize("stack", ["a4", "a4x"])
def test_a_prewarm_turns_the_first_pull_into_a_stream(stack):
    """With the image in the streaming cache before the nodes ask, the image phase is a stream
    (seconds to container start, GKE's blog) and the run pays lazy reads at import (GKE's
    limitation); without streaming on the nodes the prewarm changes nothing."""
    _, recording = rendered(stack, "standard")
    pulled = _without(recording, _is_prepull)
    prewarmed = _with_prewarm(pulled)
    image = _phase(prewarmed, "image:")
    assert "prewarmed stream" in image.what and image.minutes == critical_path.STREAMED
    assert _phase(prewarmed, "imports read lazily").minutes == critical_path.LAZY_READS.minutes
    assert _total(prewarmed) < _total(pulled) - 5
    if stack == "a4x":
        assert "arm64" in image.source and "assumption" in image.source
    # Streaming off on the GPU pool: the prewarm serves nothing.
    copy = _copy(prewarmed)
    pool = copy.one(*GPU_POOL)
    config = {**pool.inputs["nodeConfig"], "gcfsConfig": {"enabled": False}}
    copy.resources[copy.resources.index(pool)] = dataclasses.replace(
        pool, inputs={**pool.inputs, "nodeConfig": config})
    assert _phase(copy, "image:").minutes == critical_path.FIRST_PULL
    assert "streaming only" in _phase(copy, "image:").source


def test_a_one_node_default_pool_shortens_the_clusters_create():
    """The Cluster's transient default pool is one node per zone of its node_locations (three
    zones of the region without them); one node deletes faster, and the phase says how many."""
    _, recording = rendered("a4", "standard")
    cluster = recording.one(critical_path.CLUSTER)
    for zones, nodes in ((["us-central1-b"], 1), (None, critical_path.DEFAULT_ZONES)):
        copy = _copy(recording)
        copy.resources[copy.resources.index(cluster)] = dataclasses.replace(
            cluster, inputs={**cluster.inputs, "nodeLocations": zones})
        box = critical_path.critical_path(copy)[2].duration
        assert any(f"{nodes} node" in p.what for p in box.phases)
        if nodes == 1:
            one_node = box.minutes
        else:
            assert box.minutes > one_node


def test_the_weight_read_is_bounded_by_the_checks_read_floor(monkeypatch):
    """The actor's one read of the weights takes the model's size at the cluster check's read
    floor, read from the code: a raised floor shortens it in proportion, and the phase says it
    is a bound set by the check."""
    _, recording = rendered("a4", "standard")
    from components.facts import expectations

    read = _phase(recording, "actor rank 0 reads")
    monkeypatch.setattr(expectations, "MIN_READ_MBPS", expectations.MIN_READ_MBPS * 2)
    faster = _phase(recording, "actor rank 0 reads")
    assert faster.minutes == pytest.approx(read.minutes / 2, abs=0.01)
    assert "read floor" in faster.source and "a bound" in faster.source


@pytest.mark.parametrize(("stack", "validates"), [("a4", False), ("a3u", False), ("a4x", True)])
def test_a_validation_pass_is_counted_where_the_run_does_one(stack, validates):
    """The run's resolved config says whether verl validates before step 1: a4/a3u turn it off,
    A4X leaves it to verl (True); its figure is the step model's rollout of GSM8K's test
    split. The first step itself is the step model's."""
    _, recording = rendered(stack, "standard")
    f = critical_path.facts(recording)
    assert f.val_before_train is validates
    whats = [p.what for p in critical_path.run_duration(f).phases]
    assert ("validation before step 1" in whats) is validates
    assert "tools/step_model.py" in f.first_step.source and f.first_step.minutes > 0


@pytest.mark.parametrize("capacity", ["spot", "flex-start"])
def test_spot_and_flex_start_wait_for_capacity_without_bound(capacity):
    """Spot: the pool's create waits for the VMs, up to its timeout; flex-start: the pool
    returns with no node and the RayCluster carries the wait and the VMs, up to its own
    timeout. Both say there is no bound but the timeout, and the total holds only with
    capacity."""
    ns = plan.project_name()
    _, recording = plan.run_program(
        "a3u", overrides={f"{ns}:provisioning": capacity, f"{ns}:reservation": ""})
    f = critical_path.facts(recording)
    chain = critical_path.critical_path(recording)
    boxes = {step.resource.name: step.duration for step in chain}
    wait = critical_path.capacity_phase(f)
    assert wait.minutes == 0 and wait.source.startswith("no bound")
    holder = "gpu-pool" if capacity == "spot" else "ray-ray-cluster"
    assert wait in boxes[holder].phases
    assert critical_path.GPU_VMS in boxes[holder].phases
    limit = f.pool_timeout_min or critical_path.PROVIDER_POOL_TIMEOUT_MIN
    expected = limit if capacity == "spot" else f.ray_timeout_min
    assert f"{expected:g} min" in wait.source
    text = critical_path.report("a3u", None, chain, chain[-1].done_at, None, f)
    assert f"with {capacity} capacity available" in text and "Capacity: no bound" in text


def test_the_report_names_the_path_and_the_estimate():
    """What `make critical-path` prints: each step with its finish time and each phase with its
    figure and source, the estimate, staging's own branch, the levers read from the plan and
    the open assumptions."""
    _, recording = rendered("a4x", "standard")
    f = critical_path.facts(recording)
    chain = critical_path.critical_path(recording)
    ray_ready = critical_path.critical_path(recording, RAY_CLUSTER)[-1].done_at
    staging = critical_path.staging_step(recording)
    text = critical_path.report("a4x", None, chain, ray_ready, staging, f)
    assert f"Estimate to the first training step: {chain[-1].done_at:.1f} min" in text
    assert "gke-cluster" in text and "assumption:" in text
    assert ray_ready < chain[-1].done_at
    assert f"staging is done after {staging.done_at:.1f} min" in text
    if staging.resource.name not in [s.resource.name for s in chain]:
        assert f"Staging, on its own branch: +{staging.duration.minutes:g} min" in text
    for phase in chain[-1].duration.phases:
        assert f"+{phase.minutes:<6g}{phase.what}: {phase.source}" in text
    assert "Levers read from the plan and the code:" in text and critical_path.PREPULL in text
    assert "Open assumptions on this path" in text and "control plane: 6.5 min" in text


def test_measured_timestamps_replace_the_models_segments(tmp_path, capsys):
    """A real `up`'s timeline (the job's output) replaces each segment it brackets; a missing
    timestamp keeps the model's figure for its segment and the next, and says so; without
    `--started` the control plane stays the model's."""
    _, recording = rendered("a4", "standard")
    chain = critical_path.critical_path(recording)
    timeline = {
        "clusterCreated": "2026-12-01T10:08:00Z", "gpuNodesRegistered": "2026-12-01T10:15:00Z",
        "gpusAllocatable": "2026-12-01T10:16:00Z", "imagePulled": None,
        "rayClusterReady": "2026-12-01T10:25:30Z", "jobStarted": "2026-12-01T10:27:00Z",
        "firstStep": "2026-12-01T10:33:00Z",
    }
    started = critical_path._at("2026-12-01T10:00:00Z")
    rows = {r["milestone"]: r for r in critical_path.measured_segments(chain, timeline, started)}
    assert rows["clusterCreated"]["measured"] == 8
    assert rows["gpuNodesRegistered"]["measured"] == 7
    assert rows["gpusAllocatable"]["measured"] == 1
    assert rows["imagePulled"]["measured"] is None and rows["rayClusterReady"]["measured"] is None
    assert rows["firstStep"]["measured"] == 6
    assert sum(r["model"] for r in rows.values()) == pytest.approx(chain[-1].done_at, abs=0.05)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"job": {"timeline": timeline},
                                   "clusterCheck": {"readMbps": 1200.0}}))
    text = critical_path.measured_report(chain, critical_path.read_timeline(outputs), None,
                                         critical_path.read_check_rate(outputs))
    assert "measured 7 min" in text and "`--started` not given" in text
    assert "a missing timestamp" in text
    assert "check's measured 1200 MiB/s (clusterCheck.readMbps): 0.9 min" in text
    # The command line reads the same file.
    assert critical_path.main(["--stack", "a4", "--measured", str(outputs),
                               "--started", "2026-12-01T10:00:00Z"]) == 0
    printed = capsys.readouterr().out
    assert "to clusterCreated      measured 8 min" in printed


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


def test_the_cost_pages_timings_are_the_models_output():
    """docs/cost.md's "Expected timings" table, its phases' sources and its open assumptions
    are exactly what `python -m tools.critical_path --update-docs` writes for the shipped
    stacks: the page cannot drift from the model."""
    page = critical_path.COST_PAGE.read_text()
    block = critical_path.TIMINGS_BLOCK.search(page)
    assert block, "docs/cost.md has no timings-table block"
    assert block.group(2) == critical_path.docs_report(render=rendered), (
        "docs/cost.md's timings are stale: run `python -m tools.critical_path --update-docs`")
