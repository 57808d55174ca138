"""The run's lifecycle settings (components/runspec/lifecycle.py) and checkpoint retention."""

from __future__ import annotations

import subprocess

import pydantic
import pytest

from components.facts.layout import CHECKPOINT_TRACKER
from components.runspec.lifecycle import RunLifecycle, prune_command
from components.runspec.run import CONTINUATION_FIELDS, GrpoRunConfig


def _prune(tmp_path, steps: list[int], tracked: int | None, keep: int) -> list[int]:
    run = tmp_path / "run"
    for step in steps:
        (run / f"global_step_{step}" / "actor").mkdir(parents=True)
    (run / "huggingface").mkdir(parents=True)
    if tracked is not None:
        (run / CHECKPOINT_TRACKER).write_text(str(tracked))
    subprocess.run(["bash", "-c", prune_command(str(run), keep)], check=True, timeout=30)
    assert (run / "huggingface").is_dir(), "the exported model is never pruned"
    return sorted(int(p.name.rsplit("_", 1)[1]) for p in run.glob("global_step_*"))


def test_prune_keeps_the_newest_checkpoints_of_every_attempt(tmp_path):
    """Before an attempt, all but the newest `keep` checkpoints go, whichever attempt saved
    them (verl's own pruning sees only its process's), numerically, not by name."""
    assert _prune(tmp_path, [2, 4, 6, 8, 10, 12], 12, 2) == [10, 12]


def test_prune_never_deletes_the_step_the_tracker_names(tmp_path):
    """A crash mid-save leaves newer, partial directories; the tracked step, which the attempt
    resumes from and the export merges, survives any keep."""
    assert _prune(tmp_path, [10, 20, 30], 10, 1) == [10, 30]


def test_prune_does_nothing_when_the_tracker_cannot_be_read(tmp_path):
    """An unreadable or empty tracker (a transient GCS FUSE error) protects no step, so nothing
    is pruned at all: the tracked step can never be among what goes (review finding 7)."""
    run = tmp_path / "run"
    for step in (10, 20, 30):
        (run / f"global_step_{step}" / "actor").mkdir(parents=True)
    (run / CHECKPOINT_TRACKER).mkdir()  # cat fails on a directory, as on an I/O error
    assert _prune_in(run) == [10, 20, 30]
    (run / CHECKPOINT_TRACKER).rmdir()
    (run / CHECKPOINT_TRACKER).write_text("")
    assert _prune_in(run) == [10, 20, 30]


def _prune_in(run) -> list[int]:
    subprocess.run(["bash", "-c", prune_command(str(run), 2)], check=True, timeout=30)
    return sorted(int(p.name.rsplit("_", 1)[1]) for p in run.glob("global_step_*"))


def test_one_kept_checkpoint_is_refused_with_the_reason_and_the_fix():
    """keepCheckpoints must be at least 2: with 1, verl's own pruning and a crash mid-save can
    leave the tracker naming a step without its actor/ (review finding 7)."""
    with pytest.raises(pydantic.ValidationError,
                       match=r"keepCheckpoints=1 is too few: keep at least 2.*use 2"):
        GrpoRunConfig.model_validate({"keepCheckpoints": 1})


def test_prune_of_a_new_run_does_nothing_and_never_fails(tmp_path):
    """No checkpoint yet, no tracker: nothing to do, exit 0 (pruning never blocks a start)."""
    assert _prune(tmp_path, [], None, 2) == []


def test_lifecycle_keys_are_outside_the_runs_identity():
    """Every new lifecycle key keeps the run (its checkpoint directory) when changed."""
    for key in ("stall_minutes", "deadline_hours", "release_gpus", "keep_checkpoints"):
        assert key in CONTINUATION_FIELDS


@pytest.mark.parametrize(("key", "value"), [
    ("keepCheckpoints", 0), ("stallMinutes", 0), ("deadlineHours", 0), ("maxRetries", -1),
    ("waitFor", "started"),
])
def test_bad_lifecycle_values_are_refused_naming_the_key(key, value):
    """A bad value is refused by the schema, with the key in the message."""
    with pytest.raises(pydantic.ValidationError, match=key):
        GrpoRunConfig.model_validate({key: value})


def test_defaults_are_valid_and_supervise_the_run():
    """The defaults: wait for the first step, three retries, a stall after 45 min, GPUs
    released after the run, two checkpoints kept."""
    run = RunLifecycle()
    assert (run.wait_for.value, run.max_retries, run.stall_minutes, run.release_gpus,
            run.keep_checkpoints) == ("first-step", 3, 45, True, 2)
