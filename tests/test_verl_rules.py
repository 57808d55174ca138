"""verl's rules for any model, any dataset and any resume, before a GPU is billed (issue 39,
TRAINING-REVIEW-2.md findings 3-6, 8, 10, 11, 13 and Q3's margin): a model brought by path is
read for its shape, MoE models are counted with their experts, overlong prompts are dropped,
a warm start is weights only, checkpoints under HSDP are modelled as verl writes them, the
batch keeps its updates per epoch as it scales, memory keeps a margin and vLLM its context, and
the docs' MATH reward scores braces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.facts.hardware import profile
from components.facts.models import DEFAULT_MODEL, ModelShape
from components.preflight import model_shape
from components.schema import config as stack_config
from components.schema.config import ConfigError
from components.runspec.run import GrpoRunConfig, resolve, resolve_run
from components.runspec.run_checks import memory_plan
from components.runspec.run_memory import rollout_gib, update_gib, usable_gib, vllm_need_gib
from tests.test_model_check import QWEN_72B, checked_run
from tools import plan, step_model, training_stack

ROOT = Path(__file__).resolve().parent.parent

# Published config.json values (huggingface.co/Qwen/<model>/blob/main/config.json, as the review
# read them, TRAINING-REVIEW-2.md Q3).
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "mlp_only_layers": [],
    "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151936,
}
QWEN3_235B_A22B = {
    **QWEN3_30B_A3B, "hidden_size": 4096, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_hidden_layers": 94,
}


def _shape(config: dict, name: str) -> ModelShape:
    return ModelShape.from_config_json(name, "a" * 40, config)


@pytest.fixture
def clean_sources():
    yield
    model_shape.set_local_files(None)
    model_shape.set_bucket_reader(None)
    model_shape.set_source(None)


def _stack(target: str, overrides: dict[str, str]) -> stack_config.StackConfig:
    inputs = plan.stack_inputs(target, "standard", overrides)
    return stack_config.load(inputs.config, inputs.secret_keys, stack=target)


BROUGHT_72B = {"verl-gke:gpuNodes": "1", "verl-gke:job": '{"modelPath": "/data/models/qwen72b"}'}


# --- finding 3: a model brought by job.modelPath ------------------------------------------------


def test_a_72b_brought_by_path_on_one_a3u_node_is_refused_offline_from_model_config(
        tmp_path, clean_sources):
    """`make plan MODEL_CONFIG=<dir>` reads the brought model's config.json and checks the run
    against it: a 72B on one a3u node does not fit (it planned unchecked, with the 32B's
    defaults, before). Without the fix the offline plan rendered."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN_72B))
    model_shape.set_local_files(tmp_path)
    tight = {**BROUGHT_72B, "verl-gke:job": '{"modelPath": "/data/models/qwen72b", '
             '"tensorModelParallelSize": 4, "gpuMemoryUtilization": 0.6, "offload": "optimizer"}'}
    with pytest.raises(ConfigError, match=r"/data/models/qwen72b \(72.7B parameters\) does not "
                                          r"fit on 8 x H200"):
        plan.run_program("a3u", "standard", tight)
    model_shape.set_local_files(None)
    plan.run_program("a3u", "standard", tight)  # unread, it plans (with a warning)


def test_a_brought_model_is_read_from_the_bucket_at_preview(clean_sources):
    """At preview (no mock runtime) the shape comes from the stack's bucket, where the pods read
    it: config.json and the safetensors index at the path's objects."""
    config = _stack("a3u", BROUGHT_72B)
    reads = []

    def bucket(name, objects):
        reads.append((name, dict(objects)))
        return {"config.json": json.dumps(QWEN_72B), "model.safetensors.index.json": None}

    model_shape.set_bucket_reader(bucket)
    run = checked_run(config)
    assert run.model.parameter_count == pytest.approx(72.7e9, rel=0.01)
    assert run.model.model_id == "/data/models/qwen72b"
    ((name, objects),) = reads
    assert name == config.bucket
    assert objects["config.json"] == "models/qwen72b/config.json"


