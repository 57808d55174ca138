"""Day two for the Ray pods: a new image or pod shape recreates them, and replaces the run.

KubeRay patches a RayCluster's spec and keeps the running pods unless
`spec.upgradeStrategy.type` is Recreate (ray-project/kuberay v1.7.0
ray-operator/controllers/ray/raycluster_controller.go:968-983, :1462-1505). A4X runs the pinned
chart (v1.7.0), so its RayCluster carries the strategy and is updated in place; the GKE Ray
add-on (a4, a3u) runs a KubeRay of unknown version, so there the RayCluster is replaced, delete
first. On every target the run is replaced with the pods (its `ray_pods` input), stopped first,
resuming from its checkpoints when its config did not change. Each case renders two plans
and compares them with tools/plan_report.py (`make diff`), the run judged by its own provider.
"""

from __future__ import annotations

import json

import pytest

from components.raycluster import ray_cluster_spec, verl_ray_cluster
from tests.k8s_schemas import validate_custom
from tools import plan, plan_diff, plan_report

RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
RUN = "pulumi-python:dynamic/verl-gke:GrpoRun"
NEW_IMAGE = {"verl-gke:job": json.dumps({"image": "verlai/verl:vllm011.dev8"})}


def _plan(stack: str, overrides: dict | None = None):
    inputs, recording = plan.run_program(stack, "standard", overrides)
    return plan.plan_document(stack, inputs, recording)["resources"], plan_diff.pickled_providers(recording)


def _changes(stack: str, before: list[dict], after: list[dict], providers: dict) -> dict[str, plan_report.Change]:
    changes = plan_report.resource_changes(before, after, providers)
    return {c.type: c for c in changes if c.type in (RAY_CLUSTER, RUN)}


def _reasons(change: plan_report.Change) -> set[str]:
    return {why for *_, why in change.fields if why}


def test_a_new_image_replaces_the_add_ons_ray_cluster_and_the_run_with_it():
    """a4 (GKE Ray add-on, KubeRay version unknown): a changed job.image replaces the
    RayCluster, delete first, so that the operator deletes the old pods with it; the run is
    replaced too (a new run on the new image). Without the replace_on_changes the RayCluster
    would be a mere update and the new run would train on the old pods."""
    before, _ = _plan("a4")
    after, providers = _plan("a4", NEW_IMAGE)
    changes = _changes("a4", before, after, providers)
    cluster, run = changes[RAY_CLUSTER], changes[RUN]
    assert (cluster.kind, cluster.delete_first) == ("replace", True)
    assert _reasons(cluster) == {"replaceOnChanges: spec"}
    assert (run.kind, run.delete_first) == ("replace", True)
    assert "its provider's diff() replaces on ray_pods" in _reasons(run)


def test_a_new_image_recreates_a4xs_pods_through_the_upgrade_strategy_and_replaces_the_run():
    """a4x (the pinned KubeRay v1.7.0): the RayCluster carries `upgradeStrategy: Recreate`,
    valid against that version's CRD, and a changed image is an update of it (KubeRay then
    deletes every pod whose spec hash differs); the run is replaced with the pods."""
    before, _ = _plan("a4x")
    after, providers = _plan("a4x", NEW_IMAGE)
    [cluster_inputs] = [r["inputs"] for r in after if r["type"] == RAY_CLUSTER]
    assert cluster_inputs["spec"]["upgradeStrategy"] == {"type": "Recreate"}
    validate_custom(cluster_inputs)
    changes = _changes("a4x", before, after, providers)
    cluster, run = changes[RAY_CLUSTER], changes[RUN]
    assert cluster.kind == "update" and not _reasons(cluster)
    assert (run.kind, run.delete_first) == ("replace", True)
    assert "its provider's diff() replaces on ray_pods" in _reasons(run)


@pytest.mark.parametrize(("stack", "cluster_kind"), [("a4", "replace"), ("a4x", "update")])
def test_a_pod_shape_change_alone_replaces_the_run_that_keeps_its_identity(monkeypatch, stack, cluster_kind):
    """A program upgrade that changes only the Ray pods' shape (here the head's /dev/shm) keeps
    the run's identity (same submission id, same run directory) but still recreates the pods,
    which ends the live attempt: the run is replaced (stopped first) through `ray_pods` alone,
    and resumes from its checkpoints."""
    before, _ = _plan(stack)
    monkeypatch.setattr(ray_cluster_spec, "HEAD_SHM_SIZE", "12Gi")
    after, providers = _plan(stack)
    changes = _changes(stack, before, after, providers)
    cluster, run = changes[RAY_CLUSTER], changes[RUN]
    assert cluster.kind == cluster_kind
    assert run.kind == "replace"
    assert [path for path, *_ in run.fields] == ["ray_pods"]


def test_the_pods_digest_ignores_what_does_not_recreate_pods():
    """The digest follows KubeRay's own upgrade hash: worker counts (the autoscaler's) and the
    strategy itself do not count (utils/util.go:645-668 at v1.7.0); a template field does."""
    spec = {"rayVersion": "2.47.0", "headGroupSpec": {"template": {"spec": {"a": 1}}},
            "workerGroupSpecs": [{"replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                                  "template": {"spec": {"b": 1}}}]}
    digest = verl_ray_cluster.spec_digest(spec)
    counted = json.loads(json.dumps(spec))
    counted["workerGroupSpecs"][0].update(replicas=4, minReplicas=4, maxReplicas=4)
    counted["upgradeStrategy"] = {"type": "Recreate"}
    assert verl_ray_cluster.spec_digest(counted) == digest
    counted["headGroupSpec"]["template"]["spec"]["a"] = 2
    assert verl_ray_cluster.spec_digest(counted) != digest


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a4", "autopilot"), ("a4x", "standard")])
def test_the_ray_head_is_protected_from_voluntary_evictions(stack, mode):
    """The head holds the run's driver and Ray's GCS: a drain or a scale-down that moves it
    costs the run an attempt. Its pod template says the cluster autoscaler must not evict it
    (`safe-to-evict: "false"`), a PodDisruptionBudget selecting exactly the head allows no
    voluntary eviction of a ready head (a broken one may go), and every container the program
    gives the head requests what it is limited to, so under node pressure its usage never
    exceeds its requests (the kubelet evicts such pods first)."""
    from tests.k8s_schemas import validate_core

    _, recording = plan.run_program(stack, mode)
    ray_cluster = recording.one(RAY_CLUSTER).plain_inputs
    head = ray_cluster["spec"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    for container in [*head["spec"]["containers"], *head["spec"].get("initContainers", [])]:
        assert container["resources"]["requests"] == container["resources"]["limits"], container["name"]
    budget = recording.one("kubernetes:policy/v1:PodDisruptionBudget").plain_inputs
    validate_core(budget)
    assert budget["spec"]["maxUnavailable"] == 0
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert budget["spec"]["selector"]["matchLabels"] == {
        "ray.io/cluster": ray_cluster["metadata"]["name"], "ray.io/node-type": "head"}
    assert budget["metadata"]["namespace"] == ray_cluster["metadata"]["namespace"]
