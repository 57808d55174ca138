"""What verl does at the pinned ref: the facts the program, the fakes and the simulation share.

Every line cited here is of verl-project/verl at AT_REF (ddbcdb79f5f0, 2026-07-09, between
v0.8.0 and v0.9.0), the commit components/facts/pins.py stages (VERL_REF); a test holds the two
equal, so moving the pin means reading these again. The offline check of the training stack
(tools/training_stack.py, tests/test_training_stack.py) composes verl's own config tree and
walks verl's own imports at that commit, vendored in third_party/verl/ (its SOURCE.md says how).

What lives here: which trainer the config selects, where verl reads the values the program sets
(the reward function), the env verl gives its workers, the lines its log prints that the program
reads (step lines, phases, resume) and the checkpoint layout it writes.

Standard library only: protocol.py reads the log markers, and the supervisor's pod runs it.
"""

from __future__ import annotations

import pprint
from collections.abc import Mapping

AT_REF = "ddbcdb79f5f0469e1c6b5640fad62dbea6e84275"

# --- The trainer -----------------------------------------------------------------------------
# `trainer.use_v1` defaults to true at the ref (verl/trainer/config/ppo_trainer.yaml:201;
# bc6fb966c "[BREAKING] enable V1 trainer by default"): main_ppo runs TaskRunnerV1
# (verl/trainer/main_ppo.py:170-171), whose `run` starts with `import transfer_queue`
# (:131) and whose trainer imports it at module level (verl/trainer/ppo/v1/trainer_base.py:30).
# The legacy trainer (main_ppo_v0, use_v1=false) is deprecated at the ref, "will be removed in
# v0.9.0" (main_ppo.py:173-178), and is not what verl's CI runs by default. The program sets the
# key explicitly, so that the choice is visible in every entrypoint and survives a pin move.
USE_V1 = ("trainer.use_v1", "True")
# The module the V1 trainer imports that no verl image ships: TransferQueue, pinned by verl's
# requirements.txt at the ref (requirements.txt:28, `TransferQueue==0.1.8`), which verl's CI
# installs on top of its image (.github/workflows/vllm.yml:109-111). components/facts/pins.py
# TRAINING_STACKS installs it in every Ray pod.
V1_NEEDS = "transfer_queue"

# --- Where verl reads what the program sets ---------------------------------------------------
# The reward function: `config.reward.custom_reward_function` (verl/trainer/ppo/reward.py:70-76,
# verl/experimental/reward_loop/reward_loop.py:146). The top-level `custom_reward_function`
# group still composes (verl/trainer/config/legacy_reward_impl.yaml:1-3) but only the fully
# async entrypoint copies it over (reward_loop.py:39-90, called from
# verl/experimental/fully_async_policy/fully_async_main.py:227): main_ppo ignores it silently.
REWARD_FUNCTION_PATH = "reward.custom_reward_function.path"
REWARD_FUNCTION_NAME = "reward.custom_reward_function.name"
# reward.py:75 asserts a name whenever a path is set; the reward group's own default
# (verl/trainer/config/reward/reward.yaml:13) is compute_score.
DEFAULT_REWARD_FUNCTION_NAME = "compute_score"
# How verl calls the reward function: by keyword only, once per response, with these four
# names (verl/experimental/reward_loop/reward_manager/naive.py:67-83, the reward manager the
# reward group selects, verl/trainer/config/reward/reward.yaml:19), plus any
# `reward.custom_reward_function.reward_kwargs` (verl/trainer/ppo/reward.py:82-86). It may be
# `async def` (naive.py:30) and return a number or a dict with `score` (:89-95).
REWARD_CALL_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"
# Where verl's default reward picks a scorer by the row's data_source and raises
# NotImplementedError for any other (verl/utils/reward_score/__init__.py:44-107); the values it
# knows are read from that file at the ref by tools/vendor_verl.py, into
# third_party/verl/reward_data_sources.json.
REWARD_DATA_SOURCES_FILE = "third_party/verl/reward_data_sources.json"
# Keys that replace the reward manager verl's default reward runs in (reward.yaml:16-23, read
# by reward.py:89-108): with one set, the data_source rule above is no longer verl's only one.
REWARD_MANAGER_KEYS = ("reward.reward_manager", "reward.reward_model")

# --- What verl's RL dataset reads of each row -------------------------------------------------
# RLHFDataset reads a data file by its suffix with `datasets.load_dataset` (parquet, or json for
# .json/.jsonl) and refuses any other (verl/utils/dataset/rl_dataset.py:171-178).
DATA_FILE_SUFFIXES = (".parquet", ".json", ".jsonl")
# The prompt: a list of chat messages, each a dict with `role` and `content`, under
# `data.prompt_key` (verl/trainer/config/data/legacy_data.yaml:27, rl_dataset.py:108, :299-330
# `_build_messages`).
PROMPT_KEY = ("data.prompt_key", "prompt")
CHAT_MESSAGE_FIELDS = ("role", "content")
# The reward's inputs, read by hard-coded keys (naive.py:42-44): the row's `data_source` and
# `reward_model["ground_truth"]`, and `extra_info` if present (a dict; a missing or null one
# becomes {}, rl_dataset.py:400-401).
DATA_SOURCE_COLUMN = "data_source"
GROUND_TRUTH_COLUMN = ("reward_model", "ground_truth")
EXTRA_INFO_COLUMN = "extra_info"
# A dataset class of the user's own replaces RLHFDataset (rl_dataset.py:578-588): the columns
# are then its business.
CUSTOM_DATASET_KEY = "data.custom_cls.path"
# Config groups that compose at the ref but that main_ppo never reads, each with the group that
# replaced it: an override under one of them would be accepted and ignored.
IGNORED_GROUPS = {"custom_reward_function": "reward.custom_reward_function"}