def test_a_brought_model_without_config_json_in_the_bucket_names_the_key(clean_sources):
    """A path with no config.json behind it is refused with the key, the object and the copy."""
    model_shape.set_bucket_reader(lambda bucket, objects: {})
    with pytest.raises(ConfigError, match=r"verl-gke:job.modelPath='/data/models/qwen72b': "
                                          r"there is no gs://.*/models/qwen72b/config.json"):
        checked_run(_stack("a3u", BROUGHT_72B))


def test_an_unknown_shape_stops_preview_unless_acknowledged(monkeypatch, clean_sources):
    """A shape that cannot be read (here a Hub outage) is an error at preview naming the key
    that acknowledges it; acknowledged, the run goes on unchecked with a warning."""
    seven = {"verl-gke:staging": '{"modelId": "Qwen/Qwen2.5-7B-Instruct", "modelRevision": "'
                                 + "a" * 40 + '"}'}
    monkeypatch.setattr(model_shape, "_mocked", lambda: False)  # as at a real preview
    model_shape.set_source(lambda *_: None)
    with pytest.raises(ConfigError, match=r"set verl-gke:job.acceptUnknownModelShape to true"):
        checked_run(_stack("a4", seven))
    warnings = []
    monkeypatch.setattr(model_shape.pulumi.log, "warn", warnings.append)
    acknowledged = {**seven, "verl-gke:job": '{"acceptUnknownModelShape": true}'}
    assert checked_run(_stack("a4", acknowledged)).model is None
    assert "acknowledged" in warnings[0]


def test_acknowledging_an_unknown_shape_keeps_the_run(clean_sources):
    """The acknowledgement is a check setting, not the run's state: its checkpoint directory
    stays the same."""
    hw = profile("a4")
    assert resolve_run(GrpoRunConfig(accept_unknown_model_shape=True), hw, 2).run_dir == \
        resolve_run(GrpoRunConfig(), hw, 2).run_dir


# --- finding 4: MoE ---------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "name", "total", "active"), [
    (QWEN3_30B_A3B, "Qwen/Qwen3-30B-A3B", 30.5e9, 3.3e9),
    (QWEN3_235B_A22B, "Qwen/Qwen3-235B-A22B", 235.1e9, 22.2e9),
])
def test_qwen3_moe_configs_are_counted_with_their_experts(config, name, total, active):
    """Qwen's published totals (30.5B, 235B) within 1%, and the active parameters (3.3B, 22B)
    within 3%; the dense count read 3.34B and 22.1B."""
    shape = _shape(config, name)
    assert shape.parameter_count == pytest.approx(total, rel=0.01)
    assert shape.active_parameter_count == pytest.approx(active, rel=0.03)


def test_the_safetensors_index_gives_the_weight_bytes_exactly():
    """With model.safetensors.index.json the parameters are its stored bytes / 2 (bf16), not
    the count from the shape (30,532,110,336, which leaves out e.g. Qwen3's q/k norms)."""
    shape = ModelShape.from_config_json("org/m", "a" * 40, QWEN3_30B_A3B,
                                        {"metadata": {"total_size": 61_066_000_000}})
    assert shape.parameter_count == 30_533_000_000


def test_qwen3_235b_a22b_on_16_gpus_needs_offload_and_tp_8_or_is_refused():
    """235.1B parameters hold 14 B x 235e9 / 16 = 192 GiB of FSDP state per GPU before vLLM:
    without offload no target's 16 GPUs fit (the dense count of 22.1B passed at 130 of 179
    GiB); the defaults plan it only with offload and TP 8 (470 GB of weights over 8 GPUs), and
    on a4x, whose node holds 4 GPUs, vLLM's weights cannot fit at all."""
    shape = _shape(QWEN3_235B_A22B, "Qwen/Qwen3-235B-A22B")
    for target, nodes in (("a4", 2), ("a3u", 2), ("a4x", 4)):
        hw = profile(target)
        unloaded = GrpoRunConfig(offload="none").with_model(shape)
        assert any("(235.1B parameters) does not fit" in p
                   for p in resolve_run(unloaded, hw, nodes).problems), target
        derived = GrpoRunConfig().with_model(shape)
        if target == "a4x":
            assert list(resolve_run(derived, hw, nodes).problems) != []
        else:
            resolved = resolve(derived, hw, nodes)
            assert resolved.offload.value != "none" and resolved.tensor_model_parallel_size == 8


