"""GrpoJob under the mock runtime: what it registers, and that the kubeconfig stays secret."""

from __future__ import annotations

import json

import pulumi
import pytest
from pulumi.runtime import rpc

from components.run import export, job_provider
from components.runspec import run as grpo_run
from components.run.grpo_job import PROVIDER_VERSION, GrpoJob, GrpoJobArgs
from components.runspec.run import GrpoRunConfig
from components.facts.hardware import profile
from components.facts.models import DEFAULT_MODEL
from components.run.ray_access import RayAccessError
from tools import mockrun

DYNAMIC_TYPE = "pulumi-python:dynamic/verl-gke:GrpoRun"
KUBECONFIG = "apiVersion: v1\nkind: Config\n# marker-3f9c\n"


def render(run: GrpoRunConfig, target: str = "a4", nodes: int = 2, stack: str = "test"):
    def program():
        job = GrpoJob("job", GrpoJobArgs(
            run=grpo_run.resolve_run(run, profile(target), nodes),
            checkpoint_uri="gs://bucket/checkpoints",
            namespace="verl",
            head_service="verl-ray-head-svc",
            kubeconfig=pulumi.Output.secret(KUBECONFIG),
        ))
        pulumi.export("submission_id", job.submission_id)
        pulumi.export("entrypoint", job.entrypoint)
        pulumi.export("checkpoint_uri", job.checkpoint_uri)

    recording = mockrun.run(program, stack=stack)
    return recording, recording.one(DYNAMIC_TYPE, "job-run")


def test_registers_the_run_under_the_component_with_the_exact_entrypoint():
    """One dynamic resource `job-run`, child of the GrpoJob, carrying the tutorial command,
    the target's runtime env and the provider version; the outputs are wired through."""
    recording, run = render(GrpoRunConfig(), target="a3u")
    component = recording.one("verl-gke:index:GrpoJob", "job")
    assert run.parent == component.urn
    inputs = run.plain_inputs
    expected = grpo_run.resolve_run(GrpoRunConfig(), profile("a3u"), 2).entrypoint
    assert inputs["entrypoint"] == expected
    assert inputs["runtime_env"] == grpo_run.runtime_env(profile("a3u"), 2)
    assert inputs["wait_for"] == "first-step" and inputs["timeout_s"] == 45 * 60
    assert inputs["version"] == PROVIDER_VERSION
    assert recording.outputs["entrypoint"] == expected
    assert recording.outputs["submission_id"] == inputs["submission_id"]
    run_dir = grpo_run.resolve_run(GrpoRunConfig(), profile("a3u"), 2).run_dir
    assert recording.outputs["checkpoint_uri"] == f"gs://bucket/checkpoints/{run_dir}"
    assert f"trainer.default_local_dir=/checkpoint-bucket/checkpoints/{run_dir} " in expected


def test_kubeconfig_stays_secret_in_the_registered_inputs():
    """The kubeconfig reaches the engine inside a secret (the SDK wraps the whole `access`
    object that holds it), and appears nowhere in plain text."""
    _, run = render(GrpoRunConfig())
    assert rpc.is_rpc_secret(run.inputs["access"])
    assert mockrun.unwrap(run.inputs["access"]) == {
        "kubeconfig": KUBECONFIG, "namespace": "verl", "service": "verl-ray-head-svc",
        "port": 8265,
    }
    assert "marker-3f9c" not in json.dumps(run.plain_inputs)


def test_configured_dashboard_address_replaces_the_port_forward():
    """With dashboardAddress set, the job carries only that address, no kubeconfig."""
    _, run = render(GrpoRunConfig(dashboard_address="http://127.0.0.1:8265"))
    assert run.plain_inputs["access"] == {"address": "http://127.0.0.1:8265"}


