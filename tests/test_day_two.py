"""Day two: what happens after the first `pulumi up`, offline, with the real providers' rules.

- The GKE version comes from GKE's answer today (an invoke), checked against A4X's floor.
- Fixed-name resources are replaced delete-first, and a rename is always a replacement.
- The bucket is adopted after a destroy, never renamed, moved or replaced.
- With deletion protection on, `pulumi destroy` fails before anything is touched.
- Two stacks in one project share no name; every derived name fits its API's rule.
- Capacity paths GKE or Compute Engine reject are refused at config time.

The engine-side facts these tests rely on are cited where the code uses them:
components/options.py (fixed_name), components/guards.py, components/preflight.py,
components/preflight/gke_version.py.
"""

from __future__ import annotations

import json

import pytest

from components.guards import BucketIdentityProvider, moves
from components.schema.config import ConfigError
from tests.conftest import rendered
from tools import mockrun, plan
from tools.mockrun import (
    ENGINE_VERSIONS, EXAMPLE_INVOKES, GET_BUCKET, LIST_BUCKETS, PROJECT_SERVICE, enabled_service,
)

CLUSTER = "gcp:container/cluster:Cluster"
BUCKET = "gcp:storage/bucket:Bucket"
SENTINEL = "pulumi-python:dynamic/verl-gke:DeletionProtection"
IDENTITY = "pulumi-python:dynamic/verl-gke:BucketIdentity"
DRANET_FLOOR = "1.34.1-gke.1829001"


def _versions(default: str, latest: str, valid: list[str] | None = None) -> dict:
    """A getEngineVersions answer whose REGULAR channel offers `default` and `latest`, and whose
    validMasterVersions are `valid` (default: just those two), newest first as GKE lists them."""
    answer = json.loads(json.dumps(EXAMPLE_INVOKES[ENGINE_VERSIONS]))
    answer["releaseChannelDefaultVersion"]["REGULAR"] = default
    answer["releaseChannelLatestVersion"]["REGULAR"] = latest
    answer["validMasterVersions"] = valid if valid is not None else [latest, default]
    return answer


# What `gcloud container get-server-config` answers in a region a few weeks after a minor
# release: several patches of each offered minor, newest first, and the REGULAR channel's default
# one minor behind its latest (shape of container.v1 ServerConfig; the patches are examples).
REALISTIC_VALID = [
    "1.35.2-gke.1485000", "1.35.1-gke.1396000", "1.34.7-gke.1090000", "1.34.6-gke.1129000",
    "1.34.1-gke.1829001", "1.34.0-gke.2201000", "1.33.9-gke.1060000", "1.33.5-gke.1080000",
]


def _run(stack: str, overrides: dict | None = None, invokes: dict | None = None):
    return plan.run_program(stack, "standard", overrides, invokes)[1]


def _run_failing(stack: str, overrides: dict | None = None, invokes: dict | None = None):
    """The ConfigError the program stops with, and what it had registered by then."""
    recording = mockrun.Recording()
    with pytest.raises(ConfigError) as error:
        plan.run_program(stack, "standard", overrides, invokes, recording=recording)
    return error.value, recording


# --- 1. The GKE version ---------------------------------------------------------------------


def test_new_clusters_get_the_minor_of_the_channels_default_of_today():
    """min_master_version is the minor alias of what GKE's REGULAR channel defaults to now
    ("1.X" picks the highest valid patch), never a patch that GKE retires within months, and a
    later, newer default never becomes an upgrade request (ignore_changes)."""
    recording = _run("a4", invokes={ENGINE_VERSIONS: _versions("1.35.3-gke.1000", "1.35.4-gke.9")})
    cluster = recording.one(CLUSTER)
    assert cluster.plain_inputs["minMasterVersion"] == "1.35"
    assert "minMasterVersion" in cluster.options.ignore_changes
    assert ENGINE_VERSIONS in recording.invokes


