"""How a GRPO run is executed and followed, as opposed to what it trains (`components/runspec/run.py`).

`RunLifecycle` holds the `verl-gke:job` keys that decide how `pulumi up` submits and follows the
run, how it is retried and what happens after it ends. None of them is part of the run's
identity (`run.CONTINUATION_FIELDS` takes every field of this model): changing one never moves
the run to a new checkpoint directory.
"""

from __future__ import annotations

import enum
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from components.facts.layout import CHECKPOINT_STEP_DIR, CHECKPOINT_TRACKER
from components.forms.pulumi_forms import Key

CONFIG_KEY = Key("job")  # `<project>:job`, under the project's name


class WaitFor(str, enum.Enum):
    """How far `pulumi up` follows the job before reporting it created."""

    SUBMITTED = "submitted"
    RUNNING = "running"  # Ray started the driver: nothing of verl has run yet
    FIRST_STEP = "first-step"  # verl logged its first training step, with its metrics
    SUCCEEDED = "succeeded"


# How often the supervisor in the cluster looks at the run (its CronJob schedule, minutes): a
# failure is resubmitted, a stall or a deadline acted on, within about this long.
SUPERVISOR_PERIOD_MINUTES = 2


class RunLifecycle(BaseModel):
    """The lifecycle keys of `verl-gke:job`; `GrpoRunConfig` extends this model."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    metadata: dict[str, str] = Field(
        default_factory=dict,
        description="Ray job metadata (e.g. owner). Changing it never replaces the job.",
    )
    wait_for: WaitFor = Field(
        WaitFor.FIRST_STEP,
        description="How far `pulumi up` follows the job: submitted, running (Ray started the "
        "driver), first-step (verl logged its first training step) or succeeded. "
        "default: first-step.",
    )
    timeout_minutes: int = Field(
        45, gt=0,
        description="How long `pulumi up` waits for `waitFor` before failing. default: 45, "
        "the estimated 7-8 min from submission to the first step (make critical-path, an "
        "estimate) about six times over.",
    )
    dashboard_address: str | None = Field(
        None,
        description="Ray dashboard URL to use (a tunnel, IAP, or another Ray cluster). "
        "default: a port-forward to the head Service for the duration of each call.",
    )
    skip_cluster_check: bool = Field(
        False,
        description="Skip the ClusterCheck (GPU inventory, all-reduce bus bandwidth, /data read "
        "throughput) that runs before the job.",
    )
    export_model: bool = Field(
        True,
        description="After the run SUCCEEDS, merge its last checkpoint into a Hugging Face "
        "model under the run's directory (`<run>/huggingface`, the job.modelUri output) with "
        "verl's model merger.",
    )
    max_retries: int = Field(
        3, ge=0, le=100,
        description="Resubmit a run that fails (or stalls) up to this many times, each attempt "
        "resuming from its checkpoints: the supervisor in the cluster does it at any time, "
        "`pulumi up` while it follows the job (KubeRay RayJob's backoffLimit). An attempt "
        "ended by a preemption (a Ray node it ran on died) is not counted here: see "
        "maxPreemptions. default: 3.",
    )
    max_preemptions: int | None = Field(
        None, ge=0, le=10_000,
        description="Resubmit a run whose attempt was preempted (a Ray node it ran on died "
        "during it: a spot VM reclaimed, a node drained or lost) up to this many times, each "
        "resuming from its checkpoints. default: unset, no limit within deadlineHours "
        "(SkyPilot's managed jobs recover preemptions without limit).",
    )
    stall_minutes: int = Field(
        45, gt=0,
        description="The supervisor stops an attempt that has logged no new training step for "
        "this long (before its first step: since it started) and counts it as a failure. "
        "default: 45, three times the estimated time to the first step.",
    )
    deadline_hours: float = Field(
        48, gt=0,
        description="Wall-clock budget of the run from its first attempt's start, retries "
        "included: the supervisor stops it then and does not retry. default: 48.",
    )
    release_gpus: bool = Field(
        True,
        description="Once the run SUCCEEDED and its model is exported (or exportModel is off), "
        "the supervisor suspends the RayCluster, which deletes its pods and frees the GPU "
        "nodes. A new run (a changed run config) brings them back. default: true; false keeps "
        "the cluster up.",
    )
    keep_checkpoints: int = Field(
        2, le=100,
        description="Checkpoints (global_step_<n>) kept in the run's directory, the newest; older "
        "ones are deleted, those of earlier attempts included. The exported model is kept "
        "apart. At least 2 (see _keep_two). default: 2 (one of the 32B model with its "
        "optimizer state is ~393 GB).",
    )

    @field_validator("keep_checkpoints")
    @classmethod
    def _keep_two(cls, value: int) -> int:
        # verl's register_checkpoint removes the saves beyond max_actor_ckpt_to_keep right after
        # a save (verl/utils/checkpoint/checkpoint_manager.py:167-180 at the pinned ref, called
        # at fsdp_checkpoint_manager.py:395) and the tracker is written only afterwards
        # (verl/trainer/ppo/v1/trainer_base.py:771-775): with 1 kept, a crash in between leaves
        # the tracker naming a step without actor/, which no retry and no export can load.
        if value < 2:
            raise ValueError(
                f"{CONFIG_KEY}.keepCheckpoints={value!r} is too few: keep at least 2, so that "
                "a crash while verl saves a checkpoint still leaves the one its tracker names; "
                "use 2 (the default) or more"
            )
        return value

    @field_validator("dashboard_address")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(
                f"{CONFIG_KEY}.dashboardAddress={value!r} is not an http(s) URL: use e.g. "
                "http://127.0.0.1:8265, or leave it unset to port-forward to the head Service"
            )
        return value


def prune_command(run_dir: str, keep: int) -> str:
    """Shell that deletes all but the newest `keep` checkpoints of the run's directory.

    It runs before every attempt, so the checkpoints of earlier attempts, which verl's own
    pruning never sees (it removes only paths saved by the current process,
    verl/utils/checkpoint/checkpoint_manager.py:59, :152-180 at the pinned ref), are pruned too. The
    step the tracker names (what the attempt resumes from and the export merges) is never
    deleted, even when a newer, partial save of a crashed attempt is among the newest: the
    tracker is read once, and nothing is pruned when it cannot be read or is empty (a transient
    GCS FUSE error must not leave the tracked step unprotected). Errors are ignored: pruning
    must never keep a run from starting.
    """
    step_dir = f"{run_dir}/{CHECKPOINT_STEP_DIR.format('')}"
    return (
        f'if t=$(cat {run_dir}/{CHECKPOINT_TRACKER} 2>/dev/null) && [ -n "$t" ]; then '
        f"for s in $(ls -d {step_dir}* 2>/dev/null | sed 's|.*_||' | sort -n | head -n -{keep}); "
        f'do [ "$s" = "$t" ] || rm -rf {step_dir}$s; done; fi'
    )
