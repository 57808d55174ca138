"""Your own experiment, checked like the default one (issue 41 section 1,
docs/your-own-experiment.md "What is checked"): the files a run brings are held to what verl does
with them at the pinned ref, before anything is created. The first cases are the mistakes of the
fourth ecosystem review (RE-6 to RE-8, RE-10, RE-11): a misspelt parquet name, `boxed_exakt`,
random bytes as parquet, a parquet without `prompt`, a reward file with a syntax error and a
dataset with no reward."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as parquet
import pytest

from components.facts import verl
from components.runspec import run_experiment
from components.schema.config import ConfigError
from tests.test_config import load, problems
from tests.test_cli_errors import assert_user_error

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "my-verl-bucket"
REWARD = (
    "import re\n\n"
    "def boxed_exact(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    found = re.findall(r'\\\\boxed\\{([^{}]*)\\}', solution_str)\n"
    "    return float(bool(found) and found[-1] == ground_truth)\n"
)
CHAT = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))


def verl_rows(data_source: str = "DigitalLearningGmbH/MATH-lighteval", rows: int = 3) -> pa.Table:
    """Rows as verl's examples/data_preprocess/math_dataset.py writes them at the pin."""
    return pa.table({
        "data_source": [data_source] * rows,
        "prompt": pa.array([[{"content": f"What is {i}+1? Put the answer in \\boxed{{}}.",
                              "role": "user"}] for i in range(rows)], CHAT),
        "ability": ["math"] * rows,
        "reward_model": [{"ground_truth": str(i + 1), "style": "rule"} for i in range(rows)],
        "extra_info": [{"index": i, "split": "train"} for i in range(rows)],
    })


def write_experiment(root: Path, table: pa.Table | None = None, reward: str = REWARD) -> Path:
    """docs/your-own-experiment.md's folder: reward.py and data/{train,test}.parquet."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "reward.py").write_text(reward)
    for split in ("train", "test"):
        parquet.write_table(table if table is not None else verl_rows(), root / "data" / f"{split}.parquet")
    return root


JOB = {
    "trainFiles": "data/train.parquet",
    "valFiles": "data/test.parquet",
    "rewardFunctionPath": "reward.py",
    "rewardFunctionName": "boxed_exact",
}


def _job(workdir: Path, **changes) -> str:
    job = {**JOB, "workingDir": str(workdir), **changes}
    return json.dumps({k: v for k, v in job.items() if v is not None})


def _found(workdir: Path, **changes) -> list[str]:
    try:
        load(bucketName=BUCKET, job=_job(workdir, **changes))
    except ConfigError as error:
        return error.problems
    return []


def test_the_docs_experiment_passes(tmp_path):
    """The walk-through's folder (verl's MATH rows, the boxed_exact reward) passes every check:
    the checks refuse what verl would refuse, not a run it would train."""
    assert _found(write_experiment(tmp_path)) == []


# --- The review's mistakes --------------------------------------------------------------------

def test_a_misspelt_parquet_name_is_refused_with_the_name_meant(tmp_path):
    """RE-6: `data/train.parqet` for data/train.parquet planned cleanly and failed ~54 minutes
    in; it is now refused with the file that is there."""
    found = _found(write_experiment(tmp_path), trainFiles="data/train.parqet")
    assert any("verl-gke:job.trainFiles='data/train.parqet' is not a file in "
               "verl-gke:job.workingDir=" in p and "Did you mean 'data/train.parquet'?" in p
               for p in found), found


def test_a_misspelt_reward_function_is_refused_with_the_name_meant(tmp_path):
    """RE-6: `boxed_exakt` when reward.py defines boxed_exact (read with ast, never imported)."""
    found = _found(write_experiment(tmp_path), rewardFunctionName="boxed_exakt")
    assert any("verl-gke:job.rewardFunctionName='boxed_exakt' is not defined in "
               "verl-gke:job.rewardFunctionPath='reward.py' (it defines boxed_exact). "
               "Did you mean 'boxed_exact'?" in p for p in found), found


def test_random_bytes_named_parquet_are_refused(tmp_path):
    """RE-6: random bytes under a .parquet name are not parquet (pyarrow reads no footer)."""
    workdir = write_experiment(tmp_path)
    (workdir / "data" / "test.parquet").write_bytes(bytes(range(256)) * 8)
    found = _found(workdir)
    assert any(p.startswith("verl-gke:job.valFiles='data/test.parquet' is not a parquet file")
               for p in found), found
    assert not any("trainFiles" in p for p in found), found


def test_a_parquet_without_prompt_is_refused_naming_its_columns(tmp_path):
    """verl's RL dataset reads each prompt from `prompt` (data.prompt_key): a file without it
    fails at dataset creation; the message lists the columns the file has."""
    found = _found(write_experiment(tmp_path, verl_rows().drop_columns(["prompt"])))
    assert any("verl-gke:job.trainFiles='data/train.parquet' has no column 'prompt' (its "
               "columns are data_source, ability, reward_model, extra_info)" in p
               for p in found), found


def test_a_reward_file_that_does_not_parse_is_refused_with_its_line(tmp_path):
    """A syntax error fails verl's load of the reward in every reward worker; here it is
    refused with the line, before anything is created."""
    found = _found(write_experiment(tmp_path, reward="def boxed_exact(data_source:\n    return 1\n"))
    assert any("verl-gke:job.rewardFunctionPath='reward.py':" in p and "does not parse "
               "(SyntaxError at line 1" in p for p in found), found


def test_a_dataset_with_no_reward_is_refused_with_the_fix(tmp_path):
    """RE-8: rows whose data_source verl's default reward does not know, and no
    rewardFunctionPath: verl raises NotImplementedError at the first reward. Refused, naming the
    value and both fixes; the same rows with a reward of the user's own pass."""
    workdir = write_experiment(tmp_path, verl_rows(data_source="my_math"))
    found = _found(workdir, rewardFunctionPath=None, rewardFunctionName=None)
    assert any("its rows' data_source 'my_math' has no reward built into verl at the pinned "
               "ref" in p and "verl-gke:job.rewardFunctionPath is not set" in p
               and "NotImplementedError" in p for p in found), found
    assert _found(workdir) == []


