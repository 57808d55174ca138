"""`make diff` (tools/plan_diff.py): a real change, shown the way a reviewer needs it.

Two trees are rendered by their own program under the mock runtime: a copy of this work tree
with a changed stack file, and two real commits of this repository (when its history is there).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tools import force_new, plan, plan_diff
from tools.plan import ROOT

DAY_TWO_BASE = "36a7c82"  # components/ grouped by concern; default names were still "verl"
DAY_TWO_HEAD = "8d16020"  # day two: names carry the stack, fixed names replaced delete-first
UNTRACKED = shutil.ignore_patterns(".venv", "node_modules", "build", ".git", "__pycache__", ".pytest_cache")


def _tree(destination, stack_file_extra: str = ""):
    """A copy of the work tree's program, with lines appended to Pulumi.a4.yaml's config."""
    shutil.copytree(ROOT, destination, ignore=UNTRACKED, symlinks=True)
    if stack_file_extra:
        with open(destination / "Pulumi.a4.yaml", "a") as stack_file:
            stack_file.write(stack_file_extra)
    return destination


@pytest.fixture(scope="module")
def gpu_change(tmp_path_factory):
    """a4 moved to another reservation with 4 GPU nodes: the report and its resource changes."""
    scratch = tmp_path_factory.mktemp("diff")
    base = _tree(scratch / "base")
    head = _tree(scratch / "head", "  verl-gke:gpuNodes: 4\n  verl-gke:reservation: other-reservation\n")
    report, failed = plan_diff.diff_trees(base, head, ["a4"], scratch)
    # The plans diff_trees rendered, read back for assertions on the structured changes.
    olds, news = (json.loads((scratch / side / "a4" / "plan.json").read_text())["resources"]
                  for side in ("plans-base", "plans-head"))
    providers = json.loads((scratch / "plans-head" / "a4" / plan_diff.PROVIDERS_FILE).read_text())
    return report, failed, {c.name: c for c in plan_diff.resource_changes(olds, news, providers)}


def test_a_forcenew_field_replaces_the_gpu_pool_delete_first(gpu_change):
    """A new reservation is ForceNew on node_config.reservation_affinity: the pool is replaced,
    old one deleted first (fixed name); the pool's ignored initialNodeCount is not shown."""
    _, failed, changes = gpu_change
    assert not failed
    pool = changes["gpu-pool"]
    assert pool.kind == "replace" and pool.delete_first
    reasons = {path: why for path, _, _, why in pool.fields}
    assert reasons["nodeConfig.reservationAffinity.values[0]"] == (
        "provider replaces on node_config.reservation_affinity"
    )
    assert reasons["autoscaling.totalMaxNodeCount"] is None  # updatable on its own
    assert not any(path.startswith("initialNodeCount") for path in reasons)


def test_the_job_and_the_check_are_replaced_delete_first_by_their_providers_own_diff(gpu_change):
    """Four nodes change the run's entrypoint (trainer.nnodes) and the cluster check's expected
    inventory: the pickled providers' own diff() says both are replacements, and that the old
    one goes first (their DiffResult.delete_before_replace), which no resource option says.
    Nothing about the cluster, bucket or networks changes."""
    report, _, changes = gpu_change
    run, check = changes["grpo-run"], changes["cluster-check-run"]
    assert run.kind == "replace" and run.delete_first and run.by_provider
    assert {why for path, _, _, why in run.fields if path == "entrypoint"} == {
        "its provider's diff() replaces on entrypoint"}
    assert check.kind == "replace" and check.delete_first and check.by_provider
    assert ("- **+- replace** `pulumi-python:dynamic/verl-gke:GrpoRun` `grpo-run` "
            "(delete first, then create)") in report
    assert not {"gke-cluster", "storage-bucket", "networks-rdma", "gke-system-pool"} & set(changes)


def test_the_report_shows_manifests_and_outputs(gpu_change):
    """The RayCluster's worker count as a unified diff of its manifest; hardware.nodes and the
    words of the job's entrypoint that changed among the outputs; a summary of counts first."""
    report, _, _ = gpu_change
    assert "### `a4`" in report and "to replace" in report
    assert "- **+- replace** `gcp:container/nodePool:NodePool` `gpu-pool` (delete first, then create)" in report
    diff = report[report.index("```diff"):]
    assert "--- base/a4: ray.io/v1 RayCluster default/b200-ray-cluster" in diff
    assert "-    replicas: 2" in diff and "+    replicas: 4" in diff
    # The entrypoint's checkpoint pruning (issue 18) names the run's directory first.
    changed = next(line for line in report.splitlines() if line.startswith("- `job.entrypoint`"))
    assert changed.startswith("- `job.entrypoint`: words changed: `")
    assert "`trainer.nnodes=2 → trainer.nnodes=4`" in changed
    assert "- `hardware.nodes`: 2 → 4" in report and "- `hardware.totalGpus`: 16 → 32" in report


