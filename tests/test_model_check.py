"""The run against the cluster and the model: defaults that plan at every node count, the model
check at preview (shape, rollout TP, memory), and what it reads (nothing, offline)."""

from __future__ import annotations

import pytest

from components.facts.hardware import PROFILES, Target, profile
from components.facts.models import DEFAULT_MODEL, ModelShape
from components.preflight import model_shape
from components.schema import config as stack_config
from components.schema.config import ConfigError
from components.runspec.run import GrpoRunConfig, resolve, resolve_run
from components.runspec.run_memory import Offload
from tools import plan

# Public config.json figures (huggingface.co/Qwen/<name>/blob/main/config.json).
QWEN_7B = {
    "model_type": "qwen2", "num_attention_heads": 28, "num_key_value_heads": 4,
    "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
    "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
}
QWEN_72B = {
    "model_type": "qwen2", "num_attention_heads": 64, "num_key_value_heads": 8,
    "num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 29568,
    "vocab_size": 152064, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "max_position_embeddings": 32768,
}


def shape(config: dict, name: str = "Qwen/Qwen2.5-7B-Instruct") -> ModelShape:
    return ModelShape.from_config_json(name, "a" * 40, config)


def test_the_default_models_parameter_count_is_computed_from_its_shape():
    """32,763,876,352 = 64 layers of 487.6M (with q/k/v biases) + two untied 778.6M embeddings,
    the review's 32.8e9; Qwen2.5-7B's config gives its published 7.6B."""
    assert DEFAULT_MODEL.parameter_count == 32_763_876_352
    assert round(shape(QWEN_7B).parameter_count / 1e9, 2) == 7.62


@pytest.mark.parametrize("target", [t.value for t in Target])
def test_every_node_count_the_program_accepts_plans_with_default_job_settings(target):
    """Defaults follow the cluster: from 1 node to the target's maximum, an empty job
    passes every check (verl's batch rules and the memory estimate) for the default model."""
    hw = profile(target)
    run = GrpoRunConfig().with_model(DEFAULT_MODEL)
    failing = {n: p for n in range(1, hw.max_nodes + 1) if (p := resolve_run(run, hw, n).problems)}
    assert failing == {}


def test_eight_a3u_nodes_keep_enough_samples_per_gpu():
    """8 x a3u used to fail on a micro batch the user never set (2048 samples / 64 GPUs = 32,
    micro 64). The batch now grows with the GPUs: at least 64 samples per GPU and step."""
    resolved = resolve(GrpoRunConfig().with_model(DEFAULT_MODEL), profile("a3u"), 8)
    samples = resolved.train_batch_size * resolved.rollout_n
    assert samples // 64 >= 64
    per_gpu_mini = resolved.ppo_mini_batch_size * resolved.rollout_n // 64
    assert per_gpu_mini % resolved.ppo_micro_batch_size_per_gpu == 0
    # One group of all 64 GPUs: HSDP starts past 64 (run_sizing.HSDP_MIN_GPUS, the checkpoint).
    assert resolved.fsdp_size == -1


def test_a_problem_from_a_default_says_it_is_a_default():
    """A user's train batch that leaves the derived micro batch nothing to divide names both,
    and marks the value the user did not set."""
    run = GrpoRunConfig(train_batch_size=100, ppo_micro_batch_size_per_gpu=64)
    assert list(resolve_run(run, profile("a4"), 2).problems) == [
        "verl-gke:job.ppoMicroBatchSizePerGpu=64 must divide the per-GPU mini batch "
        "verl-gke:job.ppoMiniBatchSize=100 (the default for this cluster) x rolloutN 8 // 16 "
        "GPUs = 50: use 1, 2, 5, 10, 25 or 50"
    ]


def test_rollout_tp_that_does_not_divide_the_heads_is_refused():
    """Qwen2.5-7B has 28 heads and 4 KV heads: vLLM refuses TP 8 at start. Refused here with
    the sizes that work; left unset, the default picks one of them."""
    seven = shape(QWEN_7B)
    (problem,) = resolve_run(
        GrpoRunConfig(tensor_model_parallel_size=8).with_model(seven), profile("a4"), 2
    ).problems
    assert problem.startswith("verl-gke:job.tensorModelParallelSize=8 does not divide "
                              "Qwen/Qwen2.5-7B-Instruct's 28 attention heads and 4 KV heads")
    assert problem.endswith("use 1, 2, 4")
    resolved = resolve(GrpoRunConfig().with_model(seven), profile("a4"), 2)
    assert resolved.tensor_model_parallel_size in (1, 2, 4)