def test_a_dataset_verl_has_a_reward_for_needs_none(tmp_path):
    """A data_source in verl's default reward (GSM8K's name, or an aime* prefix) needs no
    reward file: the default run's rule, held for a dataset of one's own."""
    for source in ("openai/gsm8k", "aime2025"):
        workdir = write_experiment(tmp_path / source.replace("/", "_"), verl_rows(source))
        assert _found(workdir, rewardFunctionPath=None, rewardFunctionName=None) == []


# --- The reward's signature ---------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("def boxed_exact(solution, answer):\n    return 0.0\n",
     "takes no keyword data_source, solution_str, ground_truth, extra_info, but verl calls it "
     "as boxed_exact(data_source=..., solution_str=..., ground_truth=..., extra_info=...)"),
    ("def boxed_exact(data_source, solution_str, ground_truth, extra_info, scale):\n    return 0\n",
     "requires scale, which verl does not pass"),
    ("def boxed_exact(data_source, solution_str, ground_truth, /, extra_info=None):\n    return 0\n",
     "takes no keyword data_source, solution_str, ground_truth"),
])
def test_a_reward_that_cannot_take_verls_call_is_refused(tmp_path, source, expected):
    """verl calls the reward by keyword with data_source, solution_str, ground_truth and
    extra_info (naive.py at the pin): a function that cannot take them, or that needs more,
    fails at the first reward."""
    found = _found(write_experiment(tmp_path, reward=source))
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("source", [
    "def boxed_exact(**kwargs):\n    return 0.0\n",
    "async def boxed_exact(data_source, solution_str, ground_truth, extra_info=None):\n    return 0\n",
    "from math import floor as boxed_exact\n",
    "try:\n    import sympy\nexcept ImportError:\n    pass\n"
    "def boxed_exact(*, data_source, solution_str, ground_truth, extra_info, scale=1):\n    return 0\n",
])
def test_rewards_verl_can_call_pass(tmp_path, source):
    """**kwargs, async def, keyword-only parameters, and a name bound by an import (whose
    signature is not read) are all rewards verl can call."""
    assert _found(write_experiment(tmp_path, reward=source)) == []