def test_qwen3_30b_a3b_fits_the_default_clusters():
    """The MoE that fits still plans, with TP and memory from its true size."""
    moe = GrpoRunConfig().with_model(_shape(QWEN3_30B_A3B, "Qwen/Qwen3-30B-A3B"))
    for target, nodes in (("a4", 2), ("a3u", 2), ("a4x", 4)):
        assert list(resolve_run(moe, profile(target), nodes).problems) == []


def test_a_moe_family_the_check_cannot_count_is_refused_with_a_message():
    """A DeepSeek-V3-style config (latent attention, shared experts, dense first layers) is
    refused naming the families that are read, not counted as dense."""
    deepseek = {**QWEN3_30B_A3B, "model_type": "deepseek_v3", "n_routed_experts": 256}
    deepseek.pop("num_experts")
    with pytest.raises(ConfigError, match=r"mixture-of-experts model .* 'deepseek_v3'.*"
                                          r"mixtral, qwen2_moe, qwen3_moe"):
        model_shape.parse("org/ds", "", (deepseek, None), "verl-gke:job.modelPath='/data/ds'")


# --- finding 5: overlong prompts --------------------------------------------------------------


def test_a_parquet_with_one_overlong_prompt_is_filtered_by_verl(tmp_path):
    """A brought dataset with one prompt over maxPromptLength: the rendered command line makes
    verl drop it when the dataset is built (data.filter_overlong_prompts, read at
    rl_dataset.py:119), instead of failing the step that draws it. Composed with verl's own
    config at the pin; its default is False (legacy_data.yaml:80), so this fails without the
    override."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    prompts = [[{"role": "user", "content": "1 + 1?"}],
               [{"role": "user", "content": "word " * 5000}]]
    pq.write_table(pa.table({"prompt": prompts, "data_source": ["x", "x"]}),
                   data / "train.parquet")
    run = GrpoRunConfig(working_dir=str(tmp_path), train_files="data/train.parquet")
    composed = training_stack.compose(
        training_stack.overrides_of(resolve_run(run, profile("a4"), 2).entrypoint))
    assert composed.data.filter_overlong_prompts is True
    assert composed.data.max_prompt_length == 512


# --- finding 6: resume and warm start ---------------------------------------------------------

SOURCE = "grpo-16gpu-0123456789ab"


def test_a_resume_with_a_changed_learning_rate_is_refused_with_the_warm_start():
    """A resume loads the source's optimizer state, which carries its learning rate, so a
    learningRate set beside resumeFrom would not apply: refused, naming warmStartFrom."""
    run = GrpoRunConfig(resume_from=SOURCE, learning_rate=1e-7)
    problems = resolve_run(run, profile("a4"), 2).problems
    assert any(p.startswith("verl-gke:job.learningRate=1e-07 with verl-gke:job.resumeFrom=")
               and f"warmStartFrom={SOURCE}" in p for p in problems)
    assert list(resolve_run(GrpoRunConfig(resume_from=SOURCE), profile("a4"), 2).problems) == []


def test_a_warm_start_is_weights_only_at_the_new_learning_rate():
    """verl reads the source's export as the model, this run's learning rate, and resumes only
    from the run's own directory (step 0, fresh optimizer, the data from the start)."""
    run = GrpoRunConfig(warm_start_from=SOURCE, learning_rate=1e-7)
    hw = profile("a4")
    resolved = resolve_run(run, hw, 2)
    assert resolved.problems == ()
    composed = training_stack.compose(training_stack.overrides_of(resolved.entrypoint))
    model = composed.actor_rollout_ref.model.path
    assert model == f"/checkpoint-bucket/checkpoints/{SOURCE}/huggingface"
    assert composed.actor_rollout_ref.actor.optim.lr == 1e-7
    assert composed.trainer.resume_mode == "auto"
    assert composed.trainer.resume_from_path is None
    assert composed.trainer.default_local_dir.endswith(resolve_run(run, hw, 2).run_dir)
    assert f"[ -f {model}/config.json ] ||" in resolve_run(run, hw, 2).entrypoint