def test_a4x_checks_the_floor_against_the_channels_own_versions_not_every_channels():
    """The REGULAR default 1.34.0-gke.2201000 is below DRANET's floor. 1.34.7-gke.1090000 is in
    validMasterVersions, but that list is every channel's: REGULAR may not give it, so the
    default's minor is not proven; the channel latest's minor (1.35) is (REAL-PROVIDER-REVIEW-3
    finding 4)."""
    invokes = {ENGINE_VERSIONS: _versions("1.34.0-gke.2201000", "1.35.1-gke.1396000", REALISTIC_VALID)}
    cluster = _run("a4x", invokes=invokes).one(CLUSTER)
    assert cluster.plain_inputs["minMasterVersion"] == "1.35"


def test_a4x_keeps_the_defaults_minor_when_the_channels_latest_of_that_minor_meets_the_floor():
    """When REGULAR's own latest is a 1.34 patch at or above the floor, "1.34" resolves to at
    least that patch in the channel: the default's minor is kept."""
    invokes = {ENGINE_VERSIONS: _versions("1.34.0-gke.2201000", "1.34.7-gke.1090000", REALISTIC_VALID)}
    cluster = _run("a4x", invokes=invokes).one(CLUSTER)
    assert cluster.plain_inputs["minMasterVersion"] == "1.34"


def test_a4x_takes_the_latests_minor_when_no_patch_of_the_defaults_meets_the_floor():
    """Where GKE offers no 1.34 patch at or above the floor, the channel latest's minor (1.35)."""
    valid = [v for v in REALISTIC_VALID if not v.startswith("1.34.") or v == "1.34.0-gke.2201000"]
    invokes = {ENGINE_VERSIONS: _versions("1.34.0-gke.2201000", "1.35.1-gke.1396000", valid)}
    cluster = _run("a4x", invokes=invokes).one(CLUSTER)
    assert cluster.plain_inputs["minMasterVersion"] == "1.35"


def test_a4_has_no_floor_and_takes_an_older_default():
    """The floor is DRANET's (A4X); A4 takes the minor of whatever the channel defaults to."""
    invokes = {ENGINE_VERSIONS: _versions("1.33.5-gke.1080000", "1.34.6-gke.1129000", REALISTIC_VALID)}
    assert _run("a4", invokes=invokes).one(CLUSTER).plain_inputs["minMasterVersion"] == "1.33"


def test_no_offered_version_meets_the_floor_stops_before_any_resource():
    """A4X where no offered patch of either channel version's minor is new enough: one clear
    error naming the region, the floor, what is offered and the command that lists versions;
    nothing is registered."""
    invokes = {ENGINE_VERSIONS: _versions(
        "1.33.5-gke.1080000", "1.34.1-gke.1700000",
        ["1.34.1-gke.1700000", "1.34.0-gke.2201000", "1.33.9-gke.1060000", "1.33.5-gke.1080000"])}
    error, recording = _run_failing("a4x", invokes=invokes)
    [message] = error.problems
    assert "verl-gke:region = 'us-central1'" in message and DRANET_FLOOR in message
    assert "default 1.33.5-gke.1080000, latest 1.34.1-gke.1700000" in message
    assert "gcloud container get-server-config" in message
    assert recording.resources == []


def test_a_replacement_of_the_cluster_asks_for_the_minor_not_a_stored_patch():
    """The engine copies an ignored input's stored value into a replacement (pulumi/pulumi
    step_generator.go processIgnoreChanges). What is stored is what the program sent: the
    alias, which GKE resolves to a patch it still offers when the replacement is created."""
    cluster = rendered("a4", "standard")[1].one(CLUSTER)
    sent = cluster.plain_inputs["minMasterVersion"]
    assert sent.count(".") == 1 and "-gke." not in sent, sent