def test_a_required_parameter_passed_through_reward_kwargs_passes(tmp_path):
    """A parameter verl does not pass is fine when the run passes it
    (reward.custom_reward_function.reward_kwargs, merged into the call)."""
    source = "def boxed_exact(data_source, solution_str, ground_truth, extra_info, scale):\n    return 0\n"
    workdir = write_experiment(tmp_path, reward=source)
    kwargs = {"extraOverrides": {"reward.custom_reward_function.reward_kwargs.scale": 2}}
    assert _found(workdir, **kwargs) == []


# --- Columns ----------------------------------------------------------------------------------

def test_columns_in_the_wrong_form_are_refused(tmp_path):
    """A prompt as plain text (not chat messages), a reward_model without ground_truth and a
    text extra_info are each refused, all in one round."""
    rows = verl_rows()
    table = pa.table({
        "data_source": rows["data_source"],
        "prompt": ["What is 1+1?"] * 3,
        "reward_model": [{"style": "rule"}] * 3,
        "extra_info": ["x"] * 3,
    })
    found = _found(write_experiment(tmp_path, table))
    train = "verl-gke:job.trainFiles='data/train.parquet': column"
    assert any(f"{train} 'prompt' is string, but verl reads a list of chat messages" in p
               for p in found), found
    assert any(f"{train} 'reward_model' is struct<style: string>, but verl's reward reads each "
               "row's reward_model['ground_truth']" in p for p in found), found
    assert any(f"{train} 'extra_info' is string" in p for p in found), found


def test_the_prompt_column_follows_data_prompt_key_and_a_dataset_class_of_ones_own(tmp_path):
    """data.prompt_key names the column verl reads; with data.custom_cls.path the user's class
    reads the rows, so their columns are not checked."""
    workdir = write_experiment(tmp_path, verl_rows().rename_columns(
        ["data_source", "question", "ability", "reward_model", "extra_info"]))
    assert any("has no column 'prompt'" in p for p in _found(workdir))
    assert _found(workdir, extraOverrides={"data.prompt_key": "question"}) == []
    assert _found(workdir, extraOverrides={"data.custom_cls.path": "my_dataset.py",
                                           "data.custom_cls.name": "Rows"}) == []


def test_a_data_file_verl_cannot_read_by_its_suffix_is_refused(tmp_path):
    """verl's RL dataset reads .parquet, .json and .jsonl and raises on anything else."""
    workdir = write_experiment(tmp_path)
    (workdir / "data" / "train.csv").write_text("prompt\nhi\n")
    (workdir / "data" / "test.jsonl").write_text("{}\n")
    found = _found(workdir, trainFiles="data/train.csv", valFiles="data/test.jsonl")
    assert any(p.startswith("verl-gke:job.trainFiles='data/train.csv' is not a file verl's RL "
                            "dataset reads") for p in found), found
    assert not any("valFiles" in p for p in found), found


def test_a_file_left_out_of_the_upload_is_not_there_for_the_pods(tmp_path):
    """A file under .venv exists locally but is never uploaded (run_inputs.IGNORED_NAMES)."""
    workdir = write_experiment(tmp_path)
    (workdir / ".venv").mkdir()
    (workdir / ".venv" / "reward.py").write_text(REWARD)
    found = _found(workdir, rewardFunctionPath=".venv/reward.py")
    assert any("verl-gke:job.rewardFunctionPath='.venv/reward.py' is not a file in" in p
               for p in found), found


# --- verl's list, read from the pin -------------------------------------------------------------