def test_an_unchanged_tree_reports_no_changes(tmp_path):
    """The same program on both sides: "No changes." and nothing else for the stack."""
    base = _tree(tmp_path / "base")
    report, failed = plan_diff.diff_trees(base, base, ["a4x"], tmp_path)
    assert not failed and report.endswith("### `a4x`\n\nNo changes.\n")


def _has_commits(*refs: str) -> bool:
    return all(
        subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}^{{commit}}"],
                       capture_output=True).returncode == 0
        for ref in refs
    )


@pytest.mark.skipif(not _has_commits(DAY_TWO_BASE, DAY_TWO_HEAD), reason="history not in this clone")
def test_two_real_commits_show_the_day_two_renames(tmp_path):
    """Between the two commits default names gained the stack: the cluster is replaced because
    of the program's replaceOnChanges, the bucket because the provider cannot rename a bucket,
    left in the cloud (retainOnDelete), and the new guards are created."""
    base = plan_diff.materialize(DAY_TWO_BASE, tmp_path / "base")
    head = plan_diff.materialize(DAY_TWO_HEAD, tmp_path / "head")
    report, failed = plan_diff.diff_trees(base, head, ["a4"], tmp_path)
    assert not failed
    assert "- `name`: \"verl\" → \"verl-a4\" — **replaceOnChanges: name**" in report
    assert ("- **+- replace** `gcp:storage/bucket:Bucket` `storage-bucket` (create the new one; the old "
            "one stays in the cloud: retainOnDelete)") in report
    assert "- **+ create** `pulumi-python:dynamic/verl-gke:DeletionProtection` `deletion-protection`" in report
    assert "- `clusterName`: \"verl\" → \"verl-a4\"" in report


def test_a_base_that_cannot_render_shows_everything_as_added(tmp_path):
    """A stack the base does not have (or whose plan fails): all of the head's resources are
    'create', with the reason given, instead of a crash."""
    base = _tree(tmp_path / "base")
    (base / "Pulumi.a4x.yaml").unlink()
    report, failed = plan_diff.diff_trees(base, ROOT, ["a4x"], tmp_path)
    assert not failed
    assert "_The base has no plan for this stack" in report and "no stack file Pulumi.a4x.yaml" in report
    assert "0 to replace, 0 to update" in report and "to delete**" in report


@pytest.mark.parametrize(
    ("type_", "path", "expected"),
    [
        ("gcp:container/nodePool:NodePool", "nodeConfig.guestAccelerators[0].count", "node_config.guest_accelerator"),
        ("gcp:container/nodePool:NodePool", "nodeConfig.labels.role", None),
        ("gcp:compute/firewall:Firewall", "allows[0].ports[0]", None),
        ("gcp:compute/resourcePolicy:ResourcePolicy", "name", None),
        ("gcp:logging/metric:Metric", "name", None),
        ("gcp:compute/routerNat:RouterNat", "router", "router"),
        ("gcp:artifactregistry/repository:Repository", "remoteRepositoryConfig.dockerRepository.publicRepository",
         "remote_repository_config"),
        ("kubernetes:batch/v1:Job", "spec.template.spec.containers[0].image", "spec.template"),
        ("kubernetes:core/v1:Secret", "stringData.hf_api_token", "stringData"),
        ("kubernetes:ray.io/v1:RayCluster", "metadata.name", "metadata.name"),
        ("kubernetes:ray.io/v1:RayCluster", "spec.workerGroupSpecs[0].replicas", None),
    ],
)
def test_the_force_new_table_maps_plan_paths_onto_provider_fields(type_, path, expected):
    """camelCase, pluralised Pulumi paths meet the providers' own field names; updatable fields
    (labels, firewall rules, the placement policy's name since v5.38) stay updates."""
    assert force_new.replacing_field(type_, path) == expected


def test_the_pr_comment_carries_its_marker_and_fits_githubs_limit():
    """The workflow finds its own comment by the marker; a huge diff is cut below 65,536
    characters without leaving a code block open, and says where the whole diff is."""
    small = plan_diff.pr_comment("## Offline plan diff\n\nNo changes.")
    assert small.startswith(plan_diff.COMMENT_MARKER + "\n## Offline plan diff")
    huge = plan_diff.pr_comment("```diff\n" + "+ line\n" * 20000 + "```")
    assert len(huge) <= plan_diff.COMMENT_LIMIT
    assert huge.count("```") % 2 == 0 and huge.rstrip().endswith("the job summary has the whole diff._")