def test_submission_id_is_deterministic_and_follows_the_config():
    """Same stack, name and run: same id (a retried up adopts the job); another run, another
    id; metadata and waiting are not part of it."""
    _, first = render(GrpoRunConfig())
    _, again = render(GrpoRunConfig(metadata={"owner": "me"}, wait_for="succeeded"))
    _, changed = render(GrpoRunConfig(rollout_n=16))
    _, other_stack = render(GrpoRunConfig(), stack="prod")
    sid = first.plain_inputs["submission_id"]
    assert sid.startswith("verl-gke-test-job-")
    assert again.plain_inputs["submission_id"] == sid
    assert changed.plain_inputs["submission_id"] != sid
    assert other_stack.plain_inputs["submission_id"].startswith("verl-gke-prod-job-")


def test_an_invalid_run_is_refused_before_anything_is_registered():
    """verl's problems surface at construction, every one in a single error."""
    with pytest.raises(ValueError) as failure:
        render(GrpoRunConfig(tensor_model_parallel_size=3, nnodes=9))
    message = str(failure.value)
    assert "verl-gke:job.tensorModelParallelSize=3" in message
    assert "verl-gke:job.nnodes=9" in message


class _LogsUnreadable:
    """A job whose status Ray reports but whose log cannot be fetched in time."""

    submission_id = "verl-gke-a4-grpo-0123456789ab-a0"
    policy = job_provider.RequestPolicy()

    def log_tail(self, lines: int, info: dict | None = None) -> str:
        raise RayAccessError("GET /api/v0/logs/file timed out after 15 s")


def test_refresh_keeps_the_last_metrics_when_the_log_cannot_be_read():
    """A log too large to fetch does not fail `pulumi refresh`: status is reported and the
    previous metrics snapshot of the same attempt is kept."""
    previous = {"step": 41.0, "critic/score/mean": 0.62}
    info = {"status": "RUNNING", "start_time": 1_700_000_000_000}
    same = f"/#/jobs/{_LogsUnreadable.submission_id}"  # observed on this attempt before
    observed = job_provider._observed(_LogsUnreadable(), info,
                                      {"metrics": previous, "dashboard_path": same})
    assert observed["status"] == "RUNNING"
    assert observed["metrics"] == previous
    assert observed["start_time"] == "2023-11-14T22:13:20+00:00"


def test_the_export_asks_for_a_gpu_worker_and_the_mergers_memory():
    """The export is submitted with entrypoint resources, so Ray never runs it on the head:
    one GPU and the merger's memory for the model saved by the run's 16 GPUs; the supervisor
    submits exactly the same."""
    recording, run = render(GrpoRunConfig())
    resources = run.plain_inputs["export_resources"]
    assert resources == {"entrypoint_num_gpus": 1,
                         "entrypoint_memory": export.memory_need(DEFAULT_MODEL.parameter_count, 16)}
    assert 170e9 < resources["entrypoint_memory"] < 180e9  # ~140 GB peak, a quarter more
    _, without = render(GrpoRunConfig(export_model=False))
    assert without.plain_inputs.get("export_resources") is None  # None inputs are dropped


def test_an_export_that_cannot_fit_a_worker_is_refused_before_anything_is_created():
    """The merger's need is checked against Ray's memory on one GPU worker: a model too large
    for it fails construction, naming the key, the numbers and the fix."""
    problems = export.memory_problems(profile("a4x"), 400e9, 16, "verl-gke:job.exportModel")
    assert len(problems) == 1
    assert "verl-gke:job.exportModel=true" in problems[0]
    assert "400.0B-parameter" in problems[0]
    assert "set verl-gke:job.exportModel to false" in problems[0]
    for target in ("a4", "a3u", "a4x"):  # the default model fits every target
        assert export.memory_problems(profile(target), 32.8e9, 16, "k") == []
    with pytest.raises(ValueError, match="exportModel=true"):
        def program():
            GrpoJob("job", GrpoJobArgs(
                run=grpo_run.resolve_run(GrpoRunConfig(), profile("a4x"), 4),
                checkpoint_uri="gs://b/checkpoints", namespace="verl", head_service="svc",
                kubeconfig=pulumi.Output.secret(KUBECONFIG), model_parameters=400e9,
            ))
        mockrun.run(program, stack="test")
