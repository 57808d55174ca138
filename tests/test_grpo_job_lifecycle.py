"""A training run that survives: resubmission after failure, the retry budget, never two runs at
once, progress and bounded log reads, all against a real local Ray, with the engine's call
sequence (tests/engine.py) and a dashboard that drops connections (tests/tcp_proxy.py).

The stand-in trainer (tests/fakes/verl_trainer.py) checkpoints and resumes the way verl does,
so "resumes from its checkpoints" is checked in the job's own log.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest
import requests
from pulumi.output import Unknown

from components.facts import verl
from components.run import grpo_job
from components.supervisor import protocol
from components.run.grpo_job import GrpoJobProvider
from components.run.ray_access import RayAccessError, RequestPolicy
from components.runspec.run import export_command
from tests.engine import Engine
from tools.local_ray import list_jobs
from tests.tcp_proxy import tcp_proxy

FAKES = Path(__file__).parent / "fakes"
TRAINER = f"{sys.executable} {FAKES / 'verl_trainer.py'}"
POLICY = RequestPolicy(
    timeout_s=5, attempts=2, backoff_s=0.1, forward_timeout_s=10,
    poll_min_s=0.1, poll_max_s=0.5, stop_timeout_s=30, progress_every_s=0.5,
    # No node of the test head is ever lost: no wait for one's death to be recorded.
    settle_s=0.5,
)


@pytest.fixture
def said():
    """Progress lines the provider reports (what `pulumi up` shows)."""
    return []


@pytest.fixture
def provider(said):
    return GrpoJobProvider(POLICY, say=said.append)


def inputs(address: str, command: str, wait_for: str = "running", **overrides) -> dict:
    """The provider's inputs as the component registers them, with a fresh id and resource."""
    name = f"grpo-{uuid.uuid4().hex[:6]}"
    return {
        "submission_id": f"verl-gke-test-{name}-{uuid.uuid4().hex[:12]}",
        "entrypoint": command,
        "runtime_env": {"env_vars": {"HF_HOME": "/tmp/hf"}},
        "staged": None,
        "metadata": {"verl-gke-stack": "test", "verl-gke-resource": name},
        "wait_for": wait_for,
        "timeout_s": 60,
        "max_retries": 0,
        "access": {"address": address},
        "checkpoint_uri": "gs://bucket/checkpoints/grpo-16gpu-0123456789ab",
        "run_dir": "grpo-16gpu-0123456789ab",
        "export_entrypoint": None,
        "model_uri": None,
        "version": grpo_job.PROVIDER_VERSION,
        "job_state": "",
        **overrides,
    }


def jobs(ray_head) -> list[dict]:
    return list_jobs(ray_head.dashboard_url)


def live_for(ray_head, resource: str) -> list[dict]:
    return [
        job for job in jobs(ray_head)
        if job["status"] in ("PENDING", "RUNNING")
        and (job.get("metadata") or {}).get("verl-gke-resource") == resource
    ]


def job_log(ray_head, submission_id: str) -> str:
    url = f"{ray_head.dashboard_url}/api/jobs/{submission_id}/logs"
    return requests.get(url, timeout=10).json()["logs"]


def wait_status(ray_head, submission_id: str, statuses: set[str], timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = requests.get(f"{ray_head.dashboard_url}/api/jobs/{submission_id}", timeout=10)
        if reply.status_code == 200 and reply.json()["status"] in statuses:
            return reply.json()
        time.sleep(0.2)
    raise AssertionError(f"{submission_id} never reached {statuses}")


def stop_all(ray_head, resource: str) -> None:
    for job in live_for(ray_head, resource):
        requests.post(f"{ray_head.dashboard_url}/api/jobs/{job['submission_id']}/stop", timeout=10)


def trainer(tmp_path: Path, steps: int, sleep: float = 0.2, **flags: object) -> str:
    extra = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in flags.items())
    return f"{TRAINER} --steps {steps} --sleep {sleep} --checkpoint-dir {tmp_path / 'ckpt'} {extra}"


# --- 1. `up` returns when training has started ----------------------------------------------