def _export(min_master_version: str) -> dict:
    """A `pulumi stack export` document (apitype.UntypedDeployment: version, deployment with
    resources, each with urn, type, inputs, outputs) of a stack whose cluster stores
    `min_master_version`, with a node pool at a patch and a secret as the export writes it."""
    urn = "urn:pulumi:a4::verl-gke::verl-gke:index:GkeCluster$gcp:container/cluster:Cluster::gke-cluster"
    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "v1:x"}
    return {"version": 3, "deployment": {"manifest": {}, "resources": [
        {"urn": "urn:pulumi:a4::verl-gke::pulumi:pulumi:Stack::verl-gke-a4", "type": "pulumi:pulumi:Stack"},
        {"urn": urn, "type": CLUSTER, "custom": True,
         "inputs": {"minMasterVersion": min_master_version, "name": "verl-a4"},
         "outputs": {"minMasterVersion": min_master_version, "masterVersion": "1.34.6-gke.1129000",
                     "masterAuth": secret}},
        {"urn": urn.replace("/cluster:Cluster::gke-cluster", "/nodePool:NodePool::gke-system-pool"),
         "type": "gcp:container/nodePool:NodePool", "custom": True,
         "inputs": {"version": "1.34.3-gke.1051000"}, "outputs": {"version": "1.34.3-gke.1051000"}},
    ]}}


def test_a_stack_from_before_the_alias_is_moved_onto_it_once(tmp_path, capsys):
    """docs/operations.md's one-time step: tools/version_alias.py rewrites the cluster's stored
    exact patch, in its inputs (what the engine copies into a replacement) and its provider
    state, to the minor; nothing else in the export changes, and a second run finds nothing to
    do (REAL-PROVIDER-REVIEW-3 finding 3)."""
    from tools import version_alias

    operations = (plan.ROOT / "docs" / "operations.md").read_text()
    assert "python -m tools.version_alias state.json" in operations
    assert "pulumi stack import --file state.json" in operations
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_export("1.34.3-gke.1051000")))
    assert version_alias.main([str(state)]) == 0
    after = json.loads(state.read_text())
    expected = _export("1.34")
    assert after == expected
    assert after["deployment"]["resources"][1]["outputs"]["masterVersion"] == "1.34.6-gke.1129000"
    capsys.readouterr()
    assert version_alias.main([str(state)]) == 0
    assert "nothing to do" in capsys.readouterr().out and json.loads(state.read_text()) == expected


def test_the_alias_step_names_the_fix_for_a_file_that_is_not_an_export(tmp_path, capsys):
    """A wrong file ends in exit 2 and a message with the export command, never a traceback."""
    from tools import cli, version_alias

    state = tmp_path / "state.json"
    state.write_text(json.dumps({"outputs": {}}))
    assert cli.run(version_alias.main, [str(state)]) == 2
    assert "pulumi stack export --file state.json" in capsys.readouterr().err
    assert cli.run(version_alias.main, [str(tmp_path / "missing.json")]) == 2


def _failing(reason: str):
    """An invoke answer the way a provider fails: a failure the SDK returns as data."""
    return ({}, [("", reason)])


def test_a_disabled_api_is_the_one_message_even_when_the_reads_it_serves_fail():
    """Every read goes out in one round, so the reads behind a disabled API fail too; the
    message is the API's, with the command that enables it, not their errors."""
    invokes = {
        PROJECT_SERVICE: lambda args: {} if args["service"] == "container.googleapis.com" else enabled_service(args),
        ENGINE_VERSIONS: _failing("Kubernetes Engine API has not been used in project example-project"),
    }
    error, recording = _run_failing("a4", invokes=invokes)
    [problem] = error.problems
    assert problem.startswith(
        "gcp:project = 'example-project' has 1 API(s) this stack needs turned off "
        "(container.googleapis.com: the GKE cluster): run `gcloud services enable "
        "container.googleapis.com --project example-project`, then preview again"
    )
    # The plan's example project is named as such (config.py's example-value note).
    assert "is the offline plan's example value, not yours" in problem
    assert recording.resources == []


def test_a_read_that_fails_with_every_api_on_names_what_it_asked_and_the_fix():
    """A failed invoke is caught (pulumi #6504) and said plainly, not as a traceback."""
    error, recording = _run_failing("a4", invokes={ENGINE_VERSIONS: _failing("permission denied")})
    [message] = error.problems
    assert message.startswith("gcp:project = 'example-project': could not read the GKE versions offered")
    assert "permission denied" in message and "gcloud auth application-default login" in message
    assert recording.resources == []


