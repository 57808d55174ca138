"""The job's `timeline` output (components/run/timeline.py): when a real `up` reached each
milestone of the critical-path model, read through the project's fake kubectl
(tests/fakes/kubectl) from the objects Kubernetes would hold, and never a reason for `up` to
fail: what cannot be read is None."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from components.run import timeline
from components.run.job_outputs import JOB_OUTPUTS, PROVIDER
from components.run.ray_access import RequestPolicy
from tests.fakes.cluster import FileCluster
from tools import critical_path

FAKES = Path(__file__).parent / "fakes"
RAY_CLUSTER = "verl-ray"
ACCESS = {"kubeconfig": "apiVersion: v1\n", "namespace": "verl", "ray_cluster": RAY_CLUSTER,
          "state": "grpo-supervisor-state", "service": "verl-ray-head-svc", "port": 8265}
OBSERVED = {"start_time": "2026-12-01T10:27:00+00:00", "first_step_s": 360.0}


@pytest.fixture
def objects(tmp_path, monkeypatch) -> Path:
    """The objects the fake kubectl serves: the supervisor's files (FileCluster: the state
    ConfigMap and the RayCluster), and whatever a test adds."""
    directory = tmp_path / "objects"
    FileCluster(directory, ACCESS["state"], RAY_CLUSTER)
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_OBJECTS", str(directory))
    return directory


def _write(directory: Path, kind: str, name: str, obj: dict) -> None:
    (directory / f"{kind}-{name}.json").write_text(json.dumps(obj))


def _pod(name: str, node_type: str, node: str, scheduled: str, started: str) -> dict:
    container = f"ray-{node_type}"
    return {
        "metadata": {"name": name, "labels": {timeline.CLUSTER_LABEL: RAY_CLUSTER,
                                              timeline.NODE_TYPE_LABEL: node_type}},
        "spec": {"nodeName": node, "containers": [{"name": container}, {"name": "sidecar"}]},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True",
                            "lastTransitionTime": scheduled}],
            "containerStatuses": [
                {"name": "sidecar", "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}},
                {"name": container, "state": {"running": {"startedAt": started}}},
            ],
        },
    }


def _a_fresh_up(directory: Path) -> None:
    """What a fresh `up` leaves: the control plane, two GPU nodes, the head and two workers,
    a ready RayCluster, and a pod of another cluster that must not count."""
    _write(directory, "namespace", "kube-system",
           {"metadata": {"name": "kube-system", "creationTimestamp": "2026-12-01T10:08:00Z"}})
    for name, created in (("gpu-a", "2026-12-01T10:14:10Z"), ("gpu-b", "2026-12-01T10:15:00Z"),
                          ("system", "2026-12-01T10:11:00Z")):
        _write(directory, "node", name, {"metadata": {"name": name, "creationTimestamp": created}})
    _write(directory, "pod", "head", _pod("head", "head", "system", "2026-12-01T10:15:05Z",
                                          "2026-12-01T10:20:00Z"))
    _write(directory, "pod", "w-a", _pod("w-a", "worker", "gpu-a", "2026-12-01T10:15:40Z",
                                         "2026-12-01T10:24:00Z"))
    _write(directory, "pod", "w-b", _pod("w-b", "worker", "gpu-b", "2026-12-01T10:16:00Z",
                                         "2026-12-01T10:25:00Z"))
    other = _pod("x", "worker", "gpu-x", "2026-12-01T11:00:00Z", "2026-12-01T11:00:00Z")
    other["metadata"]["labels"][timeline.CLUSTER_LABEL] = "another-cluster"
    _write(directory, "pod", "x", other)
    path = directory / f"raycluster-{RAY_CLUSTER}.json"
    ray = json.loads(path.read_text())
    ray["status"]["stateTransitionTimes"] = {"ready": "2026-12-01T10:25:30Z"}
    path.write_text(json.dumps(ray))


def test_the_timeline_reads_each_milestone_from_what_kubernetes_keeps(objects):
    """Each milestone from its own record: the control plane from kube-system's creation, the
    GPU nodes from the workers' nodes (the last to register), the GPUs from the workers'
    scheduling, the image from the Ray containers' start (the sidecar's does not count),
    KubeRay's ready transition, and the job's start and first step from Ray's figures; pods of
    another RayCluster are not counted."""
    _a_fresh_up(objects)
    found = timeline.gather(ACCESS, RequestPolicy(), OBSERVED)
    assert found == {
        "clusterCreated": "2026-12-01T10:08:00Z",
        "gpuNodesRegistered": "2026-12-01T10:15:00Z",
        "gpusAllocatable": "2026-12-01T10:16:00Z",
        "imagePulled": "2026-12-01T10:25:00Z",
        "rayClusterReady": "2026-12-01T10:25:30Z",
        "jobStarted": "2026-12-01T10:27:00Z",
        "firstStep": "2026-12-01T10:33:00Z",
    }
    assert tuple(found) == timeline.MILESTONES


def test_a_restarted_container_counts_from_its_first_start(objects):
    """A Ray container that restarted reports its first start (lastState), not the restart:
    the image was on the node from then."""
    _a_fresh_up(objects)
    path = objects / "pod-w-b.json"
    pod = json.loads(path.read_text())
    status = pod["status"]["containerStatuses"][1]
    status["lastState"] = {"terminated": {"startedAt": "2026-12-01T10:23:00Z"}}
    status["state"] = {"running": {"startedAt": "2026-12-01T10:40:00Z"}}
    path.write_text(json.dumps(pod))
    assert timeline.gather(ACCESS, RequestPolicy(), OBSERVED)["imagePulled"] == (
        "2026-12-01T10:24:00Z")


def test_what_cannot_be_read_is_none_and_never_fails(objects):
    """A cluster with none of the objects yet (the RayCluster not ready, no pods, no nodes)
    gives None for each of their milestones; KubeRay's condition stands in for an older
    operator without stateTransitionTimes; a run with no first step has none."""
    path = objects / f"raycluster-{RAY_CLUSTER}.json"
    ray = json.loads(path.read_text())
    ray["status"]["conditions"] = [{"type": "RayClusterProvisioned", "status": "True",
                                    "lastTransitionTime": "2026-12-01T10:25:31Z"}]
    path.write_text(json.dumps(ray))
    found = timeline.gather(ACCESS, RequestPolicy(), {"start_time": None, "first_step_s": None})
    assert found["rayClusterReady"] == "2026-12-01T10:25:31Z"
    assert {k for k, v in found.items() if v is None} == set(timeline.MILESTONES) - {
        "rayClusterReady"}


def test_no_cluster_to_ask_gives_no_timeline(objects, monkeypatch):
    """Without a kubeconfig (job.dashboardAddress) there is nothing to ask; a kubectl that is
    missing or fails gives no timeline either, with a warning, and `up` goes on."""
    assert timeline.gather({"address": "http://127.0.0.1:8265"}, RequestPolicy(), OBSERVED) is None
    monkeypatch.setenv("PATH", str(objects))  # no kubectl there
    assert timeline.gather(ACCESS, RequestPolicy(), OBSERVED) is None


def test_the_timeline_is_a_provider_output_with_the_models_milestones():
    """The provider computes it (job_outputs.py), its keys are the milestones the critical-path
    model closes its segments with, and the schema names each of them."""
    assert any(o.key == "timeline" and o.source == PROVIDER for o in JOB_OUTPUTS)
    assert timeline.MILESTONES == critical_path.MILESTONES
    schema = json.loads((Path(__file__).parents[1] / "schemas/stack-outputs.schema.json")
                        .read_text())
    entry = schema["properties"]["job"]["properties"]["timeline"]
    assert tuple(entry["properties"]) == timeline.MILESTONES


def test_a_gathered_timeline_feeds_the_critical_path(objects, tmp_path):
    """What the provider records is what `--measured` reads: every segment bracketed by two
    recorded milestones is measured."""
    from tests.conftest import rendered

    _a_fresh_up(objects)
    found = timeline.gather(ACCESS, RequestPolicy(), OBSERVED)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"job": {"timeline": found}}))
    _, recording = rendered("a4", "standard")
    chain = critical_path.critical_path(recording)
    rows = critical_path.measured_segments(chain, critical_path.read_timeline(outputs),
                                           critical_path._at("2026-12-01T10:00:00Z"))
    assert all(row["measured"] is not None for row in rows)
    assert sum(row["measured"] for row in rows) == 33


def test_the_provider_records_the_timeline_once_it_followed_the_run(objects, monkeypatch):
    """The job's provider fills `timeline` where it fills firstStepSeconds: after following the
    attempt as far as waitFor, with the attempt's start and first step (Ray and the log are
    stood in for here; tests/test_grpo_job_lifecycle.py follows real ones)."""
    import types

    from components.run import job_provider

    _a_fresh_up(objects)
    attempt = types.SimpleNamespace(submission_id="verl-gke-test-grpo-0123456789ab-a0")
    monkeypatch.setattr(job_provider, "_wait", lambda *args: (attempt, {"status": "RUNNING"}))
    monkeypatch.setattr(job_provider, "_observed", lambda *args: {
        "status": "RUNNING", "start_time": OBSERVED["start_time"],
        "dashboard_path": f"/#/jobs/{attempt.submission_id}"})
    progress = types.SimpleNamespace(first_step_s=OBSERVED["first_step_s"])
    props = {"access": ACCESS, "wait_for": "first-step", "timeout_s": 60}
    outs = job_provider.GrpoJobProvider(RequestPolicy())._follow(None, props, progress, 0)
    assert outs["first_step_s"] == 360.0
    assert outs["timeline"]["firstStep"] == "2026-12-01T10:33:00Z"
    assert outs["timeline"]["gpuNodesRegistered"] == "2026-12-01T10:15:00Z"
