"""`make diff` (tools/plan_diff.py): a real change, shown the way a reviewer needs it.

Two trees are rendered by their own program under the mock runtime: copies of this work tree
with changed stack files, and two real commits of this repository (when its history is there).
The renders are forked from one process that imported the SDKs (tools/render_fork.py); one
test holds them to what a fresh interpreter writes. Renders are shared through module fixtures:
each costs about 1.5 s of CPU warm, 7 s cold.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools import force_new, plan_diff, plan_report, render_fork
from tools.mockrun import PROJECT_SERVICE
from tools.plan import ROOT
from tools.render_plans import RenderRequest

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


STACKS = ["a4", "a3u", "a4x"]  # a4 changed, a3u absent from the base, a4x the same on both sides


@pytest.fixture(scope="module")
def three_stacks(tmp_path_factory):
    """One diff of two copies of the work tree, rendered as one batch: a4 moved to another
    reservation with 4 GPU nodes, a3u's stack file removed from the base, a4x unchanged. The
    report, each stack's section, a4's resource changes, and the scratch directory."""
    scratch = tmp_path_factory.mktemp("diff")
    base = _tree(scratch / "base")
    (base / "Pulumi.a3u.yaml").unlink()
    head = _tree(scratch / "head", "  verl-gke:gpuNodes: 4\n  verl-gke:reservation: other-reservation\n")
    report, failed = plan_diff.diff_trees(base, head, STACKS, scratch)
    # The plans diff_trees rendered, read back for assertions on the structured changes.
    olds, news = (json.loads((scratch / side / "a4" / "plan.json").read_text())["resources"]
                  for side in ("plans-base", "plans-head"))
    providers = json.loads((scratch / "plans-head" / "a4" / plan_diff.PROVIDERS_FILE).read_text())
    sections = {stack: report[report.index(f"### `{stack}`"):] for stack in STACKS}
    for before, after in zip(STACKS, STACKS[1:]):
        sections[before] = sections[before][:sections[before].index(f"### `{after}`")]
    changes = {c.name: c for c in plan_report.resource_changes(olds, news, providers)}
    return report, failed, sections, changes, scratch


def test_a_forcenew_field_replaces_the_gpu_pool_delete_first(three_stacks):
    """A new reservation is ForceNew on node_config.reservation_affinity: the pool is replaced,
    old one deleted first (fixed name); the pool's ignored initialNodeCount is not shown."""
    _, failed, _, changes, _ = three_stacks
    assert not failed
    pool = changes["gpu-pool"]
    assert pool.kind == "replace" and pool.delete_first
    reasons = {path: why for path, _, _, why in pool.fields}
    assert reasons["nodeConfig.reservationAffinity.values[0]"] == (
        "provider replaces on node_config.reservation_affinity"
    )
    assert reasons["autoscaling.totalMaxNodeCount"] is None  # updatable on its own
    assert not any(path.startswith("initialNodeCount") for path in reasons)


def test_the_job_and_the_check_are_replaced_delete_first_by_their_providers_own_diff(three_stacks):
    """Four nodes change the run's entrypoint (trainer.nnodes) and the cluster check's expected
    inventory: the pickled providers' own diff() says both are replacements, and that the old
    one goes first (their DiffResult.delete_before_replace), which no resource option says.
    Nothing about the cluster, bucket or networks changes."""
    _, _, sections, changes, _ = three_stacks
    run, check = changes["grpo-run"], changes["cluster-check-run"]
    assert run.kind == "replace" and run.delete_first and run.by_provider
    assert {why for path, _, _, why in run.fields if path == "entrypoint"} == {
        "its provider's diff() replaces on entrypoint"}
    assert check.kind == "replace" and check.delete_first and check.by_provider
    assert ("- **+- replace** `pulumi-python:dynamic/verl-gke:GrpoRun` `grpo-run` "
            "(delete first, then create)") in sections["a4"]
    assert not {"gke-cluster", "storage-bucket", "networks-rdma", "gke-system-pool"} & set(changes)


def test_the_report_shows_manifests_and_outputs(three_stacks):
    """The RayCluster's worker count as a unified diff of its manifest; hardware.nodes and the
    words of the job's entrypoint that changed among the outputs; a summary of counts first."""
    section = three_stacks[2]["a4"]
    assert "to replace" in section
    assert "- **+- replace** `gcp:container/nodePool:NodePool` `gpu-pool` (delete first, then create)" in section
    diff = section[section.index("```diff"):]
    assert "--- base/a4: ray.io/v1 RayCluster default/b200-ray-cluster" in diff
    assert "-    replicas: 2" in diff and "+    replicas: 4" in diff
    # The entrypoint's checkpoint pruning (issue 18) names the run's directory first.
    changed = next(line for line in section.splitlines() if line.startswith("- `job.entrypoint`"))
    assert changed.startswith("- `job.entrypoint`: words changed: `")
    assert "`trainer.nnodes=2 → trainer.nnodes=4`" in changed
    assert "- `hardware.nodes`: 2 → 4" in section and "- `hardware.totalGpus`: 16 → 32" in section


