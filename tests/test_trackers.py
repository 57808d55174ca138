"""Experiment tracking: trackers configured from the stack, keys secret end to end, delivered to
the Ray pods through a Kubernetes Secret, never job inputs; TensorBoard in the run's directory."""

from __future__ import annotations

import base64
import json
import runpy

import pytest

from components.facts.hardware import profile
from components.schema import config
from components.schema.config import ConfigError
from components.runspec.run import GrpoRunConfig, resolve_run, runtime_env, tensorboard_dir
from tests.test_config import BASE, SECRET_KEYS
from tools import mockrun, plan

WANDB_KEY = "wandb-key-9c1f0d3e7a"  # a marker that must never appear in plain text
MLFLOW_URI = "https://user:pa55@mlflow.example.com"
GRPO_RUN = "pulumi-python:dynamic/verl-gke:GrpoRun"


def load(raw: dict, secrets: set[str]) -> config.StackConfig:
    return config.load({**BASE, **raw}, SECRET_KEYS | secrets)


def test_a_logger_without_its_key_is_refused_before_up():
    """wandb without wandbApiKey, mlflow without mlflowTrackingUri: each named with the fix."""
    with pytest.raises(ConfigError) as error:
        load({"verl-gke:job": json.dumps({"logger": "[console,wandb,mlflow]"})}, set())
    assert error.value.problems == [
        "verl-gke:job.logger includes wandb, but verl-gke:wandbApiKey is not set: run `pulumi "
        "config set --secret verl-gke:wandbApiKey <value>` (an API key from "
        "wandb.ai/authorize), or remove wandb from verl-gke:job.logger",
        "verl-gke:job.logger includes mlflow, but verl-gke:mlflowTrackingUri is not set: run "
        "`pulumi config set --secret verl-gke:mlflowTrackingUri <value>` (your tracking "
        "server's URI), or remove mlflow from verl-gke:job.logger",
    ]


def test_a_tracker_key_in_plain_text_is_refused_without_showing_it():
    """Keys must be set with --secret; the message names the key, never its value."""
    with pytest.raises(ConfigError) as error:
        load({"verl-gke:wandbApiKey": WANDB_KEY,
              "verl-gke:job": json.dumps({"logger": "[console,wandb]"})}, set())
    (problem,) = error.value.problems
    assert "verl-gke:wandbApiKey is stored in plain text" in problem
    assert WANDB_KEY not in problem


def test_an_unknown_logger_is_refused_with_the_ones_supported():
    """A tracker whose credentials the program cannot deliver fails here, not on the GPUs."""
    with pytest.raises(ConfigError, match=r"job.logger='\[console,swanlab\]' names swanlab"):
        load({"verl-gke:job": json.dumps({"logger": "[console,swanlab]"})}, set())


def test_tensorboard_writes_into_the_runs_directory():
    """With tensorboard, verl's TENSORBOARD_DIR points into the run's directory on the bucket;
    without it, the env is unchanged."""
    hw = profile("a4")
    run = GrpoRunConfig(logger="[console,tensorboard]")
    run_dir = resolve_run(run, hw, 2).run_dir
    env = runtime_env(hw, 2, tensorboard_dir(run, run_dir))["env_vars"]
    assert env["TENSORBOARD_DIR"] == f"/checkpoint-bucket/checkpoints/{run_dir}/tensorboard"
    assert tensorboard_dir(GrpoRunConfig(), run_dir) is None


@pytest.fixture(scope="module")
def with_trackers():
    """The whole program with wandb and mlflow configured through secret config."""
    inputs = plan.stack_inputs("a4")
    secrets = {
        "verl-gke:wandbApiKey": WANDB_KEY,
        "verl-gke:mlflowTrackingUri": MLFLOW_URI,
    }
    inputs.config.update(secrets)
    inputs.config["verl-gke:job"] = json.dumps({"logger": "[console,wandb,mlflow,tensorboard]"})
    recording = mockrun.run(
        lambda: runpy.run_path(str(plan.ROOT / "__main__.py"), run_name="__pulumi_main__"),
        project=plan.project_name(), stack="a4", config=inputs.config,
        secret_keys=[*inputs.secret_keys, *secrets],
        invokes=plan.example_invokes(inputs.config),
    )
    return inputs, recording


def test_keys_reach_the_ray_pods_through_a_secret_and_nowhere_else(with_trackers):
    """The Secret's data is a Pulumi secret; head and workers read it with envFrom; no key is
    in the job's inputs or anywhere in the plan."""
    inputs, recording = with_trackers
    secret = recording.one("kubernetes:core/v1:Secret", "trackers-secret")
    assert "stringData" not in secret.inputs  # components/secrets.py: data only
    assert secret.plain_inputs["data"] == {"WANDB_API_KEY": "[secret]", "MLFLOW_TRACKING_URI": "[secret]"}
    assert {k: base64.b64decode(v).decode() for k, v in mockrun.unwrap(secret.inputs["data"]).items()} == {
        "WANDB_API_KEY": WANDB_KEY, "MLFLOW_TRACKING_URI": MLFLOW_URI,
    }
    cluster = recording.one("kubernetes:ray.io/v1:RayCluster").plain_inputs["spec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:
        (container,) = group["template"]["spec"]["containers"]
        assert container["envFrom"] == [{"secretRef": {"name": "verl-trackers", "optional": True}}]
    run = recording.one(GRPO_RUN).plain_inputs
    assert "WANDB" not in json.dumps(run) and "MLFLOW" not in json.dumps(run)
    document = json.dumps(plan.plan_document("a4", inputs, recording))
    assert WANDB_KEY not in document and "pa55" not in document
    assert "trainer.logger=[console,wandb,mlflow,tensorboard]" in run["entrypoint"]
    assert run["runtime_env"]["env_vars"]["TENSORBOARD_DIR"].endswith("/tensorboard")