def test_new_dependencies_or_options_alone_are_engine_only_changes():
    """A resource whose inputs are unchanged but that now waits for another (or is protected)
    is listed apart: no provider call, only a different create / destroy order."""
    pool = {"urn": "urn:a::p::gcp:container/nodePool:NodePool::gpu-pool", "name": "gpu-pool",
            "type": "gcp:container/nodePool:NodePool", "inputs": {}, "options": {}}
    claim = {"urn": "urn:a::p::kubernetes:core/v1:PersistentVolumeClaim::pvc", "name": "pvc",
             "type": "kubernetes:core/v1:PersistentVolumeClaim", "inputs": {"spec": {}}, "options": {},
             "dependsOn": []}
    later = {**claim, "dependsOn": [pool["urn"]], "options": {"protect": True}}
    [change] = plan_diff.resource_changes([pool, claim], [pool, later])
    assert change.kind == "engine"
    assert change.fields == [("options.protect", None, True, None),
                             ("dependsOn (removed → added)", [], ["gpu-pool"], None)]


def test_components_are_not_listed_even_from_plans_that_did_not_mark_them():
    """Components (ours, and pulumi-kubernetes' YAML v2) change nothing in the cloud: left out,
    whether the plan records `custom` or is older and only the type tells."""
    component = {"urn": "urn:a::p::verl-gke:index:GkeCluster::gke", "name": "gke",
                 "type": "verl-gke:index:GkeCluster", "inputs": {}, "options": {}}
    manifest = {"urn": "urn:a::p::kubernetes:yaml/v2:ConfigFile::nccl", "name": "nccl",
                "type": "kubernetes:yaml/v2:ConfigFile", "inputs": {"file": "a"}, "options": {}}
    secret = {"urn": "urn:a::p::kubernetes:core/v1:Secret::s", "name": "s",
              "type": "kubernetes:core/v1:Secret", "inputs": {}, "options": {}}
    head = [{**component, "dependsOn": ["x"], "custom": False}, {**manifest, "custom": False},
            {**secret, "custom": True}]
    assert plan_diff.resource_changes([component, manifest, secret], head) == []
    assert [c.name for c in plan_diff.resource_changes([], [component, manifest, secret])] == ["s"]


def test_every_stack_file_is_a_stack_with_its_autopilot_mode_where_the_target_has_one(tmp_path):
    """`make diff` takes every Pulumi.<stack>.yaml, not three names: a user's own stack (with
    dashes in its name) and, where the target runs on Autopilot, its Autopilot mode."""
    for name, target in (("team-a4", "a4"), ("eu.a4x", "a4x"), ("a3u", "a3u")):
        (tmp_path / f"Pulumi.{name}.yaml").write_text(f"config:\n  verl-gke:target: {target}\n")
    (tmp_path / "Pulumi.yaml").write_text("name: verl-gke\n")
    assert plan_diff.all_stacks(tmp_path) == ["a3u", "a3u-autopilot", "eu.a4x", "team-a4", "team-a4-autopilot"]
    assert plan_diff.split_stack("team-a4-autopilot") == ("team-a4", "autopilot")
    assert plan_diff.split_stack("team-a4") == ("team-a4", None)
    assert plan_diff.all_stacks() == ["a3u", "a3u-autopilot", "a4", "a4-autopilot", "a4x"]


def test_a_guards_record_change_is_an_update_by_its_own_diff():
    """DeletionProtection's provider never replaces: a changed input is an update, decided by
    its pickled diff() rather than a table."""
    from tests.conftest import rendered

    _, recording = rendered("a4", "standard")
    providers = plan_diff.pickled_providers(recording)
    [guard] = [r for r in plan.plan_document("a4", *rendered("a4", "standard"))["resources"]
               if r["type"].endswith("DeletionProtection")]
    older = {**guard, "inputs": {**guard["inputs"], "protected": False}}
    [change] = plan_diff.resource_changes([older], [guard], providers)
    assert change.kind == "update" and change.by_provider and not change.delete_first


def test_a_resource_renamed_with_an_alias_is_neither_deleted_nor_created():
    """The engine takes an aliased resource over under its new name: where the plan records
    `options.aliases`, the diff shows no delete and no create (only what else changed)."""
    old = {"urn": "urn:pulumi:a4::verl-gke::pulumi-python:dynamic/verl-gke:DeletionProtection::deletion-protection",
           "name": "deletion-protection", "type": "pulumi-python:dynamic/verl-gke:DeletionProtection",
           "custom": True, "inputs": {"protected": True}, "options": {}}
    new = {**old, "urn": old["urn"].replace("::deletion-protection", "::to-destroy"), "name": "to-destroy",
           "options": {"aliases": [{"name": "deletion-protection"}]}}
    [change] = plan_diff.resource_changes([old], [new])
    assert change.kind == "engine" and change.fields == [
        ("options.aliases", None, [{"name": "deletion-protection"}], None)]