def test_an_unchanged_stack_reports_no_changes(three_stacks):
    """The same program and stack file on both sides: "No changes." and nothing else for the
    stack, while other stacks of the same diff change."""
    report, failed, sections, _, _ = three_stacks
    assert not failed and sections["a4x"] == "### `a4x`\n\nNo changes.\n"
    assert report.endswith(sections["a4x"])


def test_a_base_that_cannot_render_shows_everything_as_added(three_stacks):
    """A stack the base does not have (or whose plan fails): all of the head's resources are
    'create', with the reason given, instead of a crash."""
    _, failed, sections, _, _ = three_stacks
    section = sections["a3u"]
    assert not failed
    assert "_The base has no plan for this stack" in section and "no stack file Pulumi.a3u.yaml" in section
    assert "0 to replace, 0 to update" in section and "to delete**" in section


def test_a_head_that_cannot_render_fails_the_diff(tmp_path):
    """The work tree's own config error is the report's subject and exit 1: the program's
    message (exit 2) is shown as it printed it, nothing is diffed."""
    head = _tree(tmp_path / "head", "  verl-gke:gpuNodes: many\n")
    report, failed = plan_diff.diff_trees(head, head, ["a4"], tmp_path)
    assert failed and "The work tree's plan failed to render" in report
    assert "verl-gke:gpuNodes" in report and "many" in report


def _has_commits(*refs: str) -> bool:
    return all(
        subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}^{{commit}}"],
                       capture_output=True).returncode == 0
        for ref in refs
    )


@pytest.fixture(scope="module")
def day_two(tmp_path_factory):
    """The diff between two real commits of this repository: the report and the scratch."""
    if not _has_commits(DAY_TWO_BASE, DAY_TWO_HEAD):
        pytest.skip("history not in this clone")
    scratch = tmp_path_factory.mktemp("day-two")
    base = plan_diff.materialize(DAY_TWO_BASE, scratch / "base")
    head = plan_diff.materialize(DAY_TWO_HEAD, scratch / "head")
    report, failed = plan_diff.diff_trees(base, head, ["a4"], scratch)
    return report, failed, scratch


def test_two_real_commits_show_the_day_two_renames(day_two):
    """Between the two commits default names gained the stack: the cluster is replaced because
    of the program's replaceOnChanges, the bucket because the provider cannot rename a bucket,
    left in the cloud (retainOnDelete), and the new guards are created."""
    report, failed, _ = day_two
    assert not failed
    assert "- `name`: \"verl\" → \"verl-a4\" — **replaceOnChanges: name**" in report
    assert ("- **+- replace** `gcp:storage/bucket:Bucket` `storage-bucket` (create the new one; the old "
            "one stays in the cloud: retainOnDelete)") in report
    assert "- **+ create** `pulumi-python:dynamic/verl-gke:DeletionProtection` `deletion-protection`" in report
    assert "- `clusterName`: \"verl\" → \"verl-a4\"" in report


def _files(directory: Path) -> dict[str, bytes | None]:
    """A render's files, every byte: renders are stable (tools/plan.py sorts what the program
    registers concurrently), so any two runs of this tree's program write the same plan.json,
    manifests.yaml and providers.json (its pickles exactly)."""
    names = ("plan.json", "manifests.yaml", plan_diff.PROVIDERS_FILE)
    return {name: (directory / name).read_bytes() if (directory / name).exists() else None
            for name in names}


def _canonical(directory: Path) -> dict[str, Any]:
    """A render of a commit from before stable renders, as two runs of it must agree: two fresh
    interpreters differed in plan.json's resource order and manifests.yaml's document order
    (independent resources register concurrently), and the plan kept the last of several
    answers to one invoke (getProjectService, asked once per API). So: each resource's and each
    document's exact text, as sorted lists; everything else of plan.json exactly."""
    plan_document = json.loads((directory / "plan.json").read_text())
    resources = sorted(json.dumps(r) for r in plan_document.pop("resources"))
    plan_document["exampleValues"].pop(f"invoke:{PROJECT_SERVICE}", None)
    documents = sorted((directory / "manifests.yaml").read_text().rstrip("\n").split("\n---\n"))
    return {"plan": plan_document, "resources": resources, "documents": documents}