def test_the_api_reads_are_in_flight_together():
    """The first API reads wait for each other before answering: issued one after another, the
    first would wait alone and the run would fail (make bench measures the rounds)."""
    import threading

    barrier = threading.Barrier(4, timeout=20)
    calls = []

    def together(args):
        calls.append(args["service"])
        if len(calls) <= 4:
            barrier.wait()
        return enabled_service(args)

    recording = _run("a4", invokes={PROJECT_SERVICE: together})
    assert len(calls) == 11 and recording.resources


# --- 2. Changes that replace a resource -----------------------------------------------------

FIXED_NAME_TYPES = {
    "gcp:container/cluster:Cluster",
    "gcp:container/nodePool:NodePool",
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/firewall:Firewall",
    "gcp:compute/resourcePolicy:ResourcePolicy",
    "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat",
    "gcp:logging/metric:Metric",  # the log-based training metrics (TrainingObservability)
}


@pytest.mark.parametrize("stack", ["a4", "a3u", "a4x"])
def test_every_fixed_name_cloud_resource_is_replaced_delete_first(stack):
    """Each GCP resource whose name the program sets (the bucket aside) deletes before it is
    recreated, and treats a changed name as a replacement, never an in-place rename."""
    _, recording = rendered(stack, "standard")
    named = [r for r in recording.resources if r.type.startswith("gcp:") and "name" in r.inputs]
    fixed = [r for r in named if r.type != BUCKET]
    assert {r.type for r in fixed} <= FIXED_NAME_TYPES
    assert {r.type for r in fixed} >= {CLUSTER, "gcp:container/nodePool:NodePool"}
    for r in fixed:
        assert r.options.delete_before_replace, r.name
        assert "name" in r.options.replace_on_changes, r.name
    account = recording.one("gcp:serviceaccount/account:Account")  # named by accountId
    assert account.options.delete_before_replace
    if stack == "a4x":  # the one whose provider would otherwise PATCH a new name
        policy = recording.one("gcp:compute/resourcePolicy:ResourcePolicy")
        assert policy.options.replace_on_changes == ("name",)


@pytest.mark.parametrize("stack", ["a4", "a4x"])
def test_the_bucket_is_never_deleted_first_and_waits_for_its_identity(stack):
    """Deleting the bucket first would delete the checkpoints: it has no delete-before-replace,
    and it depends on the BucketIdentity record that refuses renames and moves."""
    _, recording = rendered(stack, "standard")
    bucket = recording.one(BUCKET)
    identity = recording.one(IDENTITY)
    assert not bucket.options.delete_before_replace
    assert identity.urn in bucket.depends_on
    assert identity.plain_inputs["name"] == bucket.plain_inputs["name"]
    assert identity.plain_inputs["location"] == bucket.plain_inputs["location"]
    assert recording.resources.index(identity) < recording.resources.index(recording.one(CLUSTER))


DEPLOYED = {"name": "verl-a4-p", "location": "US-CENTRAL1", "project": "p", "record_id": "verl-a4-p"}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"name": "verl-a4-eu-p"}, "verl-gke:bucketName"),
        ({"location": "EUROPE-WEST4"}, "verl-gke:region"),
        ({"project": "q"}, "gcp:project"),
    ],
)
def test_a_renamed_or_moved_bucket_is_refused_by_check(change, key):
    """The engine hands check the last deployment's inputs: a new name, region or project is a
    CheckFailure (shown at preview) that names the key, both values and what to do."""
    result = BucketIdentityProvider().check(DEPLOYED, {**DEPLOYED, **change})
    [failure] = result.failures
    assert failure.property == next(iter(change))
    assert key in failure.reason and "cannot be renamed or moved" in failure.reason
    assert "pulumi destroy" in failure.reason


def test_an_unchanged_or_first_bucket_passes_check():
    """Same identity, or no deployment yet (a fresh or destroyed stack): no failure."""
    assert BucketIdentityProvider().check(DEPLOYED, dict(DEPLOYED)).failures == []
    assert moves({}, DEPLOYED) == []


# --- 3. Destroy, then come back -------------------------------------------------------------