def test_first_step_target_returns_once_verl_logged_a_step_with_its_metrics(
    ray_head, provider, said, tmp_path
):
    """waitFor first-step (the default): create returns only after the first training step's
    line, with its metrics and the time from the attempt's start to it, and says each phase as
    it goes. A validation before training logs a step line of its own (step 0, val-core/ keys
    only, components/facts/verl.py): it is not the first step."""
    news = inputs(ray_head.dashboard_url, trainer(tmp_path, 30, 3, val_before_train=""),
                  "first-step")
    created = provider.create(news)
    assert created.outs["status"] == "RUNNING"
    assert created.outs["metrics"]["step"] >= 1
    assert verl.TRAINING_STEP_KEY in created.outs["metrics"]
    assert 6 <= created.outs["first_step_s"] < 60  # the validation's line comes at 3 s
    assert created.outs["attempts"] == 1 and created.outs["last_failure"] is None
    phases = ["driver started after", *(f"{name} after" for name, _ in verl.PHASES),
              "first step after"]
    seen = [next(i for i, line in enumerate(said) if phase in line) for phase in phases]
    assert seen == sorted(seen), said
    stop_all(ray_head, news["metadata"]["verl-gke-resource"])


@pytest.mark.parametrize("wait_for", ["running", "first-step", "succeeded"])
def test_a_job_that_fails_at_once_is_never_reported_running(ray_head, said, wait_for):
    """A job that exits at once fails create with the log tail and what to do, for every target
    that means running. For `running` that holds when Ray sees the exit within
    confirm_running_s (0.1 s by default, one of Ray's process polls); this test gives the
    shared, loaded test head 3 s, so that it checks the mechanism and not the machine's load."""
    provider = GrpoJobProvider(dataclasses.replace(POLICY, confirm_running_s=3.0), said.append)
    news = inputs(ray_head.dashboard_url, "echo 'import error (simulated)'; exit 3", wait_for)
    with pytest.raises(RayAccessError, match="ended FAILED") as failure:
        provider.create(news)
    assert "import error (simulated)" in str(failure.value)
    assert "pulumi up --refresh" in str(failure.value)


def test_a_job_that_ends_before_its_first_step_fails_up(ray_head, provider, tmp_path):
    """Past RUNNING and the first phases, but no step: first-step fails, with the log tail."""
    news = inputs(ray_head.dashboard_url, f"{TRAINER} --steps 0 --sleep 0 --fail", "first-step")
    with pytest.raises(RayAccessError, match="before reaching first-step") as failure:
        provider.create(news)
    assert "out of memory (simulated)" in str(failure.value)


# --- 2. Resume after failure --------------------------------------------------------------


def test_refresh_then_up_resubmits_a_failed_job_which_resumes_from_its_checkpoints(
    ray_head, provider, said, tmp_path
):
    """A job that FAILS after `pulumi up` returned: `pulumi up --refresh` (read, then check,
    diff, update) says why in the preview, submits the run's next attempt (`<run>-a1`), and the
    trainer resumes from the last checkpoint it saved. With waitFor first-step, the update
    returns on the new attempt's own first step (step 4), never on the step 3 the failed
    attempt logged (review finding 5: attempts used to share one driver log)."""
    engine = Engine(provider)
    news = inputs(ray_head.dashboard_url,
                  trainer(tmp_path, 6, 0.5, fail_once=tmp_path / "failed", fail_at=3),
                  "first-step")
    assert engine.up(news) == "create"
    sid = engine.state.id
    wait_status(ray_head, f"{sid}-a0", {"FAILED"})

    engine.refresh()
    assert engine.state.outputs["status"] == "FAILED"
    diff, checked = engine.preview(news)
    assert diff.changes and diff.replaces == []
    # What `pulumi preview` shows for the resource: the input the refresh recorded, and why.
    assert engine.state.inputs["job_state"] == "FAILED at step 3"
    assert checked["job_state"] == "FAILED at step 3; resubmitting"

    before = len(engine.calls)
    assert engine.up(news) == "update"
    assert engine.calls[before:] == ["check", "diff", "update"]
    assert engine.state.outputs["metrics"]["step"] >= 4
    assert engine.state.outputs["dashboard_path"].endswith(f"{sid}-a1")
    done = wait_status(ray_head, f"{sid}-a1", {"SUCCEEDED"})
    assert done["metadata"]["verl-gke-attempt"] == "1"
    resumed = verl.RESUMED.format(folder=f"{tmp_path / 'ckpt'}/global_step_3", step=3)
    assert resumed in job_log(ray_head, f"{sid}-a1")
    assert resumed not in job_log(ray_head, f"{sid}-a0")  # each attempt has its own log
    assert sorted(protocol.attempts(jobs(ray_head), sid)) == [0, 1]
    assert any("FAILED at step 3; resubmitting" in line for line in said)

    # The next up, with nothing changed, proposes nothing: the finding was consumed.
    engine.refresh()
    diff, _ = engine.preview(news)
    assert diff.changes is False