def test_a_forked_render_is_the_fresh_interpreters_render(three_stacks, day_two, tmp_path):
    """The forked renders make diff uses (one process imports the SDKs, a child per render)
    write what `python -m tools.plan` and the `-c` render_with_providers write in a fresh
    interpreter: for this tree's head (after the server learned its modules from the base) and
    for an older commit rendered after this tree's renders (nothing of this tree's `tools` or
    `components` reaches it); and a failing render's exit code and message are the same too."""
    scratch = three_stacks[4]
    head = RenderRequest(scratch / "head", "a4", tmp_path / "head", providers=True)
    old = RenderRequest(day_two[2] / "base", "a4", tmp_path / "old")
    failing = RenderRequest(scratch / "base", "a3u", tmp_path / "failing")
    fresh = render_fork.run_all([head.own(), old.plain(), failing.plain()], fresh=True)
    forked_failing = render_fork.run_all([failing.plain()])[0]
    assert [done.returncode for done in fresh] == [0, 0, 2]
    assert _files(scratch / "plans-head" / "a4") == _files(tmp_path / "head" / "a4")
    assert _canonical(day_two[2] / "plans-base" / "a4") == _canonical(tmp_path / "old" / "a4")
    assert (forked_failing.returncode, forked_failing.stderr) == (2, fresh[2].stderr)


