"""The run's config model: tutorial defaults per target, verl's checks, command line and env."""

from __future__ import annotations

import re
import shlex

import pydantic
import pytest

from components.runspec.lifecycle import WaitFor
from components.runspec.run import (
    GrpoRunConfig,
    resolve_run,
    runtime_env,
)
from components.facts.hardware import Target, profile

# The tutorial's override table (TUTORIAL.md "GrpoJob"; seed text, both `ray job submit` commands).
TUTORIAL_A4 = {
    "algorithm.adv_estimator": "grpo",
    "data.train_files": "/data/gsm8k/train.parquet",
    "data.val_files": "/data/gsm8k/test.parquet",
    "data.train_batch_size": "256",
    "data.max_prompt_length": "512",
    "data.max_response_length": "512",
    "actor_rollout_ref.model.path": "/data/Qwen2.5-32B-Instruct",
    "actor_rollout_ref.actor.optim.lr": "1e-05",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "64",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "8",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "0.6",
    "actor_rollout_ref.rollout.n": "8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "4",
    "algorithm.kl_ctrl.kl_coef": "0.001",
    "trainer.logger": "console",
    "trainer.val_before_train": "False",
    "trainer.n_gpus_per_node": "8",
    "trainer.nnodes": "2",
    "trainer.save_freq": "10",
    "trainer.test_freq": "10",
    "trainer.total_epochs": "2",
}
TUTORIAL_A4X = {
    **{k: v for k, v in TUTORIAL_A4.items() if k != "trainer.val_before_train"},
    "actor_rollout_ref.actor.ppo_mini_batch_size": "64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "8",
    "actor_rollout_ref.actor.use_kl_loss": "True",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "16",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "16",
    "trainer.n_gpus_per_node": "4",
    "trainer.nnodes": "4",
}


# Where the program's defaults differ from the tutorial's on its own clusters, on purpose
# (docs/training.md; each is derived or decided in components/runspec/run.py and run_sizing.py).
DIFFERENCES = {
    # verl's GRPO recipes: lr 1e-6 with the KL loss, the reference model in bf16.
    "actor_rollout_ref.actor.optim.lr": "1e-06",
    "actor_rollout_ref.actor.use_kl_loss": "True",
    "actor_rollout_ref.actor.kl_loss_coef": "0.001",
    "actor_rollout_ref.ref.fsdp_config.model_dtype": "bfloat16",
    # The smallest TP that divides 40 heads and 8 KV heads and leaves room for the KV cache.
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
    # Log-prob passes of 64 samples instead of 4-16: fewer full-model all-gathers per step.
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "64",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "64",
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": "-1",
    # The trainer the training stack is checked for, named (components/facts/verl.py USE_V1).
    "trainer.use_v1": "True",
    # Prompts over maxPromptLength dropped at start, as verl's GRPO recipes do (finding 5).
    "data.filter_overlong_prompts": "True",
}
DIFFERENCES_A4X = {**DIFFERENCES, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "32"}


def overrides_for(target: str, run: GrpoRunConfig | None = None, nodes: int | None = None):
    hw = profile(target)
    return resolve_run(run or GrpoRunConfig(), hw, nodes or hw.default_nodes).overrides


@pytest.mark.parametrize(
    ("target", "expected"),
    [("a4", {**TUTORIAL_A4, **DIFFERENCES}), ("a3u", {**TUTORIAL_A4, **DIFFERENCES}),
     ("a4x", {**TUTORIAL_A4X, **DIFFERENCES_A4X})],
)
def test_defaults_are_the_tutorials_overrides_with_the_listed_differences(target, expected):
    """An empty `verl-gke:job` gives the tutorial's overrides for the target except the
    differences listed above, each on purpose; it checkpoints to the run's own directory and
    resumes from it with trainer.resume_mode=auto, which the tutorial lacks (tutorial defect 6).
    The KL coefficient weighs the actor's KL loss, not algorithm.kl_ctrl (review finding 6), and
    the run keeps its last keepCheckpoints (2) checkpoints (issue 18.5)."""
    overrides = overrides_for(target)
    own = overrides.pop("trainer.default_local_dir")
    gpus = int(expected["trainer.nnodes"]) * int(expected["trainer.n_gpus_per_node"])
    assert re.fullmatch(rf"/checkpoint-bucket/checkpoints/grpo-{gpus}gpu-[0-9a-f]{{12}}", own)
    expected = {k: v for k, v in expected.items() if k != "algorithm.kl_ctrl.kl_coef"}
    assert overrides == {
        **expected, "trainer.resume_mode": "auto", "trainer.max_actor_ckpt_to_keep": "2",
    }