def test_a_model_that_does_not_fit_is_refused_with_the_fixes():
    """Qwen2.5-72B on 2 x a3u at the tutorial's settings (the review's finding 5: ~140 GiB in
    rollout): refused with the phase, the estimate and what would make it fit."""
    big = shape(QWEN_72B, "Qwen/Qwen2.5-72B-Instruct")
    run = GrpoRunConfig(offload="none", gpu_memory_utilization=0.6,
                        ppo_micro_batch_size_per_gpu=64).with_model(big)
    (problem,) = resolve_run(run, profile("a3u"), 2).problems
    assert problem.startswith("Qwen/Qwen2.5-72B-Instruct (72.7B parameters) does not fit on "
                              "16 x H200 (140 GiB) with verl-gke:job.offload=none")
    assert "rollout needs ~148 GiB of 134" in problem
    assert "set verl-gke:job.gpuMemoryUtilization: 0.5 and " \
           "verl-gke:job.ppoMicroBatchSizePerGpu: 16" in problem
    assert problem.endswith("or add nodes (verl-gke:gpuNodes): FSDP shards the weights and Adam "
                            "over every GPU")


def test_left_unset_the_defaults_make_a_big_model_fit_when_anything_can():
    """The same 72B with an empty job: the defaults pick a vLLM share, offload and micro
    batches that fit, and the run passes."""
    big = shape(QWEN_72B, "Qwen/Qwen2.5-72B-Instruct")
    run = GrpoRunConfig().with_model(big)
    assert list(resolve_run(run, profile("a3u"), 2).problems) == []
    resolved = resolve(run, profile("a3u"), 2)
    assert resolved.offload is not Offload.NONE or resolved.gpu_memory_utilization < 0.6


def test_kl_coef_weighs_the_kl_loss_and_is_refused_without_it():
    """klCoef sets the actor's kl_loss_coef (GRPO's KL); verl reads algorithm.kl_ctrl only with
    KL in the reward, so the old mapping had no effect (review finding 6)."""
    overrides = resolve_run(GrpoRunConfig(kl_coef=0.01), profile("a4"), 2).overrides
    assert overrides["actor_rollout_ref.actor.kl_loss_coef"] == "0.01"
    assert "algorithm.kl_ctrl.kl_coef" not in overrides
    run = GrpoRunConfig(kl_coef=0.01, use_kl_loss=False)
    (problem,) = resolve_run(run, profile("a4"), 2).problems
    assert problem.startswith("verl-gke:job.klCoef=0.01 has no effect with "
                              "verl-gke:job.useKlLoss=false")
    no_kl = resolve_run(GrpoRunConfig(use_kl_loss=False), profile("a4"), 2).overrides
    assert "actor_rollout_ref.actor.kl_loss_coef" not in no_kl
    assert "actor_rollout_ref.ref.fsdp_config.model_dtype" not in no_kl


@pytest.mark.parametrize("target", [t.value for t in Target])
def test_the_reference_model_is_held_in_bf16(target):
    """verl's composed config gives the reference fp32 weights (7.6 GiB/GPU for 32B on 16 GPUs);
    it is only read for log-probs, so the program asks for bf16."""
    nodes = PROFILES[Target(target)].default_nodes
    overrides = resolve_run(GrpoRunConfig(), profile(target), nodes).overrides
    assert overrides["actor_rollout_ref.ref.fsdp_config.model_dtype"] == "bfloat16"