def test_a_warm_start_is_a_new_run_and_the_default_run_keeps_its_directory():
    """Other initial weights are another run; a run without a warm start keeps the directory
    it had before the key existed (the key is left out of the identity while unset)."""
    hw = profile("a4")
    assert resolve_run(GrpoRunConfig(warm_start_from=SOURCE), hw, 2).run_dir != \
        resolve_run(GrpoRunConfig(), hw, 2).run_dir
    assert "warm_start_from" not in resolve_run(GrpoRunConfig(), hw, 2).identity


def test_a_resume_and_a_warm_start_together_are_refused():
    problems = resolve_run(GrpoRunConfig(resume_from=SOURCE, warm_start_from=SOURCE),
                            profile("a4"), 2).problems
    assert any("are both set" in p for p in problems)


# --- finding 8: checkpoints under HSDP; finding 11: the scale rule ------------------------------


@pytest.mark.parametrize("nodes", [8, 32])
def test_the_step_model_writes_every_ranks_shard(nodes):
    """A save is 12P x GPUs / shard bytes (verl saves every rank's shard), and each node writes
    12P / shard x its GPUs: the checkpoint share no longer falls with the node count under
    HSDP (it fell to 0.8 s/step at 32 a4 nodes, against ~13 amortised)."""
    hw = profile("a4")
    row = step_model.run_row(hw, nodes, GrpoRunConfig(), False)
    s = row["settings"]
    p = DEFAULT_MODEL.parameter_count
    assert row["save_bytes"] == pytest.approx(12 * p * nodes * 8 / s.shard)
    per_node = 12 * p / s.shard * 8
    assert row["save_s"] == pytest.approx(per_node / (step_model.CHECKPOINT_GBPS_PER_NODE * 1e9))
    forced = step_model.run_row(hw, nodes, GrpoRunConfig(fsdp_size=16), False)
    assert forced["save_bytes"] == pytest.approx(12 * p * nodes * 8 / 16)


def test_the_default_hsdp_group_writes_at_most_one_copy_up_to_64_gpus_and_a_quarter_of_16s():
    """The default group was chosen with the save in view: one copy of the state up to 8 a4
    nodes, and at 32 nodes a quarter of the bytes per node a group of 16 wrote."""
    hw = profile("a4")
    eight = step_model.run_row(hw, 8, GrpoRunConfig(), False)
    assert eight["save_bytes"] == pytest.approx(12 * DEFAULT_MODEL.parameter_count)
    default = step_model.run_row(hw, 32, GrpoRunConfig(), False)
    sixteen = step_model.run_row(hw, 32, GrpoRunConfig(fsdp_size=16), False)
    assert default["save_s"] == pytest.approx(sixteen["save_s"] / 4)


@pytest.mark.parametrize(("target", "nodes"), [("a4", 8), ("a4", 32), ("a3u", 32), ("a4x", 18)])
def test_optimizer_updates_per_epoch_stay_the_default_node_counts(target, nodes):
    """The mini batch stays the tutorial's as the train batch grows: a run at 8 or 32 nodes
    makes at least 80% of the updates of the default node count's run (6 of 58 at 32 a4 nodes
    before), and the default node count's run is unchanged."""
    hw = profile(target)
    base = step_model.run_row(hw, hw.default_nodes, GrpoRunConfig(), False)
    scaled = step_model.run_row(hw, nodes, GrpoRunConfig(), False)
    assert scaled["updates"] >= 0.8 * base["updates"]
    resolved = resolve(GrpoRunConfig().with_model(DEFAULT_MODEL), hw, hw.default_nodes)
    assert (resolved.train_batch_size, resolved.ppo_mini_batch_size) == (
        hw.tutorial_job.train_batch_size, hw.tutorial_job.ppo_mini_batch_size)