def test_overrides_keep_the_tutorials_order_with_extras_last():
    """The command reads like the tutorial's: its table order, checkpoint keys, then extras."""
    run = GrpoRunConfig(extra_overrides={"actor_rollout_ref.actor.entropy_coeff": 0})
    keys = list(overrides_for("a4x", run))
    assert keys[0] == "algorithm.adv_estimator"
    assert keys[-4:] == [
        "trainer.default_local_dir", "trainer.resume_mode", "trainer.max_actor_ckpt_to_keep",
        "actor_rollout_ref.actor.entropy_coeff",
    ]


def test_nnodes_follows_the_clusters_worker_replicas():
    """trainer.nnodes defaults to the RayCluster's GPU workers, not the tutorial's 2."""
    assert overrides_for("a4", nodes=4)["trainer.nnodes"] == "4"


@pytest.mark.parametrize("target", [t.value for t in Target])
def test_tutorial_defaults_pass_verls_checks(target):
    """The tutorial's own run is accepted on every target's default cluster."""
    hw = profile(target)
    assert list(resolve_run(GrpoRunConfig(), hw, hw.default_nodes).problems) == []


def test_tensor_parallel_size_must_divide_the_gpus_per_node():
    """TP 3 on an 8-GPU node is refused, naming the key, the value and the valid sizes."""
    run = GrpoRunConfig.model_validate({"tensorModelParallelSize": 3})
    assert list(resolve_run(run, profile("a4"), 2).problems) == [
        "verl-gke:job.tensorModelParallelSize=3 must divide the 8 GPUs per node of a4: "
        "use 1, 2, 4 or 8"
    ]


def test_samples_per_step_must_divide_over_all_gpus():
    """train_batch_size x n not divisible by the GPUs (verl validate_config) is refused."""
    run = GrpoRunConfig(train_batch_size=255, rollout_n=1, ppo_mini_batch_size=16)
    (problem,) = [p for p in resolve_run(run, profile("a4"), 2).problems if "samples" in p]
    assert problem.startswith("verl-gke:job.trainBatchSize=255 x verl-gke:job.rolloutN=1")
    assert "divisible by the 16 GPUs" in problem


def test_micro_batch_must_divide_the_per_gpu_mini_batch():
    """The normalised mini batch (fsdp_workers) must be a multiple of the micro batch."""
    run = GrpoRunConfig(ppo_micro_batch_size_per_gpu=48)  # a4: 256 x 8 // 16 = 128
    assert list(resolve_run(run, profile("a4"), 2).problems) == [
        "verl-gke:job.ppoMicroBatchSizePerGpu=48 must divide the per-GPU mini batch "
        "verl-gke:job.ppoMiniBatchSize=256 (the default for this cluster) x rolloutN 8 // 16 "
        "GPUs = 128: use 1, 2, 4, 8, 16, 32, 64 or 128"
    ]


def test_every_problem_is_reported_at_once():
    """More GPUs than the cluster has, bad TP, mini > train batch: all in one list."""
    run = GrpoRunConfig(nnodes=3, n_gpus_per_node=16, train_batch_size=64, ppo_mini_batch_size=128)
    problems = resolve_run(run, profile("a4"), 2).problems
    assert any(p.startswith("verl-gke:job.nGpusPerNode=16 exceeds the 8 GPUs") for p in problems)
    assert any(p.startswith("verl-gke:job.nnodes=3 exceeds the 2 GPU worker") for p in problems)
    assert any(p.startswith("verl-gke:job.ppoMiniBatchSize=128 exceeds") for p in problems)