def test_a_succeeded_job_is_never_resubmitted(ray_head, provider, tmp_path):
    """refresh of a SUCCEEDED job records nothing to do; an update (metadata) keeps it."""
    engine = Engine(provider)
    news = inputs(ray_head.dashboard_url, trainer(tmp_path, 2, 0.1), "succeeded")
    engine.up(news)
    first_start = engine.state.outputs["start_time"]
    engine.refresh()
    assert engine.preview(news)[0].changes is False
    assert engine.up({**news, "metadata": {**news["metadata"], "owner": "me"}}) == "update"
    assert engine.state.outputs["status"] == "SUCCEEDED"
    assert engine.state.outputs["start_time"] == first_start


def test_max_retries_resubmits_a_failing_job_while_up_follows_it(ray_head, provider, said, tmp_path):
    """waitFor=succeeded with maxRetries=1: a job that fails once is resubmitted by create
    itself, resumes from its checkpoint, and create reports SUCCEEDED."""
    news = inputs(ray_head.dashboard_url,
                  trainer(tmp_path, 4, 0.1, fail_once=tmp_path / "failed", fail_at=2),
                  "succeeded", max_retries=1)
    created = provider.create(news)
    assert created.outs["status"] == "SUCCEEDED"
    assert "global_step_2" in job_log(ray_head, f"{created.id}-a1")
    assert any("retry 1 of 1" in line for line in said)


def test_a_spent_retry_budget_fails_with_the_last_log_lines(ray_head, provider, tmp_path):
    """When every retry failed too, create fails naming the budget and showing the log tail."""
    news = inputs(ray_head.dashboard_url, f"{TRAINER} --steps 1 --sleep 0.05 --fail",
                  "succeeded", max_retries=1)
    spent = r"ended FAILED [^;]*; retry budget of 1 spent"
    with pytest.raises(RayAccessError, match=spent) as failure:
        provider.create(news)
    assert "out of memory (simulated)" in str(failure.value)
    assert "pulumi up --refresh" in str(failure.value)


# --- Never two runs at once ----------------------------------------------------------------


def test_a_replace_whose_delete_cannot_reach_ray_never_creates_the_new_job(
    ray_head, provider, tmp_path
):
    """Replace = delete then create. With the dashboard dropping every connection, delete
    fails, the engine stops, and the old job is the only one running; once Ray answers again
    the same `pulumi up` stops the old job before the new one starts."""
    with tcp_proxy(ray_head.dashboard_port) as proxy:
        engine = Engine(provider)
        old = inputs(proxy.url, trainer(tmp_path, 200, 0.2))
        resource = old["metadata"]["verl-gke-resource"]
        engine.up(old)
        new = {**old, "submission_id": old["submission_id"] + "-b",
               "entrypoint": f"{TRAINER} --steps 200 --sleep 0.2"}

        proxy.set_mode("drop")
        with pytest.raises(RayAccessError, match="may still be running; the stack is unchanged"):
            engine.up(new)
        assert engine.calls[-1] == "delete" and engine.state.id == old["submission_id"]
        assert [j["submission_id"] for j in live_for(ray_head, resource)] == [
            old["submission_id"] + "-a0"]

        proxy.set_mode("flaky")  # every other connection dropped: retries get through
        assert engine.up(new) == "replace"
        live = live_for(ray_head, resource)
        assert [j["submission_id"] for j in live] == [new["submission_id"] + "-a0"]
        stop_all(ray_head, resource)


