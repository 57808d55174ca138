"""The second `pulumi up` of an unchanged stack changes nothing, for every stack and mode.

The state each provider records right after the first `up` (tools/readback.py: what it drops,
normalises or fills in, with sources) is replayed against the same program's inputs through
tools/plan_report.py, the replace and update logic of `make diff`, including the dynamic
providers' own diff(). Nothing may be replaced or updated.
"""

from __future__ import annotations

import copy
import functools
import json
import re

import pytest
import yaml

from tests.conftest import STACK_MODES, rendered
from tools import plan, plan_diff, plan_report, readback

CLUSTER = "gcp:container/cluster:Cluster"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
RUN = "pulumi-python:dynamic/verl-gke:GrpoRun"
IDS = [f"{s}-{m}" for s, m in STACK_MODES]


@functools.lru_cache(maxsize=None)
def _plan(stack: str, mode: str) -> tuple[list[dict], dict[str, str]]:
    """The plan's resources and the pickled dynamic providers, once per stack and mode."""
    inputs, recording = rendered(stack, mode)
    return plan.plan_document(stack, inputs, recording)["resources"], plan_diff.pickled_providers(recording)


def _after_create(resources: list[dict]) -> list[dict]:
    return [readback.state_after_create(r) if r["custom"] else r for r in resources]


def _second_up(resources: list[dict], providers: dict[str, str]) -> list[plan_report.Change]:
    return plan_report.resource_changes(_after_create(resources), resources, providers)


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=IDS)
def test_every_resource_type_of_the_plan_has_read_back_rules(stack, mode):
    """Adding a resource type means saying what its provider reads back (or that it reads
    back what was sent), with the source: a type without an entry fails here."""
    resources, _ = _plan(stack, mode)
    missing = sorted({r["type"] for r in resources if r["custom"]} - set(readback.READBACK))
    assert missing == [], f"no read-back entry in tools/readback.py for {missing}"


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=IDS)
def test_the_second_up_of_an_unchanged_stack_replaces_and_updates_nothing(stack, mode):
    """State after create vs the same config: no replacement, no update, no engine change."""
    resources, providers = _plan(stack, mode)
    changes = _second_up(resources, providers)
    assert [(c.kind, c.name, [f[0] for f in c.fields]) for c in changes] == []


def test_without_ignoring_the_default_pools_node_config_the_cluster_would_be_replaced():
    """The removed default pool's nodeConfig reads back empty and is ForceNew: the rule is what
    makes the ignore necessary (REAL-PROVIDER-REVIEW-2 defect 1), and the replay sees it."""
    resources, providers = _plan("a4", "standard")
    unguarded = copy.deepcopy(resources)
    [cluster] = [r for r in unguarded if r["type"] == CLUSTER]
    assert "nodeConfig" in cluster["options"]["ignoreChanges"]
    cluster["options"]["ignoreChanges"].remove("nodeConfig")
    [change] = [c for c in _second_up(unguarded, providers) if c.type == CLUSTER]
    assert change.kind == "replace" and change.delete_first
    reasons = {path: why for path, _, _, why in change.fields}
    assert reasons["nodeConfig.serviceAccount"] == "provider replaces on node_config.service_account"


def test_autopilot_sends_no_default_pool_and_ignores_no_node_config():
    """Autopilot has no default pool to remove: nothing to ignore, nothing read back empty."""
    resources, _ = _plan("a4", "autopilot")
    [cluster] = [r for r in resources if r["type"] == CLUSTER]
    assert "nodeConfig" not in cluster["inputs"] and "nodeConfig" not in cluster["options"]["ignoreChanges"]


def test_the_replay_asks_the_runs_own_provider():
    """A run that a refresh found FAILED is resubmitted by the next `up` (GrpoRun's diff): the
    replay must show that update, so the dynamic providers are really asked."""
    resources, providers = _plan("a4", "standard")
    states = _after_create(resources)
    [run] = [r for r in states if r["type"] == RUN]
    run["inputs"]["status"] = "FAILED"
    [change] = [c for c in plan_report.resource_changes(states, resources, providers) if c.type == RUN]
    assert change.kind == "update" and change.by_provider


def test_a_type_without_rules_is_named_with_the_fix():
    """The error a new resource type meets says which type and what to add."""
    with pytest.raises(KeyError, match="gcp:redis/instance:Instance has no read-back entry"):
        readback.state_after_create({"type": "gcp:redis/instance:Instance", "inputs": {}})


K8S_PROVIDER = "pulumi:providers:kubernetes"


@functools.lru_cache(maxsize=None)
def _rendered_with_cidrs() -> tuple[list[dict], dict[str, str], dict]:
    inputs, recording = plan.run_program("a4", "standard", {"verl-gke:controlPlaneCidrs": '["203.0.113.0/24"]'})
    return (plan.plan_document("a4", inputs, recording)["resources"],
            plan_diff.pickled_providers(recording), _provider_config(recording))


