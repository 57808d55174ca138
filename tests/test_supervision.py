"""The supervisor's Kubernetes objects (components/run/supervision.py) and its wiring in the
program: schema-valid, namespaced, one tick at a time, created after the job and deleted
before it, and code that runs on a bare Python."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from components.facts import pins
from components.run import supervision
from components.run.supervision import RunSupervisorArgs, render_objects, state_name
from components.runspec.lifecycle import SUPERVISOR_PERIOD_MINUTES, RunLifecycle
from components.facts.hardware import Target
from components.raycluster.ray_cluster_args import CLUSTER_NAMES
from tests import k8s_schemas
from tools import mockrun
from tests.conftest import rendered

SPEC = {"submission_id": "verl-gke-a4-grpo-0123456789ab", "entrypoint": "python3 -m x",
        "runtime_env": {"env_vars": {}}, "metadata": {"verl-gke-stack": "a4"}, "export": None}


def _objects(**run) -> dict[str, dict]:
    args = RunSupervisorArgs(
        run=RunLifecycle(**run), spec=SPEC, namespace="verl", ray_cluster="b200-ray-cluster",
        head_service="b200-ray-cluster-head-svc", image="python:3.12.8-slim-bookworm",
        node_selector={"cloud.google.com/gke-nodepool": "system"},
    )
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render_objects("sup", args)}


def test_every_object_is_schema_valid():
    """Each object validates against Kubernetes 1.34's schemas in strict mode."""
    for obj in _objects().values():
        k8s_schemas.validate(obj)


def test_rights_are_one_namespace_one_config_map_and_one_ray_cluster():
    """A Role (never a ClusterRole) that reads and patches only the state ConfigMap and only
    patches the one RayCluster (it never reads it: the PATCH reply is the object): nothing else
    in the cluster can be changed by the supervisor, no unused verb (review finding 9)."""
    objects = _objects()
    assert not [key for key in objects if key.startswith("ClusterRole")]
    rules = objects["Role/sup"]["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [state_name("sup")],
         "verbs": ["get", "patch"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"],
         "resourceNames": ["b200-ray-cluster"], "verbs": ["patch"]},
    ]
    assert objects["RoleBinding/sup"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "sup", "namespace": "verl"}
    ]


def test_one_tick_at_a_time_on_the_pinned_image_through_the_head_service():
    """concurrencyPolicy Forbid, no retries of a failed tick (the next one looks again), the
    pinned image, the dashboard reached through the head Service, and the run's settings."""
    objects = _objects(max_retries=5, max_preemptions=7, stall_minutes=20, release_gpus=False)
    cron = objects["CronJob/sup"]["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["schedule"] == f"*/{SUPERVISOR_PERIOD_MINUTES} * * * *"
    job = cron["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    pod = job["template"]["spec"]
    assert pod["containers"][0]["image"] == pins.SUPERVISOR_IMAGE
    assert pod["serviceAccountName"] == "sup"
    spec = json.loads(objects["ConfigMap/sup"]["data"]["run.json"])
    assert spec["dashboard"] == "http://b200-ray-cluster-head-svc.verl.svc:8265"
    assert (spec["max_retries"], spec["max_preemptions"], spec["stall_s"],
            spec["release_gpus"]) == (5, 7, 1200, False)
    assert spec["submission_id"] == SPEC["submission_id"]
    assert "data" not in objects[f"ConfigMap/{state_name('sup')}"]  # the supervisor's alone


def test_the_shipped_code_runs_on_the_standard_library_alone(tmp_path):
    """The pod's files, laid out as the ConfigMap mounts them, import on an interpreter without
    site-packages (the image is a bare Python)."""
    code = _objects()["ConfigMap/sup"]["data"]
    for relative in supervision.CODE_PATHS:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code[path.name])
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import components.supervisor.supervisor as s; print(s.tick)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("stack", ["a4", "a4x"])
def test_the_supervisor_follows_the_job_and_is_deleted_before_it(stack):
    """Every supervisor object but its state waits for the GrpoRun (so `pulumi destroy`
    deletes it first); the GrpoRun waits for the state ConfigMap (so the provider's notes of
    the run's first submission have somewhere to go, and a destroy deletes the state last);
    the state's data is never Pulumi's, and the job's provider knows where it is."""
    _, recording = rendered(stack, "standard")
    run = recording.one("pulumi-python:dynamic/verl-gke:GrpoRun", "grpo-run")
    supervisor = recording.one("verl-gke:index:RunSupervisor", "grpo-supervisor")
    children = recording.children_of(supervisor.urn)
    assert {c.type.split(":")[-1] for c in children} == {
        "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "CronJob"}
    state = next(c for c in children if c.name == "grpo-supervisor-state")
    for child in children:
        assert (run.urn in child.dependencies) == (child is not state), child.name
    assert state.urn in run.dependencies
    assert "data" in state.ignore_changes
    access = mockrun.unwrap(run.inputs["access"])
    assert access["state"] == state_name("grpo-supervisor")
    assert access["ray_cluster"] == CLUSTER_NAMES[Target(stack)]