def test_the_data_sources_with_a_reward_are_read_from_verls_source():
    """tools/vendor_verl.py reads default_compute_score's branches from verl's source, the
    third_party file is that reading at the pinned ref, and the check reads the file."""
    from tools import vendor_verl

    text = (
        "def default_compute_score(data_source, solution_str, ground_truth):\n"
        "    if data_source == 'a':\n        pass\n"
        "    elif data_source in ['b', 'c'] or data_source.startswith('d'):\n        pass\n"
        "    else:\n        raise NotImplementedError\n"
    )
    assert vendor_verl.reward_data_sources(text, "x.py") == {
        "source": "x.py default_compute_score", "exact": {"a": 2, "b": 4, "c": 4},
        "prefixes": {"d": 4}}
    vendored = json.loads((ROOT / verl.REWARD_DATA_SOURCES_FILE).read_text())
    assert vendored["ref"] == verl.AT_REF
    assert vendored["exact"]["openai/gsm8k"] == 44  # __init__.py:44 at the pin
    assert run_experiment.has_builtin_reward("openai/gsm8k")
    assert run_experiment.has_builtin_reward("aime_2024")
    assert not run_experiment.has_builtin_reward("gsm8k")


# --- One round, and the key that is set (RE-10, RE-11) ------------------------------------------

def test_the_node_count_does_not_hold_back_the_runs_checks():
    """RE-10: gpuNodes out of range, TP 3 and a batch that does not divide, in one round."""
    found = problems(gpuNodes="300", job=json.dumps(
        {"tensorModelParallelSize": 3, "trainBatchSize": 100, "rolloutN": 7}))
    assert any("verl-gke:gpuNodes = 300 is out of range" in p for p in found), found
    assert any("verl-gke:job.tensorModelParallelSize=3 must divide" in p for p in found), found
    assert any("verl-gke:job.trainBatchSize=100 x verl-gke:job.rolloutN=7" in p for p in found), found


def test_a_list_in_extra_overrides_does_not_hold_back_the_other_entries():
    """RE-10's second case, the reviewer's own: an extraOverrides entry that is a list (no single
    Hydra override) is refused, every such entry in one message, and the other entries are
    still checked in the same round (the duplicated rolloutN, the forbidden checkpoint key)."""
    found = problems(job=json.dumps({"extraOverrides": {
        "data": {"keys": ["a", "b"]}, "x": {"y": ["c"]},
        "actor_rollout_ref.rollout.n": 4, "trainer.default_local_dir": "/x"}}))
    lists = [p for p in found if "holds a list" in p]
    assert len(lists) == 1 and "['data.keys']" in lists[0] and "['x.y']" in lists[0], found
    assert any("['actor_rollout_ref.rollout.n'] duplicates a typed setting" in p
               for p in found), found
    assert any("['trainer.default_local_dir']" in p and "would change" in p for p in found), found


def test_a_file_problem_does_not_hold_back_the_others(tmp_path):
    """Every file's problem in one round: a misspelt data file, random bytes, a bad reward."""
    workdir = write_experiment(tmp_path, reward="def score(\n")
    (workdir / "data" / "test.parquet").write_bytes(b"not parquet")
    found = _found(workdir, trainFiles="data/tain.parquet")
    assert [key for key in ("trainFiles", "valFiles", "rewardFunctionPath")
            if any(p.startswith(f"verl-gke:job.{key}=") for p in found)] == [
        "trainFiles", "valFiles", "rewardFunctionPath"], found


def test_autopilot_names_only_the_capacity_key_that_is_set():
    """RE-11: spot on Autopilot without a reservation names provisioning, not reservation."""
    found = problems(clusterMode="autopilot", provisioning="spot", reservation=None)
    assert any(p.startswith("verl-gke:provisioning = 'spot' is set, but Autopilot") for p in found), found
    assert not any("verl-gke:reservation" in p for p in found), found
    both = problems(clusterMode="autopilot")  # the base config sets a reservation
    assert any(p.startswith("verl-gke:reservation = 'my-res' is set, but Autopilot")
               for p in both), both


# --- The plan: warnings, the bucket at preview, every command ---------------------------------

def _plan(job: dict, invokes: dict | None = None):
    from tools import plan

    return plan.run_program("a4", "standard", overrides={
        "verl-gke:bucketName": BUCKET, "verl-gke:job": json.dumps(job),
    }, invokes=invokes)


