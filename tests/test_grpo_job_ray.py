"""The GrpoJob provider against a real Ray head started for this module (no mocks of Ray).

Each test calls the provider the way the engine does (create, diff, update, read, delete with
plain-data props) and checks the result through Ray's own Jobs API. The stand-in trainer
(tests/fakes/verl_trainer.py) prints verl-style metric lines for a second or two.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dill
import pytest
import requests
from pulumi.dynamic.dynamic import serialize_provider

from components.run import grpo_job
from components.supervisor import protocol
from components.run.grpo_job import GrpoJobProvider
from components.run.ray_access import RayAccessError, RayUnreachable, RequestPolicy
from tools.local_ray import free_port, list_jobs

FAKES = Path(__file__).parent / "fakes"
TRAINER = f"{sys.executable} {FAKES / 'verl_trainer.py'}"
# Short timeouts so the failure scenarios finish in seconds; polling fast enough that waiting
# does not dominate the module's run time.
POLICY = RequestPolicy(
    timeout_s=5, attempts=2, backoff_s=0.1, forward_timeout_s=10,
    poll_min_s=0.1, poll_max_s=0.5, stop_timeout_s=30,
    # No node of the test head is ever lost: no wait for one's death to be recorded.
    settle_s=0.5,
)


@pytest.fixture
def provider():
    return GrpoJobProvider(POLICY)


@pytest.fixture
def warnings(monkeypatch):
    """Messages the provider sends to `pulumi.log.warn`."""
    seen: list[str] = []
    monkeypatch.setattr(grpo_job.pulumi.log, "warn", seen.append)
    return seen


def props(address: str, command: str, wait_for: str = "running", **overrides) -> dict:
    """Provider inputs as the component registers them, with a fresh submission id."""
    return {
        "submission_id": f"test-{uuid.uuid4().hex[:12]}",
        "entrypoint": command,
        "runtime_env": {"env_vars": {"HF_HOME": "/tmp/hf"}},
        "staged": None,
        "metadata": {"verl-gke-stack": "test"},
        "wait_for": wait_for,
        "timeout_s": 60,
        "max_retries": 0,
        "access": {"address": address},
        "checkpoint_uri": "gs://bucket/checkpoints/grpo-16gpu-0123456789ab",
        "run_dir": "grpo-16gpu-0123456789ab",
        "version": grpo_job.PROVIDER_VERSION,
        "job_state": "",
        **overrides,
    }


def ray_job(ray_head, run_id: str) -> dict | None:
    """The newest attempt of the run (`<run id>-a<N>`, protocol.py) in Ray, None if none."""
    found = attempts_of(ray_head, run_id)
    return found[max(found)] if found else None


def attempts_of(ray_head, run_id: str) -> dict[int, dict]:
    return protocol.attempts(list_jobs(ray_head.dashboard_url), run_id)


def wait_terminal(ray_head, submission_id: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = ray_job(ray_head, submission_id)
        if job and job["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"{submission_id} did not finish in {timeout_s}s")


def test_create_reports_running_and_refresh_reports_success_with_metrics(ray_head, provider):
    """create returns once RUNNING; read after the end reports SUCCEEDED, times and metrics."""
    inputs = props(ray_head.dashboard_url, f"{TRAINER} --steps 3 --sleep 0.5")
    created = provider.create(inputs)
    assert created.id == inputs["submission_id"]
    assert created.outs["status"] == "RUNNING"
    assert created.outs["dashboard_path"] == f"/#/jobs/{inputs['submission_id']}-a0"
    assert created.outs["start_time"] and created.outs["end_time"] is None
    wait_terminal(ray_head, created.id)

    refreshed = provider.read(created.id, created.outs)
    assert refreshed.id == created.id
    assert refreshed.outs["status"] == "SUCCEEDED"
    assert refreshed.outs["end_time"] >= refreshed.outs["start_time"]
    assert refreshed.outs["metrics"] == {
        "step": 3.0, "critic/score/mean": 0.3, "actor/lr": 1e-05, "response_length/mean": 103.0,
        "timing_s/step": 11.5,
    }
    assert refreshed.outs["entrypoint"] == inputs["entrypoint"]


@pytest.fixture(scope="module")
def succeeded(shared_ray_head):
    """One job created with waitFor=succeeded, for the tests that need a finished job: its
    inputs and what create returned. (A job costs ~1.4 CPU-s of Ray's supervisor process.)"""
    inputs = props(shared_ray_head.dashboard_url, f"{TRAINER} --steps 2 --sleep 0.2", "succeeded")
    return inputs, GrpoJobProvider(POLICY).create(inputs)


def test_wait_for_succeeded_returns_the_final_state(succeeded):
    """waitFor=succeeded holds create until the job has finished successfully."""
    _, created = succeeded
    assert created.outs["status"] == "SUCCEEDED"
    assert created.outs["metrics"]["step"] == 2.0


def test_repeated_create_adopts_the_job_instead_of_submitting_another(ray_head, provider):
    """A retried `pulumi up` (create again with the same inputs) leaves exactly one job."""
    inputs = props(ray_head.dashboard_url, f"{TRAINER} --steps 4 --sleep 0.5")
    first = provider.create(inputs)
    second = provider.create(inputs)
    assert second.id == first.id
    assert sorted(attempts_of(ray_head, first.id)) == [0]
    assert second.outs["start_time"] == first.outs["start_time"]


def test_config_change_replaces_the_job_and_stops_the_old_one_first(ray_head, provider):
    """A new entrypoint means replace (delete before create): the old job is stopped before
    the new one is created (its record stays, as every attempt's does: protocol.py)."""
    old = provider.create(props(ray_head.dashboard_url, f"{TRAINER} --steps 50 --sleep 0.5"))
    news = props(ray_head.dashboard_url, f"{TRAINER} --steps 2 --sleep 0.2")
    diff = provider.diff(old.id, old.outs, news)
    assert diff.changes and diff.delete_before_replace
    assert set(diff.replaces) == {"submission_id", "entrypoint"}

    provider.delete(old.id, old.outs)  # the engine's order for delete_before_replace
    assert ray_job(ray_head, old.id)["status"] == "STOPPED"
    new = provider.create(news)
    assert new.outs["status"] in ("RUNNING", "SUCCEEDED")


def test_metadata_or_waiting_change_updates_without_replacing(ray_head, provider):
    """Metadata and waitFor changes are updates: no replace, same Ray job, new state recorded."""
    old = provider.create(props(ray_head.dashboard_url, f"{TRAINER} --steps 2 --sleep 0.2"))
    news = {
        **{key: old.outs[key] for key in props("", "")},
        "metadata": {"owner": "someone-else"},
        "wait_for": "succeeded",
    }
    diff = provider.diff(old.id, old.outs, news)
    assert diff.changes and diff.replaces == []
    updated = provider.update(old.id, old.outs, news)
    assert updated.outs["status"] == "SUCCEEDED"
    assert updated.outs["metadata"] == {"owner": "someone-else"}
    assert sorted(attempts_of(ray_head, old.id)) == [0]


def test_unchanged_inputs_have_no_diff(succeeded, provider):
    """Re-running `pulumi up` with the same config proposes nothing (outputs are not inputs)."""
    inputs, created = succeeded
    assert provider.diff(created.id, created.outs, inputs).changes is False


def test_delete_stops_a_running_job_and_a_new_create_runs_it_again(ray_head, provider):
    """delete of a RUNNING job returns once it is stopped; `pulumi up` after a destroy submits
    the run's next attempt (the user decided), and it runs."""
    inputs = props(ray_head.dashboard_url, f"{TRAINER} --steps 100 --sleep 0.5")
    created = provider.create(inputs)
    provider.delete(created.id, created.outs)
    assert ray_job(ray_head, created.id)["status"] == "STOPPED"

    again = provider.create(inputs)
    assert again.outs["status"] == "RUNNING"
    assert again.outs["start_time"] > created.outs["start_time"]
    assert sorted(attempts_of(ray_head, created.id)) == [0, 1]
    provider.delete(again.id, again.outs)


def test_delete_of_a_finished_or_unknown_job_is_not_an_error(ray_head, succeeded, provider, warnings):
    """A SUCCEEDED job is left as it is, quietly; an id Ray never heard of is a no-op."""
    _, finished = succeeded
    provider.delete(finished.id, finished.outs)
    assert ray_job(ray_head, finished.id)["status"] == "SUCCEEDED"
    unknown = props(ray_head.dashboard_url, "true")
    provider.delete(unknown["submission_id"], unknown)
    assert warnings == []


def test_refresh_of_a_job_gone_from_ray_drops_it(ray_head, provider):
    """read returns an empty id when Ray no longer knows the job (the engine then drops it)."""
    inputs = props(ray_head.dashboard_url, "true")
    assert provider.read(inputs["submission_id"], inputs).id == ""


def test_failing_entrypoint_fails_create_with_the_log_and_a_retry_resubmits(
    ray_head, provider, tmp_path
):
    """A job that FAILS before `waitFor` fails create with Ray's message and the log tail; the
    next create with the same inputs submits the run's next attempt."""
    marker = tmp_path / "failed-once"
    inputs = props(
        ray_head.dashboard_url, f"{TRAINER} --steps 1 --sleep 0.1 --fail-once {marker}",
        "succeeded",
    )
    with pytest.raises(RayAccessError, match="ended FAILED") as failure:
        provider.create(inputs)
    message = str(failure.value)
    assert inputs["submission_id"] in message and ray_head.dashboard_url in message
    assert "out of memory (simulated)" in message
    assert "pulumi up" in message

    retried = provider.create(inputs)
    assert retried.outs["status"] == "SUCCEEDED"
    assert sorted(attempts_of(ray_head, inputs["submission_id"])) == [0, 1]


def test_unreachable_address_fails_with_job_address_and_fix(provider):
    """Nothing listening: create fails after the retries, naming the job, address and the fix."""
    address = f"http://127.0.0.1:{free_port()}"
    inputs = props(address, "true")
    with pytest.raises(RayUnreachable) as failure:
        provider.create(inputs)
    message = str(failure.value)
    assert inputs["submission_id"] in message and address in message
    assert "verl-gke:job.dashboardAddress" in message and "2 attempts" in message


def test_delete_that_cannot_reach_ray_fails_and_says_the_job_may_still_run(provider, warnings):
    """No answer from the dashboard is not proof that the job is gone: delete fails (so a
    replacement is never created next to it), naming the job and both ways forward."""
    inputs = props(f"http://127.0.0.1:{free_port()}", "true")
    with pytest.raises(RayAccessError) as failure:
        provider.delete(inputs["submission_id"], inputs)
    message = str(failure.value)
    assert inputs["submission_id"] in message and "may still be running" in message
    assert "pulumi state delete" in message
    assert warnings == []


def test_a_listener_that_never_answers_times_out(provider):
    """A port that accepts connections and never replies fails within the request timeouts."""
    policy = RequestPolicy(timeout_s=1, attempts=2, backoff_s=0.1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        inputs = props(f"http://127.0.0.1:{silent.getsockname()[1]}", "true")
        started = time.monotonic()
        with pytest.raises(RayUnreachable, match="Timeout"):
            GrpoJobProvider(policy).create(inputs)
        # Two 1 s attempts and a 0.1 s backoff; the slack is for a loaded CI machine, the
        # point is that it returns at all.
        assert time.monotonic() - started < 15


# What the engine's dynamic-provider process does with the serialized provider: a fresh
# interpreter in the project directory that has never imported the program's modules.
_REVIVE = """
import base64, json, sys
import dill
provider = dill.loads(base64.b64decode(sys.argv[1]))
print(json.dumps(provider.create(json.loads(sys.argv[2])).outs["status"]))
"""


def test_provider_survives_the_engines_pickling(ray_head):
    """The provider as the engine ships it (dill + base64), revived in a fresh process, still
    creates a job against Ray."""
    shipped = serialize_provider(GrpoJobProvider(POLICY))
    assert dill.loads(base64.b64decode(shipped)).policy == POLICY
    inputs = props(ray_head.dashboard_url, f"{TRAINER} --steps 1 --sleep 0.1")
    done = subprocess.run(
        [sys.executable, "-c", _REVIVE, shipped, json.dumps(inputs)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) in ("RUNNING", "SUCCEEDED")


@pytest.fixture
def fake_kubectl(ray_head, monkeypatch, tmp_path):
    """`kubectl` on PATH is tests/fakes/kubectl, relaying to the local Ray dashboard."""
    log = tmp_path / "kubectl.jsonl"
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{ray_head.dashboard_port}")
    monkeypatch.setenv("FAKE_KUBECTL_SERVICE", "verl-ray-head-svc")
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(log))
    return log


KUBECONFIG = (
    "apiVersion: v1\nkind: Config\n"
    "users: [{name: gke, user: {exec: {command: gke-gcloud-auth-plugin}}}]\n"
)


def port_forward_props(command: str, service: str = "verl-ray-head-svc", **overrides) -> dict:
    access = {"kubeconfig": KUBECONFIG, "namespace": "verl", "service": service, "port": 8265}
    return props("", command, access=access, **overrides)


def test_port_forward_path_end_to_end(ray_head, provider, fake_kubectl):
    """Without an address, each call port-forwards with a private, deleted kubeconfig file."""
    created = provider.create(
        port_forward_props(f"{TRAINER} --steps 2 --sleep 0.2", wait_for="succeeded")
    )
    assert created.outs["status"] == "SUCCEEDED"
    assert ray_job(ray_head, created.id)["status"] == "SUCCEEDED"  # really went through
    # Refresh hands inputs back to the engine as plain values: never the kubeconfig.
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["status"] == "SUCCEEDED"
    assert "access" not in refreshed.inputs and KUBECONFIG not in json.dumps(refreshed.inputs)

    calls = [json.loads(line) for line in fake_kubectl.read_text().splitlines()]
    assert calls, "the fake kubectl was never run"
    for call in calls:
        assert call["argv"][call["argv"].index("-n") + 1] == "verl"
        assert call["argv"][-2:] == ["svc/verl-ray-head-svc", ":8265"]
        assert call["mode"] == "0o600"
        assert not Path(call["kubeconfig"]).exists(), "kubeconfig left on disk"
    assert not _kubectls_logging_to(fake_kubectl), "kubectl left running"


def test_port_forward_to_a_missing_service_fails_or_warns_with_kubectls_reason(
    provider, fake_kubectl, warnings
):
    """create fails with kubectl's own error and the fix; delete only warns: the API server
    says the head Service is gone (NotFound), so no job of that Ray cluster can still run."""
    inputs = port_forward_props("true", service="gone-head-svc")
    with pytest.raises(RayUnreachable, match='services "gone-head-svc" not found') as failure:
        provider.create(inputs)
    assert "kubectl -n verl get svc/gone-head-svc" in str(failure.value)
    assert KUBECONFIG not in str(failure.value)
    provider.delete(inputs["submission_id"], inputs)
    assert len(warnings) == 1 and "gone-head-svc" in warnings[0]


def _kubectls_logging_to(log: Path) -> list[int]:
    """The fake kubectl processes this test started: their environment names its log file.
    (Other xdist workers' tests run the same fake kubectl at the same time.)"""
    found = []
    mark = f"FAKE_KUBECTL_LOG={log}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and str(FAKES / "kubectl") in (entry / "cmdline").read_bytes().decode()
                    and mark in (entry / "environ").read_bytes().split(b"\0")):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
