"""Day two on a real cluster: what changes underneath a deployed stack, replayed offline.

The steady-state replay (tests/test_steady_state.py) sees an unchanged config against an
unchanged cloud. These cases change the cloud or the program under a deployed stack and replay
the next `up` through the same machinery (tools/readback.py, tools/plan_report.py) plus models of
the two engine pieces that decide the Kubernetes provider's fate:

- pulumi-kubernetes DiffConfig (`_kubernetes_provider_replaced`, tests/test_steady_state.py);
- the engine's builtin Stash and replacement triggers (`_stash_after_up` below: pulumi/pulumi
  pkg/resource/deploy/builtins.go:184-262 and step_generator.go:1797-1806, :3683-3698 at
  1b5949891b).

The cases: a GKE credential rotation (a new CA), a cluster replaced under its name (a new CA and
DNS endpoint), and the first `up` of a stack deployed before the identity moved into a Stash.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.cluster.kubeconfig import cluster_identifier
from tests.test_steady_state import (
    K8S_PROVIDER, _active_cluster, _after_create, _kubernetes_provider_replaced,
)
from tools import mockrun, plan, plan_diff, plan_report

STASH = "pulumi:index:Stash"
CLUSTER = "gcp:container/cluster:Cluster"
SECRET = "kubernetes:core/v1:Secret"
ROTATED_CA = "Uk9UQVRFRC1DQQ=="  # base64("ROTATED-CA")
CIDRS = {"verl-gke:controlPlaneCidrs": '["203.0.113.0/24"]'}


def _render(monkeypatch, overrides: dict | None = None, ca: str = mockrun.FAKE_CA,
            dns_id: str = mockrun.FAKE_DNS_ID):
    """The a4 program against a cluster whose CA and DNS endpoint are `ca` and `dns_id`."""
    with monkeypatch.context() as patched:
        patched.setattr(mockrun, "FAKE_CA", ca)
        patched.setattr(mockrun, "FAKE_DNS_ID", dns_id)
        inputs, recording = plan.run_program("a4", "standard", overrides)
    return plan.plan_document("a4", inputs, recording)["resources"], recording


def _provider_config(recording) -> dict:
    inputs = recording.one(K8S_PROVIDER).inputs
    return {k: mockrun.unwrap(v) for k, v in inputs.items()}


def _stash_state(recording) -> dict[str, Any] | None:
    """The Stash as the first `up` left it in the state: create's {input, output: input}."""
    stashes = recording.of_type(STASH)
    if not stashes:
        return None
    [stash] = stashes
    value = mockrun.unwrap(stash.inputs["input"])
    return {"input": value, "output": value, "trigger": stash.options.replacement_trigger}


def _should_trigger_replace(new: Any, old: Any) -> bool:
    """step_generator.go:3683-3698: nulls trigger nothing, otherwise a changed value does (an
    unknown, which this offline replay never has, always would)."""
    if old is None or new is None:
        return False
    return new != old


def _stash_after_up(old: dict[str, Any] | None, recording) -> tuple[str, Any]:
    """What the next `up` does to the Stash and what its `output` is then: created (no old
    state: builtins.go Create, output = input), replaced (a changed trigger: a new Stash,
    created the same way), or kept (Update keeps the old output, :252-262; the input is
    ignored by the program anyway)."""
    [stash] = recording.of_type(STASH)
    new_input = mockrun.unwrap(stash.inputs["input"])
    if old is None:
        return "created", new_input
    if _should_trigger_replace(stash.options.replacement_trigger, old["trigger"]):
        return "replaced", new_input
    return "kept", old["output"]


def _next_provider_config(old_recording, new_recording) -> dict:
    """The provider's inputs at the next `up`: its clusterIdentifier is the Stash's output as
    the engine gives it, not the fresh create the offline render shows. A program without a
    Stash sends what it renders."""
    config = _provider_config(new_recording)
    if new_recording.of_type(STASH):
        old = _stash_state(old_recording) if old_recording is not None else None
        _, output = _stash_after_up(old, new_recording)
        config["clusterIdentifier"] = output
    return config