def _existing_bucket(name: str, location: str = "US-CENTRAL1", labels=None, hns=True) -> dict:
    """getBuckets / getBucket answers for a bucket that already exists in the project."""
    return {
        LIST_BUCKETS: lambda args: {
            "buckets": [
                {"name": name, "location": location, "labels": labels or {},
                 "selfLink": f"storage/{name}", "storageClass": "STANDARD"},
                {"name": f"{name}-other", "location": location, "labels": {},
                 "selfLink": "x", "storageClass": "STANDARD"},
            ] if name.startswith(args.get("prefix", "")) else []
        },
        GET_BUCKET: {"name": name, "location": location, "hierarchicalNamespaces": [{"enabled": hns}]},
    }


def test_up_after_destroy_adopts_the_kept_bucket():
    """The bucket a destroy kept is imported under its name, not created again (409); it stays
    the mount of the same PV, so staging finds its marker and verl its checkpoints."""
    name = "verl-a4-example-project"
    recording = _run("a4", invokes=_existing_bucket(name, labels={"verl-gke-stack": "a4"}))
    bucket = recording.one(BUCKET)
    assert bucket.options.import_id == name
    assert bucket.plain_inputs["name"] == name and bucket.options.retain_on_delete
    pv = recording.one("kubernetes:core/v1:PersistentVolume")
    assert pv.plain_inputs["spec"]["csi"]["volumeHandle"] == name
    assert recording.invokes[LIST_BUCKETS]["buckets"][0]["name"] == name


def test_a_new_stack_creates_its_bucket():
    """No bucket of that name in the project: a plain create, no import."""
    _, recording = rendered("a4", "standard")
    assert recording.one(BUCKET).options.import_id is None


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ({"location": "EUROPE-WEST4"}, "is in EUROPE-WEST4, and a bucket cannot move"),
        ({"labels": {"verl-gke-stack": "a4x"}}, "belongs to stack 'a4x'"),
        ({"hns": False}, "without a hierarchical namespace"),
    ],
)
def test_a_bucket_that_cannot_be_this_stacks_is_refused_before_anything(existing, expected):
    """An existing bucket in another region, of another stack, or without a hierarchical
    namespace would fail or be shared after import: refused, with nothing registered."""
    invokes = _existing_bucket("verl-a4-example-project", **existing)
    error, recording = _run_failing("a4", invokes=invokes)
    assert any(expected in p for p in error.problems), error.problems
    assert recording.resources == []


# --- 4. An accidental destroy ---------------------------------------------------------------


def _destroy_graph(recording: mockrun.Recording) -> dict[str, set[str]]:
    """For each custom resource, what the engine must delete before it: the resources that
    depend on it (dependencies, input dependencies, provider) or are its children."""
    custom = {r.urn for r in recording.resources if r.custom}
    waits_for: dict[str, set[str]] = {urn: set() for urn in custom}
    for r in recording.resources:
        edges = set(r.dependencies) | ({r.options.provider} if r.options.provider else set())
        for dependency in edges & custom:
            if r.custom:
                waits_for[dependency].add(r.urn)
    return waits_for


def _deleted_after(graph: dict[str, set[str]], first: str) -> set[str]:
    """Every resource whose delete waits, directly or not, for `first`'s delete."""
    found: set[str] = set()
    frontier = [first]
    while frontier:
        urn = frontier.pop()
        for other, waits in graph.items():
            if urn in waits and other not in found:
                found.add(other)
                frontier.append(other)
    return found


@pytest.mark.parametrize("stack_mode", [("a4", "standard"), ("a4", "autopilot"), ("a4x", "standard")], ids="-".join)
def test_destroy_with_deletion_protection_fails_before_anything_is_touched(stack_mode):
    """The protected sentinel is the only resource nothing waits on, and every other custom
    resource's delete waits for it: the engine checks `protect` when it reaches the sentinel,
    first, and skips everything behind the failed step."""
    _, recording = rendered(*stack_mode)
    sentinel = recording.one(SENTINEL)
    assert sentinel.options.protect is True
    assert sentinel.plain_inputs["to_destroy"].startswith("pulumi config set verl-gke:deletionProtection false")
    assert sentinel.name == "to-destroy-set-deletionProtection-false-then-up"
    graph = _destroy_graph(recording)
    deletable_first = {urn for urn, waits in graph.items() if not waits}
    assert deletable_first == {sentinel.urn}
    assert _deleted_after(graph, sentinel.urn) == set(graph) - {sentinel.urn}
    assert recording.one(CLUSTER).options.protect is True


