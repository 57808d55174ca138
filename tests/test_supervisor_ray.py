"""The in-cluster supervisor (components/supervisor/supervisor.py) against a real local Ray.

Each test runs the supervisor's ticks the way its CronJob would, with its own stdlib Ray client
(RayHttp) and the state ConfigMap and RayCluster kept in files (tests/fakes/cluster.py), which
the fake kubectl serves to the job's provider: what the supervisor records is what `pulumi
refresh` reads. The stand-in trainer (tests/fakes/verl_trainer.py) checkpoints and resumes as
verl does, so "resumes" is checked in the job's own log.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from components.facts import verl
from components.supervisor import protocol, supervisor
from components.run.job_provider import PROVIDER_VERSION, GrpoJobProvider
from components.run.ray_access import RayAccessError, RequestPolicy
from components.runspec.run import export_command
from tests.fakes.cluster import FileCluster
from tools.local_ray import list_jobs

FAKES = Path(__file__).parent / "fakes"
TRAINER = f"{sys.executable} {FAKES / 'verl_trainer.py'}"
POLICY = RequestPolicy(
    timeout_s=5, attempts=2, backoff_s=0.1, forward_timeout_s=10,
    poll_min_s=0.1, poll_max_s=0.3, stop_timeout_s=30, progress_every_s=5,
    # No node of the test head is ever lost: no wait for one's death to be recorded.
    settle_s=0.5,
)
KUBECONFIG = "apiVersion: v1\nkind: Config\n"
RAY_CLUSTER = "test-ray-cluster"


def spec_for(ray_head, command: str, **overrides) -> dict:
    """run.json as supervision.render_spec writes it, with a fresh id and resource."""
    resource = f"grpo-{uuid.uuid4().hex[:6]}"
    return {
        "submission_id": f"verl-gke-test-{resource}-{uuid.uuid4().hex[:12]}",
        "entrypoint": command,
        "runtime_env": {"env_vars": {}},
        "metadata": {"verl-gke-stack": "test", "verl-gke-resource": resource},
        "export": None,
        "max_retries": 2,
        "stall_s": 600,
        "deadline_s": 3600,
        "settle_s": 0.5,  # as POLICY's: no node of the test head is ever lost
        "release_gpus": True,
        "dashboard": ray_head.dashboard_url,
        "namespace": "verl",
        "ray_cluster": RAY_CLUSTER,
        "state": "grpo-supervisor-state",
        **overrides,
    }


def provider_props(spec: dict, wait_for: str = "submitted", **overrides) -> dict:
    """The provider's inputs for the same run, reaching Kubernetes through the fake kubectl."""
    access = {"kubeconfig": KUBECONFIG, "namespace": "verl", "service": "verl-ray-head-svc",
              "port": 8265, "ray_cluster": RAY_CLUSTER, "state": spec["state"]}
    export = spec.get("export") or {}
    return {
        "submission_id": spec["submission_id"], "entrypoint": spec["entrypoint"],
        "runtime_env": spec["runtime_env"], "staged": None, "checked": None,
        "metadata": spec["metadata"], "wait_for": wait_for, "timeout_s": 60,
        "max_retries": spec["max_retries"], "access": access,
        "checkpoint_uri": "gs://bucket/checkpoints/grpo-16gpu-0123456789ab",
        "run_dir": "grpo-16gpu-0123456789ab",
        "export_entrypoint": export.get("entrypoint"),
        "export_resources": export.get("resources"),
        "model_uri": "gs://bucket/checkpoints/grpo-16gpu-0123456789ab/huggingface"
        if export else None,
        "version": PROVIDER_VERSION, "job_state": "", **overrides,
    }


@pytest.fixture
def cluster(tmp_path, ray_head, monkeypatch):
    """The state ConfigMap and RayCluster, shared by the supervisor and the fake kubectl."""
    objects = tmp_path / "objects"
    files = FileCluster(objects, "grpo-supervisor-state", RAY_CLUSTER)
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{ray_head.dashboard_port}")
    monkeypatch.setenv("FAKE_KUBECTL_SERVICE", "verl-ray-head-svc")
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(tmp_path / "kubectl.jsonl"))
    monkeypatch.setenv("FAKE_KUBECTL_OBJECTS", str(objects))
    return files