def _provider_config(recording) -> dict:
    """The Kubernetes provider's inputs with the kubeconfig's value (plan.json shows a secret)."""
    inputs = recording.one(K8S_PROVIDER).inputs
    return {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in inputs.items()}


def _active_cluster(kubeconfig: str) -> dict:
    document = yaml.safe_load(kubeconfig)
    [context] = [c for c in document["contexts"] if c["name"] == document["current-context"]]
    [cluster] = [c for c in document["clusters"] if c["name"] == context["context"]["cluster"]]
    return cluster["cluster"]


def _kubernetes_provider_replaced(olds: dict, news: dict) -> bool:
    """pulumi-kubernetes DiffConfig (provider/pkg/provider/provider.go @94977969d6), for the
    inputs this program sends: a changed clusterIdentifier replaces (:490-492); one set and
    unchanged never does (:495-503); otherwise a changed active cluster of the kubeconfig
    (server, CA) replaces (:545-560)."""
    old_id, new_id = olds.get("clusterIdentifier"), news.get("clusterIdentifier")
    if old_id is not None and new_id is not None:
        return old_id != new_id
    return _active_cluster(olds["kubeconfig"]) != _active_cluster(news["kubeconfig"])


def _deployed_before_dns_endpoints() -> tuple[list[dict], dict]:
    """The a4 plan and provider config as main rendered them before the DNS endpoint: no
    controlPlaneEndpointsConfig, a public IP endpoint, no clusterIdentifier, and the IP
    kubeconfig (tests/test_components.py holds the cidrs one equal to it, byte for byte)."""
    resources, _ = _plan("a4", "standard")
    before = copy.deepcopy(resources)
    for r in before:
        if r["type"] == CLUSTER:
            del r["inputs"]["controlPlaneEndpointsConfig"]
            r["inputs"]["privateClusterConfig"]["enablePrivateEndpoint"] = False
        if r["type"] == K8S_PROVIDER:
            del r["inputs"]["clusterIdentifier"]
    *_, with_cidrs = _rendered_with_cidrs()
    return before, {k: v for k, v in with_cidrs.items() if k != "clusterIdentifier"}


def test_a_stack_that_keeps_its_ip_endpoint_is_steady_too():
    """controlPlaneCidrs (IP endpoint, authorized networks, enablePrivateEndpoint false): what
    the provider reads back of them changes nothing on the second `up` either."""
    resources, providers, _ = _rendered_with_cidrs()
    [cluster] = [r for r in resources if r["type"] == CLUSTER]
    assert cluster["inputs"]["controlPlaneEndpointsConfig"]["ipEndpointsConfig"] == {"enabled": True}
    assert [(c.kind, c.name) for c in _second_up(resources, providers)] == []


def test_the_dns_only_cluster_rests_on_the_providers_suppression_of_enable_private_endpoint():
    """With the IP endpoints off, the provider reads enablePrivateEndpoint back as the API
    dictates while the program sends none; only containerClusterApiDictatedPrivateEndpointField
    (google-beta 8.0) keeps that from updating the cluster on every `up`: the replay sees the
    update once the value is compared."""
    resources, providers = _plan("a4", "standard")
    [rule] = [r for r in readback.READBACK[CLUSTER].rules
              if r.path == "privateClusterConfig.enablePrivateEndpoint"]
    assert not rule.compared
    states = _after_create(resources)
    [state] = [s for s in states if s["type"] == CLUSTER]
    readback._set(state["inputs"], rule.path, rule.read(None))
    [change] = [c for c in plan_report.resource_changes(states, resources, providers) if c.type == CLUSTER]
    assert (change.kind, [f[0] for f in change.fields]) == ("update", [rule.path])


def test_upgrading_straight_to_the_dns_endpoint_would_replace_the_kubernetes_provider():
    """A stack deployed before the DNS endpoint has no clusterIdentifier to hold its provider:
    one `up` that moves its kubeconfig to the DNS endpoint replaces the provider, and with it
    every object in the cluster. Hence the two steps of docs/design.md."""
    _, old_provider = _deployed_before_dns_endpoints()
    inputs, recording = rendered("a4", "standard")
    assert _kubernetes_provider_replaced(old_provider, _provider_config(recording))