def test_the_guard_is_named_after_the_right_command_and_keeps_its_old_name_as_alias(monkeypatch):
    """When the guard refuses a destroy, the engine prints only its URN and suggests `pulumi
    state unprotect`, which would half-destroy the stack: the name says what to do instead. It
    carries an alias from its former name, so a deployed stack's guard is renamed, not
    replaced (an alias spec with the default parent: the guard's parent is the stack)."""
    sent = []
    register = mockrun.RecordingMonitor.RegisterResource

    def recording_aliases(self, request):
        if request.type == SENTINEL:
            sent.append((request.name, [(a.spec.name, a.spec.parentUrn, a.spec.noParent) for a in request.aliases]))
        return register(self, request)

    monkeypatch.setattr(mockrun.RecordingMonitor, "RegisterResource", recording_aliases)
    _run("a4")
    assert sent == [("to-destroy-set-deletionProtection-false-then-up", [("deletion-protection", "", False)])]


def test_turning_deletion_protection_off_unprotects_everything():
    """`deletionProtection false` then `pulumi up` lifts Pulumi's protect and GKE's both."""
    recording = _run("a4", {"verl-gke:deletionProtection": "false"})
    assert recording.one(SENTINEL).options.protect is False
    cluster = recording.one(CLUSTER)
    assert cluster.options.protect is False and cluster.plain_inputs["deletionProtection"] is False


# --- 5. Two stacks in one project -----------------------------------------------------------


def _cloud_names(recording: mockrun.Recording) -> set[tuple[str, str]]:
    return {
        (r.type, r.plain_inputs["name"])
        for r in recording.resources
        if r.type.startswith("gcp:") and isinstance(r.plain_inputs.get("name"), str)
        and r.type != "gcp:container/nodePool:NodePool"  # pool names are per cluster
    }


def test_two_stacks_in_one_project_share_no_name():
    """a4, a3u and a4x in one project: clusters, buckets, VPCs, subnets, firewalls and
    placement policies all differ, so neither stack's `up` collides with another's."""
    names = [_cloud_names(rendered(stack, "standard")[1]) for stack in ("a4", "a3u", "a4x")]
    for i, mine in enumerate(names):
        for theirs in names[i + 1:]:
            assert not mine & theirs, mine & theirs
    assert ("gcp:container/cluster:Cluster", "verl-a4x") in names[2]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"verl-gke:clusterName": "c" * 41}, "verl-gke:clusterName = 'ccccc"),
        ({"verl-gke:bucketName": "my-google-bucket"}, "cannot start with 'goog' or contain 'google'"),
        ({"verl-gke:bucketName": "goog-data"}, "cannot start with 'goog'"),
        ({"verl-gke:bucketName": "192.168.5.4"}, "looks like an IP address"),
        ({"verl-gke:bucketName": "ab"}, "a bucket name has 3 to 63"),
        (
            {"verl-gke:clusterName": "c" * 40, "gcp:project": "a-thirty-character-project-id1"},
            "set verl-gke:bucketName, or a shorter verl-gke:clusterName",
        ),
        ({"verl-gke:gvnicNetworkPrefix": "g" * 55}, "verl-gke:gvnicNetworkPrefix makes the gVNIC firewall name"),
        ({"verl-gke:rdmaNetworkPrefix": "r" * 58}, "verl-gke:rdmaNetworkPrefix makes the RDMA subnetwork name"),
    ],
)
def test_names_that_break_a_limit_are_refused_naming_the_key(overrides, expected):
    """Every derived name is checked against its API's rule; the error names the key to set."""
    error, recording = _run_failing("a4", overrides)
    assert any(expected in p for p in error.problems), error.problems
    assert recording.resources == []