def test_create_stops_a_live_job_of_the_same_stack_and_resource_first(
    ray_head, provider, said, tmp_path
):
    """A job of this resource that the stack lost track of is stopped, and confirmed stopped,
    before the new one is submitted; jobs of other resources are left alone."""
    stray = inputs(ray_head.dashboard_url, trainer(tmp_path, 200, 0.2))
    resource = stray["metadata"]["verl-gke-resource"]
    GrpoJobProvider(POLICY, say=lambda _: None).create(stray)
    neighbour = inputs(ray_head.dashboard_url, f"{TRAINER} --steps 200 --sleep 0.2")
    GrpoJobProvider(POLICY, say=lambda _: None).create(neighbour)

    fresh = {**stray, "submission_id": stray["submission_id"] + "-new"}
    created = provider.create(fresh)
    assert created.outs["status"] == "RUNNING"
    assert requests.get(f"{ray_head.dashboard_url}/api/jobs/{stray['submission_id']}-a0",
                        timeout=10).json()["status"] == "STOPPED"
    assert [j["submission_id"] for j in live_for(ray_head, resource)] == [
        fresh["submission_id"] + "-a0"]
    assert any(f"{stray['submission_id']}-a0 has stopped" in line for line in said)
    assert live_for(ray_head, neighbour["metadata"]["verl-gke-resource"])
    stop_all(ray_head, resource)
    stop_all(ray_head, neighbour["metadata"]["verl-gke-resource"])


# --- 5. Progress and bounded reads ----------------------------------------------------------


def test_progress_reports_status_changes_and_metrics_at_a_bounded_rate(
    ray_head, provider, said, tmp_path
):
    """While create waits, status changes are reported at once and otherwise at most one line
    per progress_every_s, with the latest metrics; a secret printed by the job never appears."""
    secret = "hf_" + uuid.uuid4().hex
    news = inputs(ray_head.dashboard_url,
                  f"{trainer(tmp_path, 8, 0.4)} --print HF_TOKEN={secret}", "succeeded")
    started = time.monotonic()
    provider.create(news)
    elapsed = time.monotonic() - started
    assert any("driver started after" in line for line in said)
    assert any("SUCCEEDED after" in line for line in said)
    periodic = [line for line in said if "waited" in line]
    assert periodic and any("critic/score/mean=" in line for line in periodic)
    assert len(periodic) <= elapsed / POLICY.progress_every_s + 1
    assert all(secret not in line for line in said)


def test_refresh_reads_only_the_logs_tail_even_of_a_100_mb_log(ray_head, provider, tmp_path):
    """Refresh of a job with a 100 MB log transfers about what it does for a tiny log, and its
    memory stays flat; the metrics come from the last step line."""
    small = provider.create(inputs(ray_head.dashboard_url, f"{TRAINER} --steps 2 --sleep 0",
                                   "succeeded"))
    big = provider.create(inputs(ray_head.dashboard_url,
                                 f"{TRAINER} --steps 2 --sleep 0 --log-mb 101", "succeeded"))
    log_file = next(ray_head.temp_dir.glob(f"session_*/logs/job-driver-{big.id}-a0.log"))
    assert log_file.stat().st_size >= 100 * 1024 * 1024

    measured = {}
    with tcp_proxy(ray_head.dashboard_port) as proxy:
        for name, created in (("small", small), ("big", big)):
            outs = {**created.outs, "access": {"address": proxy.url}}
            before = proxy.received
            tracemalloc.start()
            started = time.perf_counter()
            read = provider.read(created.id, outs)
            seconds = time.perf_counter() - started
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            measured[name] = (proxy.received - before, peak, seconds)
            assert read.outs["metrics"]["step"] == 2.0
    (small_bytes, small_peak, _), (big_bytes, big_peak, _) = measured["small"], measured["big"]
    print(f"refresh: {measured}")
    assert big_bytes < 256 * 1024 and big_bytes < small_bytes + 64 * 1024
    assert big_peak < 8 * 1024 * 1024 and big_peak < small_peak + 2 * 1024 * 1024


# --- 3. Staging and a live run ---------------------------------------------------------------