# --- The env verl gives its workers -----------------------------------------------------------
# verl/trainer/constants_ppo.py:61-78 (PPO_RAY_RUNTIME_ENV), applied by get_ppo_ray_runtime_env
# (:81-107) to every key the job's env does not already set (:101-103, in the driver's env).
# The HCCL_* and HSA_NO_SCRATCH_RECLAIM entries are for Ascend and ROCm and change nothing here;
# they are kept so that the dict is verl's. Not in it at the ref: CUDA_DEVICE_MAX_CONNECTIONS, set only for
# Megatron on Hopper or Ampere (:39-46, :99-100: "Torch-FSDP2 / Megatron-FSDP must NOT set it to
# 1", it serialises FSDP2's prefetch), and NCCL_CUMEM_ENABLE, which verl sets to 0 only for the
# vLLM server actors (verl/plugin/platform/platform_cuda.py:147-152), so training workers run
# with NCCL's own default.
WORKER_ENV = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "VLLM_DISABLE_COMPILE_CACHE": "1",
    "HCCL_HOST_SOCKET_PORT_RANGE": "auto",
    "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
    "HSA_NO_SCRATCH_RECLAIM": "1",
}
# Forwarded from the driver's env whatever the job's env says, "0" when unset (:105-106).
FORWARDED_ENV = ("PYTHONHASHSEED", "VERL_FULL_DETERMINISM", "VLLM_BATCH_INVARIANT")

# --- What the job log says --------------------------------------------------------------------
# The console logger prints one line per logged step, "step:N - key:value - ..."
# (verl/utils/logger/aggregate_logger.py:26-32 concat_dict_to_str, printed by LocalLogger.log
# :49-51); Ray prefixes an actor's output with "(TaskRunner pid=123) ". Values are pprint'ed
# numbers, e.g. np.float64(0.5) or nan.
STEP_PREFIX = "step:"


def step_line(step: int, metrics: Mapping[str, object]) -> str:
    """A step line as verl prints it (concat_dict_to_str): `pprint.pformat` of each number; a
    string stands for a value's text as it is (e.g. "np.float64(0.5)"). For the fakes and the
    simulation, which print what the program parses."""
    items = [f"{STEP_PREFIX}{step}"]
    items += [f"{key}:{value if isinstance(value, str) else pprint.pformat(value)}"
              for key, value in metrics.items()]
    return " - ".join(items)
# A validation before training is logged as a step line of its own, at the step the run starts
# from (step 0, or the resumed step), with val-core/ and val-aux/ keys only
# (verl/trainer/ppo/v1/trainer_base.py:327-333; `trainer.val_before_train` defaults to true).
# Every training step logs its timings, `timing_s/step` among them (the "step" timer,
# trainer_base.py:359; verl/trainer/ppo/metric_utils.py:593-627 compute_timing_metrics): a step
# line is a training step only when it carries this key.
TRAINING_STEP_KEY = "timing_s/step"
# The phases of a run before its first step, in order, and the text of the line that marks each.
# The V1 trainer logs them with `logger.info` (trainer_base.py:100-101, level INFO), and
# verl's package init gives the root logger a handler (verl/__init__.py:32,
# verl/utils/logging_utils.py:21-25), so they reach the TaskRunner's output as
# "INFO:<time>:<text>". The trainer's __init__ builds the dataloaders and logs the step count
# (trainer_base.py:591), then `init` starts the workers, loads the model, starts the rollout
# engine, loads any checkpoint and logs the end (:289). A phase seen implies the ones before.
PHASES = (
    ("data loaded; loading the model and starting the rollout engine", "Total training steps:"),
    ("workers and rollout engine up", "all initialize finished, ready to fit"),
)
# What a resumed attempt logs once it has found its step (trainer_base.py:690), and what a
# fresh one logs instead (:676).
RESUMED = "Resuming from {folder}, setting global step to {step}"
FROM_SCRATCH = "Training from scratch"

# --- The checkpoint layout --------------------------------------------------------------------
# In a run's `trainer.default_local_dir`: one directory per saved step (trainer_base.py:717-718),
# the actor's shards and its `huggingface/` config under `actor/` (:737), the dataloader's state
# in `data.pt` (:763), and last the tracker naming the step saved
# (verl/utils/checkpoint/checkpoint_manager.py:238-242, written at trainer_base.py:771-775): a
# crash in the middle of a save leaves the tracker on the step before.
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
CHECKPOINT_STEP_DIR = "global_step_{}"
CHECKPOINT_ACTOR_DIR = "actor"

# --- What the program sets that verl leaves off -----------------------------------------------
# Prompts longer than data.max_prompt_length are dropped once, when the dataset is built
# (verl/utils/dataset/rl_dataset.py:119 reads the key, :197-232 filters by the chat-templated
# length), as verl's GRPO recipes set it (examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh:61).
# The composed default is False (verl/trainer/config/data/legacy_data.yaml:80), and the agent
# loop no longer truncates (TRAINING-REVIEW-2.md finding 5): one longer prompt would fail the
# step that draws it.
FILTER_OVERLONG_PROMPTS = ("data.filter_overlong_prompts", "True")

# --- What vLLM is given -----------------------------------------------------------------------
# Without rollout.max_model_len (null in verl/trainer/config/rollout/rollout.yaml:81) each vLLM
# server takes the model's max_position_embeddings as its context
# (verl/workers/rollout/vllm_rollout/vllm_async_server.py:995-996), and vLLM starts only if one
# sequence of that length fits its KV cache.
ROLLOUT_MAX_MODEL_LEN = "actor_rollout_ref.rollout.max_model_len"