@pytest.mark.parametrize("overrides", [None, CIDRS], ids=["dns", "ip"])
def test_a_credential_rotation_replaces_neither_the_provider_nor_anything_in_the_cluster(
        monkeypatch, overrides):
    """GKE's credential rotation gives the cluster a new CA, which the next refresh reads
    (TF resource_container_cluster.go flattenMasterAuth). The Kubernetes provider's identity
    must not follow it: the Stash keeps the identifier it was created with, so DiffConfig
    sees it unchanged and at most updates the provider (the IP kubeconfig names the CA); the
    DNS-endpoint stack changes nothing at all. Before the Stash, the identifier carried the
    live CA's digest and the rotation replaced the provider and every object in the cluster."""
    before, first = _render(monkeypatch, overrides)
    after, rotated = _render(monkeypatch, overrides, ca=ROTATED_CA)
    old_config, new_config = _provider_config(first), _next_provider_config(first, rotated)
    # The live CA's digest moved: an identifier computed from it would have replaced.
    assert old_config["clusterIdentifier"] != cluster_identifier(
        "example-project", "us-central1", "verl-a4", ROTATED_CA)
    assert not _kubernetes_provider_replaced(old_config, new_config)
    assert _stash_after_up(_stash_state(first), rotated)[0] == "kept"
    if overrides is None:
        assert _active_cluster(new_config["kubeconfig"]) == _active_cluster(old_config["kubeconfig"])
        # The whole next `up`, with the provider's identifier as the engine gives it: nothing.
        for r in after:
            if r["type"] == K8S_PROVIDER:
                r["inputs"]["clusterIdentifier"] = new_config["clusterIdentifier"]
        assert [(c.kind, c.name) for c in plan_report.resource_changes(
            _after_create(before), after, plan_diff.pickled_providers(rotated))] == []


def test_a_cluster_replaced_under_its_name_replaces_the_provider_with_it(monkeypatch):
    """A ForceNew change recreates the cluster under its name, delete first: a new CA and a new
    DNS endpoint. The Stash's trigger (the endpoint's name) changed, so it is replaced and the
    new cluster gets its own identifier, which DiffConfig replaces the provider on, and with
    it every object, created again in the new, empty cluster. The engine does it earlier too:
    the identifier depends on the cluster's output, so the delete-first replacement's
    dependent-replacement pass sees it unknown (step_generator.go:3295-3385), which holds even
    were GKE to give the new cluster the old endpoint's name."""
    _, first = _render(monkeypatch)
    _, recreated = _render(monkeypatch, ca=ROTATED_CA, dns_id="fedcba9876543210")
    assert _stash_after_up(_stash_state(first), recreated)[0] == "replaced"
    old_config, new_config = _provider_config(first), _next_provider_config(first, recreated)
    assert new_config["clusterIdentifier"] == cluster_identifier(
        "example-project", "us-central1", "verl-a4", ROTATED_CA)
    assert _kubernetes_provider_replaced(old_config, new_config)
    cluster, provider = recreated.one(CLUSTER), recreated.one(K8S_PROVIDER)
    assert cluster.options.delete_before_replace
    assert cluster.urn in provider.input_dependencies["clusterIdentifier"]


def test_the_first_up_with_the_stash_leaves_the_provider_as_it_is(monkeypatch):
    """A stack deployed before the Stash holds a provider whose clusterIdentifier is the CA
    digest of its cluster, computed from the live CA. Its next `up` creates the Stash with that
    same value (the same formula, the same CA), so the provider's inputs do not change: one
    resource added, nothing replaced or updated. (Changing the identifier's value would itself
    replace the provider and everything in the cluster.)"""
    after, upgraded = _render(monkeypatch)
    [stash] = [r for r in after if r["type"] == STASH]
    before = [r for r in copy.deepcopy(after) if r["type"] != STASH]
    old_config = _provider_config(upgraded)
    old_config["clusterIdentifier"] = cluster_identifier(
        "example-project", "us-central1", "verl-a4", mockrun.FAKE_CA)
    assert _stash_after_up(None, upgraded)[0] == "created"
    new_config = _next_provider_config(None, upgraded)
    assert new_config == old_config
    assert not _kubernetes_provider_replaced(old_config, new_config)
    changes = plan_report.resource_changes(
        _after_create(before), after, plan_diff.pickled_providers(upgraded))
    assert [(c.kind, c.type) for c in changes] == [("add", STASH)]
    assert stash["options"]["ignoreChanges"] == ["input"]


def test_a_stack_without_tracker_keys_sends_its_secret_no_data():
    """The API server stores no empty map (Secret.data is `omitempty`): a Secret sent with
    `data: {}` differs from its live object on every `up`, and pulumi-kubernetes replaces a
    Secret whose data changed (tools/force_new.py). The trackers Secret of a stack with no
    tracker key is sent without `data`, and the read-back model drops an empty map, so the
    steady-state replay would show the update (tests/test_steady_state.py)."""
    from tools import readback

    _, recording = plan.run_program("a4", "standard")
    secret = recording.one(SECRET, "trackers-secret")
    assert "data" not in secret.inputs
    sent_empty = {"type": SECRET, "inputs": {"type": "Opaque", "data": {}}}
    assert "data" not in readback.state_after_create(sent_empty)["inputs"]