def test_the_two_step_upgrade_updates_in_place_and_replaces_nothing():
    """Step 1, controlPlaneCidrs set: the cluster gains the DNS endpoint and keeps its IP one,
    the provider gains its clusterIdentifier, kubeconfig unchanged. Step 2, controlPlaneCidrs
    removed: the IP endpoint goes, the kubeconfig moves to the DNS endpoint under the same
    clusterIdentifier. Both are updates: the cluster's endpoint blocks are not ForceNew
    (tools/force_new.py), the provider is never replaced, and the run and the cluster check
    take the new kubeconfig as an update of their `access`."""
    before, old_provider = _deployed_before_dns_endpoints()
    step_1, providers, step_1_provider = _rendered_with_cidrs()
    step_2, _ = _plan("a4", "standard")
    _, recording = rendered("a4", "standard")
    step_2_provider = _provider_config(recording)
    # Step 1 changes the provider's clusterIdentifier, step 2 its kubeconfig (a secret, which a
    # plan shows as "[secret]" on both sides: the DiffConfig model below sees it).
    for olds, news, old_config, new_config, changed in (
        (before, step_1, old_provider, step_1_provider, [CLUSTER, K8S_PROVIDER]),
        (step_1, step_2, step_1_provider, step_2_provider, [CLUSTER]),
    ):
        changes = plan_report.resource_changes(_after_create(olds), news, providers)
        assert sorted((c.kind, c.type) for c in changes) == [("update", t) for t in changed]
        assert not _kubernetes_provider_replaced(old_config, new_config)
    assert _active_cluster(step_1_provider["kubeconfig"]) == _active_cluster(old_provider["kubeconfig"])
    assert _active_cluster(step_2_provider["kubeconfig"]) != _active_cluster(step_1_provider["kubeconfig"])
    # The job and the cluster check hold the kubeconfig in `access` (a secret in the plan):
    # their own diff() takes the new one as an update, never a resubmission.
    judged_types = []
    for r in step_2:
        if r["urn"] in providers and "access" in r["inputs"]:
            judged_types.append(r["type"])
            olds = copy.deepcopy(r["inputs"])
            olds["access"]["kubeconfig"] = step_1_provider["kubeconfig"]
            news = copy.deepcopy(r["inputs"])
            news["access"]["kubeconfig"] = step_2_provider["kubeconfig"]
            judged = plan_report.provider_diff(providers[r["urn"]], f"{r['name']}-id", olds, news)
            assert (r["type"], judged.changes, judged.replaces) == (r["type"], True, ())
    assert sorted(judged_types) == [
        "pulumi-python:dynamic/verl-gke:ClusterCheckRun", "pulumi-python:dynamic/verl-gke:GrpoRun",
    ]


def test_a_cluster_replaced_under_its_name_still_replaces_the_kubernetes_provider():
    """A ForceNew change recreates the cluster under the same name (delete first): the new one
    is empty, so the provider, and the objects in the cluster, must be replaced with it. The
    DNS kubeconfig names no CA and maybe the same DNS name; the clusterIdentifier carries the
    CA's digest, which the new cluster does not share (and which is unknown at the preview of
    the replacement, which DiffConfig also takes as a replacement)."""
    _, recording = rendered("a4", "standard")
    config = _provider_config(recording)
    recreated = dict(config, clusterIdentifier=config["clusterIdentifier"].rsplit("@", 1)[0] + "@ca-sha256:0")
    assert _active_cluster(recreated["kubeconfig"]) == _active_cluster(config["kubeconfig"])
    assert _kubernetes_provider_replaced(config, recreated)


def test_a_dashboard_field_sent_at_its_proto3_default_is_an_update_on_every_up():
    """The Monitoring API leaves out fields at their proto3 default, and the provider's diff
    suppression removes only keys the API added: a tile sent at `"xPos": 0` comes back without
    it and differs on every `up` (REAL-PROVIDER-REVIEW-3 finding 2). The rule is compared, so
    the replay sees it; a label with an empty value is a map entry and comes back as sent."""
    resources, providers = _plan("a4", "standard")
    sent = copy.deepcopy(resources)
    [dashboard] = [r for r in sent if r["type"] == DASHBOARD]
    body = json.loads(dashboard["inputs"]["dashboardJson"])
    assert body["labels"] == {"verl-gke": ""}
    body["mosaicLayout"]["tiles"][0]["xPos"] = 0
    dashboard["inputs"]["dashboardJson"] = json.dumps(body)
    [change] = [c for c in _second_up(sent, providers) if c.type == DASHBOARD]
    assert change.kind == "update" and [f[0] for f in change.fields] == ["dashboardJson"]


_CITED = re.compile(r"\b[\w/]+\.go:\d+")
_MECHANISMS = ("DiffSuppressFunc", "StateFunc", "Optional+Computed", "Computed only", "TypeSet", "flatten")


def test_every_rule_that_compares_nothing_cites_the_provider_code_that_makes_it_so():
    """A field declared "not compared" hides a difference from the steady-state test: each such
    rule names the provider mechanism (a DiffSuppressFunc, a StateFunc, a set, Optional+Computed
    left unset, Computed only, a flatten that reads back only what was configured) and the file
    and line where it is."""
    for type_, entry in readback.READBACK.items():
        for rule in entry.rules:
            if not rule.compared:
                assert _CITED.search(rule.source), (type_, rule.path)
                assert any(m in rule.source for m in _MECHANISMS), (type_, rule.path)