def test_a_restaging_is_a_replacement_the_engine_performs_first(provider):
    """When the staging Job is replaced (delete before replace), the engine asks the job's
    provider to diff with the inputs that depend on it unknown (calculateDependentReplacements);
    the answer must be a delete-before-replace, so the run is stopped before staging runs.
    The unknown is what the provider process hands diff: a pulumi.output.Unknown object
    (tests/provider_process.py drives the same through the real process)."""
    olds = inputs("http://127.0.0.1:1", "true", staged="staging-0123456789")
    unknown = {**olds, "staged": Unknown()}
    diff = provider.diff(olds["submission_id"], olds, unknown)
    assert diff.replaces == ["staged"] and diff.delete_before_replace
    restaged = {**olds, "staged": "staging-abcdef0123"}
    assert provider.diff(olds["submission_id"], olds, restaged).replaces == ["staged"]


def test_restaging_stops_the_run_and_resubmits_it_after_staging_resuming(
    ray_head, provider, tmp_path
):
    """The engine's order for a re-staging: delete the job (it stops), replace the staging Job
    (no live run while it writes), create the job again: same run, its next attempt, and the
    trainer resumes from its checkpoint."""
    engine = Engine(provider)
    news = inputs(ray_head.dashboard_url, trainer(tmp_path, 200, 0.2, save_freq=1),
                  staged="staging-0123456789")
    resource = news["metadata"]["verl-gke-resource"]
    engine.up(news)
    latest = tmp_path / "ckpt" / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + 60  # a checkpoint or two: RUNNING is before the trainer's start
    while not (latest.exists() and latest.read_text().strip()):
        assert time.monotonic() < deadline, "the run saved no checkpoint"
        time.sleep(0.1)

    # Dependent replacement: diff with `staged` unknown, then delete before anything else.
    unknown = {**news, "staged": Unknown()}
    diff = provider.diff(engine.state.id, engine.state.outputs, unknown)
    assert diff.replaces == ["staged"]
    provider.delete(engine.state.id, engine.state.outputs)
    assert live_for(ray_head, resource) == []  # nothing runs while staging rewrites /data
    saved = int(latest.read_text())
    assert saved >= 1

    engine.state = None  # the engine recorded the delete
    assert engine.up({**news, "staged": "staging-abcdef0123"}) == "create"
    assert engine.state.id == news["submission_id"]
    again = news["submission_id"] + "-a1"
    wait_status(ray_head, again, {"RUNNING"})
    deadline = time.monotonic() + 120
    while "Resuming from" not in job_log(ray_head, again):
        assert time.monotonic() < deadline, "the resubmitted run did not resume"
        time.sleep(0.2)
    resumed = verl.RESUMED.format(folder=f"{tmp_path / 'ckpt'}/global_step_{saved}", step=saved)
    assert resumed in job_log(ray_head, again)
    stop_all(ray_head, resource)


# --- 7. A model you can serve ---------------------------------------------------------------


def _with_export(tmp_path: Path, news: dict) -> dict:
    """Inputs whose export runs the real export command with the fake merger, on tmp_path."""
    command = export_command(
        "run", merger=f"{sys.executable} {FAKES / 'model_merger.py'}",
        root=str(tmp_path), workdir=str(tmp_path),
    )
    return {**news, "export_entrypoint": command, "model_uri": "gs://bucket/checkpoints/run/huggingface"}


def test_a_succeeded_run_is_exported_to_a_hugging_face_model(ray_head, provider, said, tmp_path):
    """waitFor=succeeded: once the run SUCCEEDS, create runs the merger on its last checkpoint
    and the model lands, whole, in <run>/huggingface; the export is reported as an output."""
    news = _with_export(tmp_path, inputs(
        ray_head.dashboard_url, f"{TRAINER} --steps 3 --sleep 0.05 --checkpoint-dir {tmp_path / 'run'}",
        "succeeded"))
    created = provider.create(news)
    assert created.outs["status"] == "SUCCEEDED" and created.outs["export_status"] == "SUCCEEDED"
    model = tmp_path / "run" / "huggingface"
    assert json.loads((model / "config.json").read_text())["merged_from"] == "global_step_3"
    assert not (tmp_path / "run" / "huggingface.partial").exists()
    assert any("model exported to gs://bucket/checkpoints/run/huggingface" in l for l in said)


