"""The second `pulumi up` of an unchanged stack changes nothing, for every stack and mode.

The state each provider records right after the first `up` (tools/readback.py: what it drops,
normalises or fills in, with sources) is replayed against the same program's inputs through
tools/plan_diff.py, the replace and update logic of `make diff`, including the dynamic
providers' own diff(). Nothing may be replaced or updated.
"""

from __future__ import annotations

import copy
import functools
import json
import re

import pytest

from tests.conftest import STACK_MODES, rendered
from tools import plan, plan_diff, readback

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


def _second_up(resources: list[dict], providers: dict[str, str]) -> list[plan_diff.Change]:
    return plan_diff.resource_changes(_after_create(resources), resources, providers)


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
    [change] = [c for c in plan_diff.resource_changes(states, resources, providers) if c.type == RUN]
    assert change.kind == "update" and change.by_provider


def test_a_type_without_rules_is_named_with_the_fix():
    """The error a new resource type meets says which type and what to add."""
    with pytest.raises(KeyError, match="gcp:redis/instance:Instance has no read-back entry"):
        readback.state_after_create({"type": "gcp:redis/instance:Instance", "inputs": {}})


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