def test_an_absolute_path_off_the_mount_is_warned_as_the_images(caplog):
    """RE-7: /home/me/reward.py is read inside the pods' image: the plan warns, and plans."""
    _plan({"rewardFunctionPath": "/home/me/reward.py", "modelPath": f"gs://{BUCKET}/models/m"})
    err = caplog.text
    assert ("verl-gke:job.rewardFunctionPath='/home/me/reward.py' is not under /data "
            "(the stack's bucket): it must exist in the image") in err, err


def _bucket_answers(objects: dict[str, str]) -> dict:
    from tools.mockrun import GET_BUCKET, LIST_BUCKETS

    return {
        LIST_BUCKETS: {"buckets": [{"name": BUCKET, "location": "US-CENTRAL1", "labels": {}}]},
        GET_BUCKET: {"name": BUCKET, "location": "US-CENTRAL1",
                     "hierarchicalNamespaces": [{"enabled": True}]},
        "gcp:storage/getBucketObjects:getBucketObjects": lambda args: {"bucketObjects": [
            {"name": name} for name in objects if name.startswith(args.get("prefix", ""))]},
        "gcp:storage/getBucketObjectContent:getBucketObjectContent":
            lambda args: {"content": objects[args["name"]]},
    }


GS_JOB = {
    "workingDir": f"gs://{BUCKET}/experiments/math", "trainFiles": "data/train.parqet",
    "valFiles": "data/test.parquet", "rewardFunctionPath": "reward.py",
    "rewardFunctionName": "boxed_exakt", "modelPath": f"gs://{BUCKET}/models/m",
}


def test_a_gs_working_directory_is_checked_where_the_bucket_can_be_read():
    """At preview, with the bucket readable: a missing object is refused with the name meant,
    and the reward file is read and checked as a local one is."""
    objects = {f"experiments/math/{name}": text for name, text in [
        ("data/train.parquet", ""), ("data/test.parquet", ""), ("reward.py", REWARD)]}
    with pytest.raises(ConfigError) as error:
        _plan(GS_JOB, _bucket_answers(objects))
    found = error.value.problems
    assert any("verl-gke:job.trainFiles='data/train.parqet' is not a file in the stack's bucket"
               in p and "Did you mean 'data/train.parquet'?" in p for p in found), found
    assert any("verl-gke:job.rewardFunctionName='boxed_exakt' is not defined in "
               "verl-gke:job.rewardFunctionPath='reward.py'" in p for p in found), found
    assert len(found) == 2, found
    _plan({**GS_JOB, "trainFiles": "data/train.parquet", "rewardFunctionName": "boxed_exact"},
          _bucket_answers(objects))


def test_a_gs_working_directory_offline_is_said_to_be_unchecked(caplog):
    """Offline (or before the bucket exists) nothing in the bucket can be read: the plan says
    which keys were not checked and where they will be."""
    _plan(GS_JOB)
    err = caplog.text
    assert ("verl-gke:job.trainFiles='data/train.parqet', verl-gke:job.valFiles="
            "'data/test.parquet', verl-gke:job.rewardFunctionPath='reward.py': not checked, the "
            f"bucket gs://{BUCKET} does not exist yet") in err, err
    assert "`pulumi preview` checks that each exists" in err


def test_the_reviewers_folder_ends_in_exit_2_naming_every_mistake(tmp_path):
    """The review's folder through the real entry point (`make plan`'s): exit 2, no traceback,
    the misspelt data file and the misspelt function in one round."""
    workdir = write_experiment(tmp_path / "my-math")
    (workdir / "data" / "test.parquet").write_bytes(b"random bytes, not parquet")
    stack = tmp_path / "Pulumi.dev.yaml"
    job = {**JOB, "workingDir": str(workdir), "trainFiles": "data/train.parqet",
           "rewardFunctionName": "boxed_exakt"}
    stack.write_text("config:\n  verl-gke:target: a4\n  verl-gke:job:\n" + "".join(
        f"    {key}: {value}\n" for key, value in job.items()))
    result = subprocess.run(
        [sys.executable, "-m", "tools.plan", "--stack", "a4", "--config-file", str(stack),
         "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert_user_error(result, "Did you mean 'data/train.parquet'?",
                      "Did you mean 'boxed_exact'?", "is not a parquet file")