def test_a_stack_name_that_cannot_form_a_cluster_name_says_to_set_one():
    """A 60-character stack name makes a default cluster name GKE refuses: set clusterName."""
    from components.schema import config

    raw = {
        "gcp:project": "my-proj", "verl-gke:target": "a4", "verl-gke:region": "us-central1",
        "verl-gke:zone": "us-central1-b", "verl-gke:reservation": "r",
        "verl-gke:staging": '{"skip": true}',
    }
    with pytest.raises(ConfigError) as error:
        config.load(raw, stack="Team_Research." + "x" * 50)
    [message] = error.value.problems
    assert "makes the default cluster name 'verl-team-research-xxx" in message
    assert "set verl-gke:clusterName" in message
    assert config.load(raw, stack="Team_Research.EU").cluster == "verl-team-research-eu"


def test_long_values_are_quoted_with_a_short_prefix():
    """A pasted 5,000-character value is cut in the message, with its length said."""
    error, _ = _run_failing("a4", {"verl-gke:bucketName": "x" * 5000})
    text = "\n".join(error.problems)
    assert "(5000 characters)" in text and "x" * 100 not in text


# --- 6. Capacity paths ----------------------------------------------------------------------


@pytest.mark.parametrize("provisioning", ["spot", "flex-start"])
def test_a4x_refuses_capacity_other_than_a_reservation(provisioning):
    """Google's A4X docs: reservation-bound provisioning only."""
    error, _ = _run_failing(
        "a4x", {"verl-gke:provisioning": provisioning, "verl-gke:reservation": ""}
    )
    assert any(
        f"verl-gke:provisioning = '{provisioning}' is not available for a4x-highgpu-4g" in p
        for p in error.problems
    ), error.problems


def test_a_reservation_with_spot_is_refused():
    """Spot consumes no reservation: a reservation set next to it would be silently ignored."""
    error, _ = _run_failing("a4", {"verl-gke:provisioning": "spot", "verl-gke:reservation": "r"})
    assert any("consumes no reservation" in p for p in error.problems), error.problems


@pytest.mark.parametrize("provisioning", ["spot", "flex-start"])
def test_a4_spot_and_flex_start_render(provisioning):
    """A4 on spot or flex-start plans without a reservation, with COMPACT placement."""
    pool = _run("a4", {"verl-gke:provisioning": provisioning}).one("gcp:container/nodePool:NodePool", "gpu-pool")
    assert pool.plain_inputs["placementPolicy"] == {"type": "COMPACT"}
    assert pool.plain_inputs["management"]["autoRepair"] is (provisioning == "spot")


def test_autopilot_excludes_minor_upgrades_only():
    """Autopilot has no node pools of its own: its exclusion scope is NO_MINOR_UPGRADES."""
    _, recording = rendered("a4", "autopilot")
    [exclusion] = recording.one(CLUSTER).plain_inputs["maintenancePolicy"]["maintenanceExclusions"]
    assert exclusion["exclusionOptions"]["scope"] == "NO_MINOR_UPGRADES"


# --- 8. Stack files make plan cannot read ---------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"config:\n  verl-gke:target: [a4\n", "Pulumi.broken.yaml is not valid YAML at line"),
        (b"config:\n  verl-gke:target: \xff\xfe\n", "Pulumi.broken.yaml is not UTF-8 text (byte"),
        (b"- a4\n- a4x\n", "Pulumi.broken.yaml holds a YAML list, not a mapping"),
        (b"config: a4\n", "`config` must be a mapping"),
        (b"config:\n  target: a4\n", "config key 'target' is not of the form <namespace>:<key>"),
    ],
)
def test_unreadable_stack_files_are_config_errors(tmp_path, monkeypatch, capsys, content, expected):
    """A stack file that is not YAML, not UTF-8 or not the expected shape: one message naming
    the file and the problem, exit 2, no traceback."""
    (tmp_path / "Pulumi.yaml").write_text((plan.ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.broken.yaml").write_bytes(content)
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    assert plan.write_plan("broken", None, tmp_path / "build", quiet=True) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