def test_offload_maps_to_verls_fsdp_keys():
    """offload: optimizer / all set verl's fsdp_config keys; none leaves verl's false."""
    a4 = profile("a4")
    assert "actor_rollout_ref.actor.fsdp_config.optimizer_offload" not in resolve_run(
        GrpoRunConfig(), a4, 2).overrides
    some = resolve_run(GrpoRunConfig(offload="optimizer"), a4, 2).overrides
    assert some["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] == "True"
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" not in some
    every = resolve_run(GrpoRunConfig(offload="all"), a4, 2).overrides
    assert every["actor_rollout_ref.actor.fsdp_config.param_offload"] == "True"
    assert every["actor_rollout_ref.ref.fsdp_config.param_offload"] == "True"
    extra = {"actor_rollout_ref.actor.fsdp_config.optimizer_offload": True}
    assert list(resolve_run(GrpoRunConfig(extra_overrides=extra), a4, 2).problems) == [
        "verl-gke:job.extraOverrides['actor_rollout_ref.actor.fsdp_config.optimizer_offload'] "
        "duplicates a typed setting: set verl-gke:job.offload instead"
    ]


# --- the model check at preview ---------------------------------------------------------------


def _stack(overrides: dict[str, str]) -> stack_config.StackConfig:
    inputs = plan.stack_inputs("a4", "standard", overrides)
    return stack_config.load(inputs.config, inputs.secret_keys, stack="a4")


@pytest.fixture
def hub(monkeypatch):
    """Answers config.json reads like the Hub would, and records them."""
    reads = []

    def source(model_id, revision, token):
        reads.append((model_id, revision, token))
        return {"Qwen/Qwen2.5-7B-Instruct": QWEN_7B}[model_id]

    model_shape.set_source(source)
    yield reads
    model_shape.set_source(None)


def checked_run(config):
    """The stack's one run, as the model check resolves it (model_shape.checked_runs)."""
    (run,) = model_shape.checked_runs(config).values()
    return run


SEVEN_B = {"verl-gke:staging": '{"modelId": "Qwen/Qwen2.5-7B-Instruct", '
                               '"modelRevision": "' + "a" * 40 + '"}'}


def test_the_default_model_is_checked_from_shipped_data_without_reading_anything(hub):
    """The offline plan and every default stack read no network: the shape is data."""
    run = checked_run(_stack({}))
    assert run.model == DEFAULT_MODEL and hub == []


def test_another_model_is_read_at_its_revision_with_the_stacks_token(hub):
    """A staged Qwen2.5-7B is read once, at the staged revision, with verl-gke:hfToken."""
    run = checked_run(_stack(SEVEN_B))
    assert run.model.num_attention_heads == 28
    ((model_id, revision, token),) = hub
    assert (model_id, revision) == ("Qwen/Qwen2.5-7B-Instruct", "a" * 40) and token


def test_the_model_check_refuses_tp_8_for_qwen_7b_before_anything_is_created(hub):
    """The issue's example: TP 8 on 28 heads stops the program with the key and the fix."""
    job = {"verl-gke:job": '{"tensorModelParallelSize": 8}'}
    with pytest.raises(ConfigError, match=r"tensorModelParallelSize=8 does not divide"):
        checked_run(_stack({**SEVEN_B, **job}))


def test_offline_another_model_is_not_fetched(monkeypatch):
    """Under the mock runtime with no source installed nothing reaches the network: another
    model's shape is unknown offline (a warning says so) and the plan still renders."""
    def no_network(*_args, **_kwargs):
        raise AssertionError("the offline plan reached for the network")

    monkeypatch.setattr(model_shape.urllib.request, "urlopen", no_network)
    _, recording = plan.run_program("a4", "standard", SEVEN_B)
    assert "/data/Qwen2.5-7B-Instruct" in recording.plain_outputs()["job"]["entrypoint"]


def test_hub_errors_name_the_key_to_fix(monkeypatch):
    """401 names verl-gke:hfToken; 404 names the model id and revision keys."""
    import io
    import urllib.error

    def failing(code):
        def urlopen(request, timeout):
            raise urllib.error.HTTPError(request.full_url, code, "x", {}, io.BytesIO())
        return urlopen

    monkeypatch.setattr(model_shape.urllib.request, "urlopen", failing(401))
    with pytest.raises(ConfigError, match=r"HTTP 401: set verl-gke:hfToken"):
        model_shape.read_config("org/gated", "b" * 40, None)
    monkeypatch.setattr(model_shape.urllib.request, "urlopen", failing(404))
    with pytest.raises(ConfigError, match=r"HTTP 404: check verl-gke:staging.modelId"):
        model_shape.read_config("org/missing", "b" * 40, "hf_x")


def test_a_hub_that_does_not_answer_does_not_block_an_up(monkeypatch):
    """A 503 or a timeout is not the config's fault: the shape is unknown this time (warned),
    so a day-two `pulumi up` during a Hub outage still runs."""
    import io
    import urllib.error

    def unavailable(request, timeout):
        raise urllib.error.HTTPError(request.full_url, 503, "x", {}, io.BytesIO())

    warnings = []
    monkeypatch.setattr(model_shape.pulumi.log, "warn", warnings.append)
    monkeypatch.setattr(model_shape.urllib.request, "urlopen", unavailable)
    assert model_shape.read_config("org/model", "b" * 40, None) is None

    def timeout(request, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(model_shape.urllib.request, "urlopen", timeout)
    assert model_shape.read_config("org/model", "b" * 40, None) is None
    assert len(warnings) == 2 and "shape is unknown this time" in warnings[0]


def test_eight_a3u_nodes_plan_as_a_whole_program():
    """`gpuNodes: 8` on a3u with an empty job renders a plan (it failed before on a default)."""
    _, recording = plan.run_program("a3u", "standard", {"verl-gke:gpuNodes": "8"})
    job = recording.plain_outputs()["job"]
    assert "data.train_batch_size=512" in job["entrypoint"]
    assert "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1" in job["entrypoint"]


def test_a_sequence_longer_than_the_models_context_is_refused():
    """vLLM would refuse a max_model_len past the model's 32,768 positions at start."""
    run = GrpoRunConfig(max_response_length=40000).with_model(DEFAULT_MODEL)
    (problem,) = resolve_run(run, profile("a4"), 2).problems
    assert problem == (
        "verl-gke:job.maxPromptLength=512 + verl-gke:job.maxResponseLength=40000 = 40512 "
        "tokens exceed Qwen/Qwen2.5-32B-Instruct's context of 32768: shorten them"
    )


def test_an_hsdp_group_that_does_not_divide_the_gpus_is_refused():
    """verl's (world // fsdp_size, fsdp_size) mesh needs equal groups; 0 is no size."""
    for size in (0, 3):
        (problem,) = resolve_run(GrpoRunConfig(fsdp_size=size), profile("a4"), 2).problems
        assert problem.startswith(f"verl-gke:job.fsdpSize={size} must divide the run's 16 GPUs")


def test_the_memory_estimate_reproduces_the_reviews_appendix():
    """The review's arithmetic for Qwen2.5-32B on 16 GPUs at the tutorial's settings: rollout
    7.6 + 15.3 + vLLM's 0.6 x total + 5 GiB = 135 of 179 (B200), 112 of 140 (H200); A4X adds
    the reference (3.8 GiB in bf16); the 72B on 2 x a3u needs ~140 GiB in rollout (finding 5)."""
    from components.runspec.run_memory import MemoryPlan, rollout_gib

    def rollout(target, shape=DEFAULT_MODEL, reference=False):
        hw = profile(target)
        return rollout_gib(MemoryPlan(
            shape=shape, gpu_memory_gib=hw.gpu.memory_gib, shard_gpus=16, tensor_parallel=8,
            gpu_memory_utilization=0.6, micro_batch=64, log_prob_micro_batch=8,
            tokens_per_sample=1024, reference=reference))

    assert round(rollout("a4")) == 135
    assert round(rollout("a3u")) == 112
    assert round(rollout("a4x", reference=True)) == round(7.6 + 15.3 + 3.8 + 111 + 5)
    assert 138 <= rollout("a3u", shape(QWEN_72B, "Qwen/Qwen2.5-72B-Instruct"), True) <= 150


def test_config_json_variants_are_read_as_the_model_defines_them():
    """A multimodal config's language model (text_config), an explicit head_dim, and a config
    without num_key_value_heads (no GQA: as many KV heads as heads, as transformers defaults)."""
    nested = ModelShape.from_config_json("org/vlm", "c" * 40, {
        "model_type": "qwen2_5_vl", "text_config": {**QWEN_7B, "head_dim": 256}})
    assert nested.head_dim == 256 and nested.num_attention_heads == 28
    plain = {k: v for k, v in QWEN_7B.items() if k != "num_key_value_heads"}
    assert shape(plain).num_key_value_heads == 28