def ticker(ray_head, said: list[str]):
    """One supervisor tick. The head is shared with the other test files' workers, and a tick
    rightly holds a release while any job on the cluster runs (supervisor._release): when it
    held one only for another test's job, it ticks again (ticks are idempotent), for up to 120 s."""
    def once(spec: dict, cluster: FileCluster) -> dict:
        return supervisor.tick(spec, lambda sid: supervisor.RayHttp(
            ray_head.dashboard_url, sid), cluster, said.append)  # the production 15 s

    def tick(spec: dict, cluster: FileCluster) -> dict:
        deadline = time.monotonic() + 120
        while True:
            start = len(said)
            record = once(spec, cluster)
            held = [line.split("not releasing the GPUs yet: ", 1)[1] for line in said[start:]
                    if "not releasing the GPUs yet: " in line]
            others = held and not any(spec["submission_id"] in line for line in held)
            if not others or time.monotonic() > deadline:
                return record
            time.sleep(1)
    return tick


def record_of(ray_head, sid: str) -> dict | None:
    reply = requests.get(f"{ray_head.dashboard_url}/api/jobs/{sid}", timeout=10)
    return None if reply.status_code == 404 else reply.json()


def wait_status(ray_head, sid: str, statuses: set[str], timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = record_of(ray_head, sid)
        if info and info["status"] in statuses:
            return info
        time.sleep(0.2)
    raise AssertionError(f"{sid} never reached {statuses}: {record_of(ray_head, sid)}")


def submit(ray_head, spec: dict) -> None:
    """Attempt 0, as `pulumi up` submits it."""
    GrpoJobProvider(POLICY, say=lambda _: None).create(provider_props(spec))


def port_forwards(tmp_path: Path) -> int:
    """How many port-forwards the fake kubectl has opened so far."""
    log = tmp_path / "kubectl.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return sum("port-forward" in line for line in lines)


def required_resources(ray_head, sid: str) -> dict:
    """What the job's supervisor actor was scheduled with. Ray runs an entrypoint inside that
    actor, scheduled with the entrypoint resources (job_manager.py submit_job, :532-539), so
    they are the request; the State API keeps a dead actor's details."""
    actors = requests.get(f"{ray_head.dashboard_url}/api/v0/actors", timeout=10, params={
        "filter_keys": "name", "filter_predicates": "=", "detail": "true",
        "filter_values": f"_ray_internal_job_actor_{sid}"}).json()
    return actors["data"]["result"]["result"][0]["required_resources"]


def stop(ray_head, sid: str) -> None:
    requests.post(f"{ray_head.dashboard_url}/api/jobs/{sid}/stop", timeout=10)


def test_a_failed_run_is_resubmitted_as_its_next_attempt_and_resumes(ray_head, cluster, tmp_path):
    """FAILED after `pulumi up` returned: the next tick submits attempt 1 (`<run>-a1`), which
    resumes from the checkpoint attempt 0 saved; refresh shows the attempts and the last
    failure from Ray's record."""
    said: list[str] = []
    tick = ticker(ray_head, said)
    ckpt = tmp_path / "ckpt"
    spec = spec_for(ray_head, f"{TRAINER} --steps 4 --sleep 0.1 --checkpoint-dir {ckpt} "
                              f"--fail-once {tmp_path / 'failed'} --fail-at 2")
    sid = spec["submission_id"]
    submit(ray_head, spec)
    wait_status(ray_head, f"{sid}-a0", {"FAILED"})

    record = tick(spec, cluster)
    assert record["attempt"] == 1 and record["last_failure"].startswith("FAILED")
    done = wait_status(ray_head, f"{sid}-a1", {"SUCCEEDED"})
    assert done["metadata"]["verl-gke-attempt"] == "1"
    log = requests.get(f"{ray_head.dashboard_url}/api/jobs/{sid}-a1/logs", timeout=10).json()
    assert verl.RESUMED.format(folder=f"{ckpt}/global_step_2", step=2) in log["logs"]

    refreshed = GrpoJobProvider(POLICY, say=lambda _: None).read(sid, provider_props(spec))
    assert refreshed.outs["attempts"] == 2
    assert refreshed.outs["last_failure"] == record["last_failure"]
    assert refreshed.outs["status"] == "SUCCEEDED"


def test_the_retry_budget_is_shared_and_a_spent_one_leaves_the_run_failed(ray_head, cluster):
    """maxRetries bounds every attempt, by whoever submits it: with 1, one resubmission, then
    the supervisor gives up, says so, and releases the GPUs (review finding 6)."""
    said: list[str] = []
    tick = ticker(ray_head, said)
    spec = spec_for(ray_head, f"{TRAINER} --steps 1 --sleep 0 --fail", max_retries=1)
    sid = spec["submission_id"]
    submit(ray_head, spec)
    wait_status(ray_head, f"{sid}-a0", {"FAILED"})
    assert tick(spec, cluster)["attempt"] == 1
    wait_status(ray_head, f"{sid}-a1", {"FAILED"})
    record = tick(spec, cluster)
    assert record["attempt"] == 1 and "retry budget of 1 spent" in record["state"]
    assert record.get("released") and cluster.suspended(), said[-6:]
    assert record_of(ray_head, f"{sid}-a2") is None


def test_a_stalled_run_is_stopped_counted_as_failed_and_resubmitted(ray_head, cluster):
    """No new step for stall_s (here: no first step): the tick stops the attempt and records
    why; the next tick resubmits it, because that stop was the supervisor's own."""
    said: list[str] = []
    tick = ticker(ray_head, said)
    spec = spec_for(ray_head, f"{TRAINER} --steps 2 --sleep 60", stall_s=6, max_retries=1)
    sid = spec["submission_id"]
    submit(ray_head, spec)
    wait_status(ray_head, f"{sid}-a0", {"RUNNING"})
    assert tick(spec, cluster).get("stopped") is None  # within stall_s: left running
    time.sleep(6.5)
    record = tick(spec, cluster)
    assert record["stopped"]["reason"] == "no new step for 6 s before its first step"
    assert record_of(ray_head, f"{sid}-a0")["status"] == "STOPPED"

    record = tick(spec, cluster)
    assert record["attempt"] == 1
    assert record["last_failure"] == "no new step for 6 s before its first step"
    wait_status(ray_head, f"{sid}-a1", {"PENDING", "RUNNING"})
    stop(ray_head, f"{sid}-a1")


def test_a_run_stopped_by_someone_else_or_past_its_deadline_is_not_resubmitted(
    ray_head, cluster
):
    """A STOPPED record the supervisor did not stop (a person) is left alone, GPUs kept; a run
    past its wall-clock deadline is stopped for good, and its GPUs released."""
    said: list[str] = []
    tick = ticker(ray_head, said)
    spec = spec_for(ray_head, f"{TRAINER} --steps 100 --sleep 0.5")
    sid = spec["submission_id"]
    submit(ray_head, spec)
    wait_status(ray_head, f"{sid}-a0", {"RUNNING"})
    stop(ray_head, f"{sid}-a0")
    wait_status(ray_head, f"{sid}-a0", {"STOPPED"})
    record = tick(spec, cluster)
    assert record["attempt"] == 0 and "stopped by someone else" in record["state"]
    assert not cluster.suspended()

    late = spec_for(ray_head, f"{TRAINER} --steps 100 --sleep 0.5", deadline_s=1)
    submit(ray_head, late)
    wait_status(ray_head, late["submission_id"] + "-a0", {"RUNNING"})
    time.sleep(1.2)
    record = tick(late, cluster)
    assert "deadline of" in record["state"]
    assert record_of(ray_head, late["submission_id"] + "-a0")["status"] == "STOPPED"
    record = tick(late, cluster)
    assert record["attempt"] == 0 and record["released"]  # no retry after a deadline


def test_a_new_run_brings_released_gpus_back(ray_head, cluster):
    """After a release, creating the next run (another submission id) resumes the RayCluster
    before it submits."""
    cluster.save({"submission_id": "verl-gke-test-old", "released": True, "status": "SUCCEEDED"})
    cluster.suspend()
    spec = spec_for(ray_head, f"{TRAINER} --steps 1 --sleep 0")
    said: list[str] = []
    GrpoJobProvider(POLICY, say=said.append).create(provider_props(spec, wait_for="succeeded"))
    assert not cluster.suspended()
    assert any("bringing the GPU workers back" in line for line in said)


def test_provider_and_supervisor_acting_at_once_run_one_attempt_at_a_time(
    ray_head, cluster, tmp_path
):
    """`pulumi up` following a failing run (its own retries) while the supervisor ticks as fast
    as it can: never two attempts at once (each attempt holds a lock file the whole time it
    runs), one record per attempt id, and the shared budget: exactly maxRetries + 1 attempts."""
    said: list[str] = []
    tick = ticker(ray_head, said)
    lock, overlaps = tmp_path / "lock", tmp_path / "overlaps"
    # flock exits 75 when another attempt holds the lock (util-linux flock -E).
    command = (f"flock -n -E 75 {lock} {TRAINER} --steps 2 --sleep 0.3 --fail || "
               f"{{ [ $? -eq 75 ] && echo overlap >> {overlaps}; exit 1; }}")
    spec = spec_for(ray_head, command, max_retries=3)
    sid = spec["submission_id"]
    done = threading.Event()
    errors: list[Exception] = []

    def supervise() -> None:
        while not done.is_set():
            try:
                tick(spec, cluster)
            except Exception as error:  # noqa: BLE001 - reported by the assertion below
                errors.append(error)
            time.sleep(0.05)

    def supervise_once_submitted() -> None:
        # The CronJob gets a run's spec only once its create submitted attempt 0 (the
        # supervisor depends on the job); from then on it ticks while `up` still follows.
        deadline = time.monotonic() + 60
        while not protocol.attempts(list_jobs(ray_head.dashboard_url), sid):
            if done.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.05)
        supervise()

    thread = threading.Thread(target=supervise_once_submitted)
    provider = GrpoJobProvider(POLICY, say=said.append)
    thread.start()
    try:
        with pytest.raises(RayAccessError, match="ended FAILED [^;]*; retry budget of 3 spent"):
            provider.create(provider_props(spec, wait_for="succeeded", max_retries=3))
    finally:
        done.set()
        thread.join(timeout=60)
    assert errors == []
    assert not overlaps.exists(), overlaps.read_text()
    found = protocol.attempts(list_jobs(ray_head.dashboard_url), sid)
    assert sorted(found) == [0, 1, 2, 3]  # each attempt once, none beyond the budget
    assert all(info["metadata"]["verl-gke-attempt"] == str(n) for n, info in found.items())