def test_extra_overrides_cannot_shadow_a_typed_field():
    """A typed key passed as an extra is refused with the camelCase key to use instead."""
    run = GrpoRunConfig(extra_overrides={"trainer.total_epochs": 5, "bad key": 1})
    assert list(resolve_run(run, profile("a4"), 2).problems) == [
        "verl-gke:job.extraOverrides['trainer.total_epochs'] duplicates a typed setting: set "
        "verl-gke:job.totalEpochs instead",
        "verl-gke:job.extraOverrides['bad key'] is not a Hydra key: use dotted names such as "
        "actor_rollout_ref.actor.entropy_coeff (optionally prefixed +, ++ or ~)",
    ]


def test_save_freq_must_be_positive_and_unknown_keys_are_refused():
    """saveFreq <= 0 (never checkpoint) and misspelled keys fail validation, by their key."""
    with pytest.raises(pydantic.ValidationError, match="saveFreq"):
        GrpoRunConfig.model_validate({"saveFreq": -1})
    with pytest.raises(pydantic.ValidationError, match="rolloutM"):
        GrpoRunConfig.model_validate({"rolloutM": 4})


def test_dashboard_address_must_be_a_url():
    """A bare host:port is refused with an example of what to write."""
    with pytest.raises(pydantic.ValidationError, match=r"dashboardAddress='ray:8265'.*http://"):
        GrpoRunConfig.model_validate({"dashboardAddress": "ray:8265"})


def test_wait_for_defaults_to_the_first_step():
    """`pulumi up` follows the job until verl has trained a step (issue 18.1), not for the
    hours of training, and not only until Ray has started the driver."""
    assert GrpoRunConfig().wait_for is WaitFor.FIRST_STEP


def test_entrypoint_is_the_tutorials_command_with_quoted_arguments():
    """The command cds into verl on the bucket; every override survives shell parsing."""
    hw = profile("a4")
    run = GrpoRunConfig(extra_overrides={"trainer.experiment_name": "my run; rm -rf /"})
    command = resolve_run(run, hw, 2).entrypoint
    assert command.startswith("cd /data/verl && if t=$(cat /checkpoint-bucket/")
    assert "; PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo " in command
    arguments = shlex.split(command.split("main_ppo ", 1)[1])
    assert arguments == [f"{k}={v}" for k, v in resolve_run(run, hw, 2).overrides.items()]


def test_runtime_env_has_the_right_tuner_per_target():
    """a4 and a3u use their own tuner file (tutorial defect 2); a4x uses NCCL_ENV_PLUGIN."""
    a4, a3u, a4x = (runtime_env(profile(t), 2)["env_vars"] for t in ("a4", "a3u", "a4x"))
    assert a4["NCCL_TUNER_CONFIG_PATH"] == "/usr/local/gib/configs/tuner_config_a4.txtpb"
    assert a3u["NCCL_TUNER_CONFIG_PATH"] == "/usr/local/gib/configs/tuner_config_a3u.txtpb"
    assert "NCCL_TUNER_CONFIG_PATH" not in a4x and a4x["NCCL_ENV_PLUGIN"] == "gcp"
    assert a4x["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64:/usr/local/gib/lib64"
    assert a4["NCCL_NET_PLUGIN"] == "/usr/local/gib/lib64/libnccl-net_internal.so"


@pytest.mark.parametrize("target", [t.value for t in Target])
def test_runtime_env_is_env_vars_only_with_verls_defaults(target):
    """No working_dir/pip/setup_hook (tutorial defect 1); verl's env and HF_HOME on the bucket;
    not CUDA_DEVICE_MAX_CONNECTIONS=1, which the pinned verl keeps from FSDP2 workers because it
    serialises their prefetch (components/facts/verl.py WORKER_ENV)."""
    env = runtime_env(profile(target), 2)
    assert list(env) == ["env_vars"]
    variables = env["env_vars"]
    assert variables["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1"
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in variables
    assert variables["HF_HOME"] == "/data/huggingface_cache"
    assert variables["PYTHONPATH"] == "/data/verl"
    assert all(isinstance(v, str) for v in variables.values())