def test_make_step_model_prints_updates_and_save_bytes_at_8_and_32_nodes():
    text = step_model.report(["a4"], (8, 32))
    assert "upd" in text and "TB/sv" in text
    row = next(line for line in text.splitlines() if line.startswith("a4       32") and "default" in line)
    assert row.split()[-3] == "48"  # updates: 3 steps x 8 mini batches x 2 epochs


# --- the memory margin and vLLM's context -----------------------------------------------------


def test_a_72b_on_one_a3u_node_at_the_limit_does_not_pass():
    """The review's 72B on one a3u node (TP 4, vLLM 0.6, optimizer offload, micro 16) planned
    at 140.0 of 140 GiB: with the 4% margin it is refused, and the derived defaults pick a
    setting that leaves the margin free."""
    hw = profile("a3u")
    big = _shape(QWEN_72B, "Qwen/Qwen2.5-72B-Instruct")
    at_limit = GrpoRunConfig(tensor_model_parallel_size=4, gpu_memory_utilization=0.6,
                             offload="optimizer", ppo_micro_batch_size_per_gpu=16,
                             rollout_log_prob_micro_batch_size_per_gpu=64,
                             ref_log_prob_micro_batch_size_per_gpu=64).with_model(big)
    plan_ = memory_plan(resolve(at_limit, hw, 1), hw)
    assert rollout_gib(plan_) == pytest.approx(140.0, abs=0.3)
    (problem,) = resolve_run(at_limit, hw, 1).problems
    assert "does not fit on 8 x H200" in problem and "rollout needs ~140 GiB of 134" in problem
    derived = memory_plan(resolve(GrpoRunConfig().with_model(big), hw, 1), hw)
    assert max(rollout_gib(derived), update_gib(derived)) <= usable_gib(derived)


def test_vllm_needs_one_sequence_of_its_whole_context():
    """verl starts vLLM with the model's max_position_embeddings (vllm_async_server.py:995-996):
    the need counts one such sequence, and rollout.max_model_len, when set, is what counts."""
    hw = profile("a4")
    long = _shape({**QWEN_72B, "max_position_embeddings": 131072}, "org/long")
    run = resolve(GrpoRunConfig(tensor_model_parallel_size=8).with_model(long), hw, 2)
    whole = vllm_need_gib(memory_plan(run, hw))
    short = vllm_need_gib(memory_plan(run, hw, context_tokens=1024))
    per_token = 2 * 80 * 1 * 128 * 2  # K and V, 80 layers, 1 KV head per GPU at TP 8, bf16
    assert whole - short == pytest.approx(per_token * (131072 - 1024) / 2**30)
    capped = GrpoRunConfig(tensor_model_parallel_size=8, extra_overrides={
        "actor_rollout_ref.rollout.max_model_len": 1024}).with_model(long)
    assert vllm_need_gib(memory_plan(resolve(capped, hw, 2), hw)) == pytest.approx(short)


# --- finding 10: the docs' MATH reward --------------------------------------------------------


def _doc_reward():
    page = (ROOT / "docs/your-own-experiment.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S)
                if "def boxed_exact" in block)
    namespace: dict = {}
    exec(compile(code, "your-own-experiment.md", "exec"), namespace)  # noqa: S102
    return namespace["boxed_exact"]


@pytest.mark.parametrize(("response", "truth", "score"), [
    (r"so \boxed{42}", "42", 1.0),
    (r"the answer is \boxed{\frac{1}{2}}.", r"\frac{1}{2}", 1.0),
    (r"\boxed{2\sqrt{3}}", r"2\sqrt{3}", 1.0),
    (r"\boxed{\frac{1}{3}}", r"\frac{1}{2}", 0.0),
    (r"first \boxed{1} then \boxed{\text{ 7 }}", r"\text{7}", 1.0),
    ("no box", "42", 0.0),
    (r"\boxed{\frac{1}{2}", r"\frac{1}{2}", 0.0),
])
def test_the_docs_math_reward_matches_answers_with_braces(response, truth, score):
    """The example reward's extractor balances braces: `\\boxed{\\frac{1}{2}}` scored 0 with
    the `[^{}]*` pattern, so GRPO would have learned to avoid every fraction."""
    assert _doc_reward()("math", response, truth) == score