def test_forked_commands_exit_and_print_as_in_a_fresh_interpreter(tmp_path):
    """Each forked command gives what `python <argv>` gives: its argv and sys.path[0] (`-c` and
    `-m`), the exit code of SystemExit with a number or a message, an uncaught exception's
    traceback from the command's own first frame, runpy's message for a missing module; none
    finds the server's own `tools`; results come back in order. And they did run forked: the
    server is their parent."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "main.py").write_text(
        "import sys\nprint(sys.argv[1:], sys.path[0])\nsys.exit(int(sys.argv[1]))\n")
    commands = [render_fork.Command(argv, tmp_path) for argv in (
        ("-c", "import sys; print(sys.argv, repr(sys.path[0])); sys.exit(3)", "a"),
        ("-c", "import sys; sys.exit('a message')"),
        ("-c", "import tools"),
        ("-m", "pkg.main", "4"),
        ("-m", "pkg.missing"),
    )]
    forked = render_fork.run_all(commands)
    fresh = render_fork.run_all(commands, fresh=True)
    shown = lambda results: [(d.returncode, d.stdout, d.stderr) for d in results]  # noqa: E731
    assert shown(forked) == shown(fresh)
    assert [d.returncode for d in forked] == [3, 1, 1, 4, 1]
    assert "ModuleNotFoundError: No module named 'tools'" in forked[2].stderr
    [parent] = render_fork.run_all([render_fork.Command(("-c", "import os; print(os.getppid())"), tmp_path)])
    assert int(parent.stdout) == render_fork._server().process.pid


def test_one_server_renders_for_every_test_but_not_for_another_environment(monkeypatch):
    """The server started under one test serves the next, whose only difference is the test
    pytest names in PYTEST_CURRENT_TEST (a new server would render its first plan cold again,
    with ~5 CPU-s of SDK imports); any other variable that changed means a new server."""
    first = render_fork._server()
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_other.py::test_other (call)")
    assert render_fork._server() is first
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "another")
    assert render_fork.environment() != first.environment


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
    small = plan_report.pr_comment("## Offline plan diff\n\nNo changes.")
    assert small.startswith(plan_report.COMMENT_MARKER + "\n## Offline plan diff")
    huge = plan_report.pr_comment("```diff\n" + "+ line\n" * 20000 + "```")
    assert len(huge) <= plan_report.COMMENT_LIMIT
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
    [change] = plan_report.resource_changes([pool, claim], [pool, later])
    assert change.kind == "engine"
    assert change.fields == [("options.protect", None, True, None),
                             ("dependsOn (removed → added)", [], ["gpu-pool"], None)]


def test_a_named_kubernetes_object_is_replaced_delete_first_as_its_provider_does():
    """pulumi-kubernetes deletes a replaced object first when the program names it and the name
    and namespace stay (provider.go Diff, deleteBeforeReplace): the supervisor's code ConfigMap,
    replaced on any data change, is one; an object the provider autonames is created first.
    (Before, the report said "create first" for both, which two objects of one name cannot do.)"""
    def config_map(name, meta, data):
        return {"urn": f"urn:a::p::kubernetes:core/v1:ConfigMap::{name}", "name": name,
                "type": "kubernetes:core/v1:ConfigMap", "options": {},
                "inputs": {"metadata": meta, "data": data}}
    named = {"name": "sup", "namespace": "default"}
    [change] = plan_report.resource_changes([config_map("sup", named, {"a": "1"})],
                                            [config_map("sup", named, {"a": "2"})])
    assert (change.kind, change.delete_first) == ("replace", True)
    [change] = plan_report.resource_changes([config_map("auto", {}, {"a": "1"})],
                                            [config_map("auto", {}, {"a": "2"})])
    assert (change.kind, change.delete_first) == ("replace", False)


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
    assert plan_report.resource_changes([component, manifest, secret], head) == []
    assert [c.name for c in plan_report.resource_changes([], [component, manifest, secret])] == ["s"]


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


def test_a_guards_record_change_is_an_update_by_its_own_diff(three_stacks):
    """DeletionProtection's provider never replaces: a changed input is an update, decided by
    its pickled diff() rather than a table."""
    head = three_stacks[4] / "plans-head" / "a4"
    providers = json.loads((head / plan_diff.PROVIDERS_FILE).read_text())
    [guard] = [r for r in json.loads((head / "plan.json").read_text())["resources"]
               if r["type"].endswith("DeletionProtection")]
    older = {**guard, "inputs": {**guard["inputs"], "protected": False}}
    [change] = plan_report.resource_changes([older], [guard], providers)
    assert change.kind == "update" and change.by_provider and not change.delete_first


def test_a_resource_renamed_with_an_alias_is_neither_deleted_nor_created():
    """The engine takes an aliased resource over under its new name: where the plan records
    `options.aliases`, the diff shows no delete and no create (only what else changed)."""
    old = {"urn": "urn:pulumi:a4::verl-gke::pulumi-python:dynamic/verl-gke:DeletionProtection::deletion-protection",
           "name": "deletion-protection", "type": "pulumi-python:dynamic/verl-gke:DeletionProtection",
           "custom": True, "inputs": {"protected": True}, "options": {}}
    new = {**old, "urn": old["urn"].replace("::deletion-protection", "::to-destroy"), "name": "to-destroy",
           "options": {"aliases": [{"name": "deletion-protection"}]}}
    [change] = plan_report.resource_changes([old], [new])
    assert change.kind == "engine" and change.fields == [
        ("options.aliases", None, [{"name": "deletion-protection"}], None)]


def test_two_configs_of_one_stack_show_what_the_config_change_replaces(tmp_path, capsys):
    """`make diff STACK=dev CONFIG_BASE=HEAD:Pulumi.a4.yaml CONFIG=<file>`: a stack file of the
    user's own compared with a stack file at a git revision, both planned by the work tree's
    program: 2 -> 4 nodes resizes the GPU pool, replaces the RayCluster (a4's add-on: any spec
    change, components/raycluster/verl_ray_cluster.py), the job and the check (their own providers'
    diff), and nothing shows as created (not "81 to create")."""
    head = tmp_path / "Pulumi.dev.yaml"
    head.write_text((ROOT / "Pulumi.a4.yaml").read_text().replace("config:\n", "config:\n  verl-gke:gpuNodes: 4\n", 1))
    argv = ["--stack", "dev", "--base-config", "HEAD:Pulumi.a4.yaml", "--head-config", str(head)]
    assert plan_diff.main(argv) == 0
    out = capsys.readouterr().out
    assert "Base config: `HEAD:Pulumi.a4.yaml`" in out
    assert "**4 to replace, 1 to update, 0 to create, 0 to delete**" in out
    assert "- **~ update** `gcp:container/nodePool:NodePool` `gpu-pool`" in out
    assert "  - `autoscaling.totalMaxNodeCount`: 2 → 4" in out
    assert "`pulumi-python:dynamic/verl-gke:GrpoRun` `grpo-run` (delete first, then create)" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--stack", "a4", "--base-config", "no-such-file.yaml"], "CONFIG_BASE='no-such-file.yaml'"),
        (["--stack", "a4", "--base-config", "no-such-ref-xyz:Pulumi.a4.yaml"], "git cannot use it"),
        (["--stack", "a4", "--stack", "a3u", "--base-config", "HEAD:Pulumi.a4.yaml"], "pass one --stack"),
        (["--stack", "nope", "--base", "HEAD"], "Pulumi.nope.yaml"),
    ],
)
def test_a_config_or_stack_that_cannot_be_read_is_named_with_the_fix(argv, message, capsys):
    """A base config that is neither a file nor <ref>:<path>, a ref git cannot resolve, two
    stacks for one config, a stack without a file: exit 2 with the value and the fix, before
    anything is rendered."""
    from tools import cli

    assert cli.run(plan_diff.main, argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