def test_the_cluster_check_never_port_forwards_to_a_released_cluster(ray_head, cluster, tmp_path):
    """After a release, the ClusterCheck's delete (every `pulumi destroy`) needs no Ray and
    opens no port-forward (kubectl would wait for a head pod that never comes), and its create
    (a re-check for a new run) resumes the cluster before it port-forwards (review finding 1)."""
    from components.check.cluster_check import ClusterCheckProvider

    cluster.suspend()
    access = {**provider_props(spec_for(ray_head, "true"))["access"]}
    access.pop("state")
    props = {"submission_id": "verl-gke-test-cluster-check-0123456789ab", "entrypoint": "true",
             "runtime_env": {}, "metadata": {}, "timeout_s": 30, "access": access}
    check = ClusterCheckProvider(POLICY, say=lambda _: None)
    forwards = port_forwards(tmp_path)
    check.delete(props["submission_id"], props)
    assert port_forwards(tmp_path) == forwards and cluster.suspended()

    # A Service the fake kubectl does not know: the port-forward fails at once, after the gate.
    with pytest.raises(RayAccessError, match="not found"):
        check.create({**props, "access": {**access, "service": "gone-head-svc"}})
    assert not cluster.suspended() and port_forwards(tmp_path) == forwards + 1


def test_an_export_that_failed_for_good_releases_the_gpus_and_up_refresh_exports_it(
    ray_head, cluster, tmp_path
):
    """SUCCEEDED: a tick submits the export on its entrypoint resources. It fails for good
    (budget 0: no checkpoint to merge), and the next tick releases the GPUs with the reason
    (review finding 6: a given-up run used to keep them). Once the cause is fixed, `pulumi up
    --refresh` finds the run SUCCEEDED and not exported, resumes the cluster, exports (a
    released run could not be exported before), and the next tick releases the GPUs again.
    Refresh then reports the run from the supervisor's record (the head is gone with the pods),
    proposes nothing, and delete needs no Ray."""
    said: list[str] = []
    tick = ticker(ray_head, said)
    root, run_dir = tmp_path / "checkpoints", "grpo-16gpu-0123456789ab"
    merge = export_command(run_dir, merger=f"{sys.executable} {FAKES / 'model_merger.py'}",
                           root=str(root), workdir=str(tmp_path))
    # The local head has no GPU: a CPU share stands in for entrypoint_num_gpus to show that
    # the export is submitted with its resources (Ray records them in the job's details).
    resources = {"entrypoint_num_cpus": 0.5, "entrypoint_memory": 10_000_000}
    spec = spec_for(ray_head, f"{TRAINER} --steps 1 --sleep 0", max_retries=0,
                    export={"entrypoint": merge, "resources": resources})
    sid = spec["submission_id"]
    submit(ray_head, spec)
    wait_status(ray_head, f"{sid}-a0", {"SUCCEEDED"})
    assert not tick(spec, cluster).get("released")
    wait_status(ray_head, f"{sid}-export-a0", {"FAILED"})  # no checkpoint to merge
    assert required_resources(ray_head, f"{sid}-export-a0") == {"CPU": 0.5, "memory": 10_000_000}
    record = tick(spec, cluster)
    assert record["released"] and cluster.suspended() and cluster.suspends == 1
    assert record["released_reason"] == "export failed; retry budget of 0 spent"

    (root / run_dir / "global_step_1" / "actor").mkdir(parents=True)  # the cause, fixed
    (root / run_dir / "latest_checkpointed_iteration.txt").write_text("1")
    provider = GrpoJobProvider(POLICY, say=said.append)
    props = provider_props(spec, wait_for="first-step", status="SUCCEEDED")
    refreshed = provider.read(sid, props)
    assert refreshed.inputs["job_state"] == "SUCCEEDED, model not exported"
    assert provider.diff(sid, refreshed.outs, props).changes
    updated = provider.update(sid, refreshed.outs, props)
    assert updated.outs["export_status"] == "SUCCEEDED" and not cluster.suspended()
    assert required_resources(ray_head, f"{sid}-export-a1") == {"CPU": 0.5, "memory": 10_000_000}
    assert (root / run_dir / "huggingface" / "model.safetensors").read_text() == "global_step_1"

    record = tick(spec, cluster)
    assert record["released"] and cluster.suspended() and cluster.suspends == 2
    assert record["state"] == "SUCCEEDED at step 1, export SUCCEEDED, GPUs released"
    assert tick(spec, cluster)["released"] and cluster.suspends == 2  # nothing more to do

    refreshed = provider.read(sid, {**props, **updated.outs})
    assert refreshed.outs["state"] == record["state"]
    assert refreshed.outs["export_status"] == "SUCCEEDED" and refreshed.inputs["job_state"] == ""
    assert provider.diff(sid, refreshed.outs, props).changes is False
    # `pulumi destroy` deletes the supervisor (and its state) first, then the job: a suspended
    # RayCluster alone tells delete that nothing runs, and it asks no Ray (no port-forward).
    cluster.state_path.unlink()
    forwards = port_forwards(tmp_path)
    provider.delete(sid, refreshed.outs)
    assert port_forwards(tmp_path) == forwards