def test_a_run_that_succeeds_after_up_is_exported_by_up_refresh(ray_head, provider, tmp_path):
    """waitFor=running: refresh finds the run SUCCEEDED and not exported, the preview says so,
    and the update exports without resubmitting the run."""
    engine = Engine(provider)
    news = _with_export(tmp_path, inputs(
        ray_head.dashboard_url, f"{TRAINER} --steps 3 --sleep 0.3 --checkpoint-dir {tmp_path / 'run'}"))
    engine.up(news)
    assert engine.state.outputs["export_status"] is None
    wait_status(ray_head, news["submission_id"] + "-a0", {"SUCCEEDED"})
    started = engine.state.outputs["start_time"]

    engine.refresh()
    diff, checked = engine.preview(news)
    assert diff.changes and not diff.replaces
    assert checked["job_state"] == "SUCCEEDED, model not exported; exporting"
    assert engine.up(news) == "update"
    assert engine.state.outputs["export_status"] == "SUCCEEDED"
    assert engine.state.outputs["start_time"] == started  # the run itself was not resubmitted
    assert (tmp_path / "run" / "huggingface" / "model.safetensors").read_text() == "global_step_3"
    engine.refresh()
    assert engine.preview(news)[0].changes is False


def test_the_preview_never_announces_an_export_the_config_no_longer_wants(provider):
    """A refresh found the model not exported, then exportModel was turned off: check does
    not promise an export (update would not run one)."""
    olds = {"job_state": "SUCCEEDED, model not exported"}
    news = inputs("http://127.0.0.1:1", "true")  # export_entrypoint None: exportModel false
    assert provider.check(olds, news).inputs["job_state"] == ""
    wanted = {**news, "export_entrypoint": "merge"}
    assert provider.check(olds, wanted).inputs["job_state"] == (
        "SUCCEEDED, model not exported; exporting"
    )


def test_a_failed_export_says_the_checkpoints_are_intact(ray_head, provider, tmp_path):
    """A merger that fails (no checkpoint to merge) fails up with its log and the way on."""
    news = _with_export(tmp_path, inputs(ray_head.dashboard_url, f"{TRAINER} --steps 1 --sleep 0",
                                         "succeeded"))
    with pytest.raises(RayAccessError, match="exporting its model ended FAILED") as failure:
        provider.create(news)
    assert "pulumi up --refresh" in str(failure.value)
    assert "verl-gke:job.exportModel" in str(failure.value)


def test_outputs_never_carry_an_earlier_attempts_metrics():
    """The outputs of attempt 1 hold no metric attempt 0 logged: before attempt 1's first step
    they are empty, not attempt 0's (review finding 5); the last metrics are kept only for the
    attempt they came from, when its log cannot be read."""
    from components.run import job_provider

    class Attempt:
        submission_id, policy = "verl-gke-test-grpo-0123456789ab-a1", POLICY

        def log_tail(self, lines: int, info: dict | None = None) -> str:
            return ""  # attempt 1 has logged no step yet

    info = {"status": "RUNNING", "metadata": {"verl-gke-attempt": "1"}}
    earlier = {"metrics": {"step": 35.0}, "first_step_s": 12.0,
               "dashboard_path": "/#/jobs/verl-gke-test-grpo-0123456789ab-a0"}
    assert job_provider._observed(Attempt(), info, earlier)["metrics"] is None
    same = {**earlier, "dashboard_path": "/#/jobs/verl-gke-test-grpo-0123456789ab-a1"}
    assert job_provider._observed(Attempt(), info, same)["metrics"] == {"step": 35.0}


def test_following_an_attempt_lost_with_the_head_fails_up_with_what_to_do(monkeypatch):
    """An attempt whose record is gone (the head restarted, its job table with it) fails the
    wait after a short margin, saying so and what to run, instead of polling for ever."""
    from components.run import following

    class Lost:
        submission_id = "verl-gke-test-grpo-0123456789ab-a0"

        def info(self):
            return None

        def where(self) -> str:
            return f"Ray job {self.submission_id}"

    monkeypatch.setattr(following, "MISSING_S", 0.05)
    with pytest.raises(RayAccessError, match="no longer exists in Ray.*pulumi refresh"):
        following.poll(Lost(), frozenset({"SUCCEEDED"}), time.monotonic() + 5, POLICY)
