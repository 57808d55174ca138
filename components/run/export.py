"""The model export: verl's merger on the run's last checkpoint, as a Ray job on a GPU worker.

A Ray job that requests no entrypoint resources runs on the head (Ray docs, Key Concepts: the
head "runs ... the Ray driver processes"; ray-project/ray#42436), whose 32 GB the merger
overflows for the 32B model (TRAINING-REVIEW.md finding 1). So the export asks for one GPU and
the memory the merger needs, which only a GPU worker has: it runs there, reads the shards
through that worker's GCS FUSE cache on its local SSDs, and never touches the system node's
boot disk. The need is computed from the model's size and checked against the worker before
the run starts (`memory_problems`).

Both the provider and the supervisor submit it as `<run id>-export-a<N>` (protocol.py): one
winner per attempt, adopted by whoever comes second.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from components.facts.hardware import HardwareProfile
from components.facts.models import DEFAULT_MODEL
from components.supervisor import protocol
from components.run.following import Progress, log_tail, poll
from components.supervisor.protocol import RESUBMITTABLE, TERMINAL, Submission
from components.run.ray_access import RayAccessError, RayJobs, RequestPolicy

# Parameters of the default model (Qwen2.5-32B-Instruct), computed from its shape.
DEFAULT_MODEL_PARAMETERS = DEFAULT_MODEL.parameter_count
# verl's merger loads every rank's fp32 shard at once (verl/model_merger/fsdp_model_merger.py
# :148-157 at b178a3cd5, where it was read; TRAINING-REVIEW-2.md Q5 found the merger's CLI and
# loading unchanged at the pinned ref) plus rank 0's again (:89-94): 4 bytes a parameter,
# (1 + 1/world) times.
# The bf16 copy (:163-181) and model.to_empty (base_model_merger.py:294-306) come after the
# shards are freed and peak lower (2 + 2 bytes a parameter). A quarter more for the interpreter,
# the allocator and torch's own buffers: an estimate, not a measurement.
_FP32_BYTES = 4
_HEADROOM = 1.25
# What is checked: the pod's memory minus the object store's share (30%, at most 200 GB,
# ray/_private/ray_constants.py DEFAULT_OBJECT_STORE_MEMORY_PROPORTION and _MAX_MEMORY_BYTES at
# Ray 2.47). Ray itself offers more: KubeRay passes `--memory=<container limit>` (kuberay
# v1.7.0 controllers/ray/common/pod.go:1407-1411) and Ray then uses that value as the `memory`
# resource (ray-2.47.0 python/ray/_private/resource_spec.py:266-268 subtracts the object store
# only when `memory` is unset). Stricter than Ray, on purpose: the object store still takes
# its share of the pod's RAM.
_OBJECT_STORE_SHARE, _OBJECT_STORE_MAX = 0.3, 200e9
_UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def memory_need(parameters: float, world_size: int) -> int:
    """Bytes the merger needs at its peak for a model of `parameters` saved by `world_size`."""
    return math.ceil(parameters * _FP32_BYTES * (1 + 1 / world_size) * _HEADROOM)


def ray_memory(profile: HardwareProfile) -> int:
    """Bytes of Ray's `memory` resource on one GPU worker pod."""
    total = quantity(profile.worker.memory)
    return int(total - min(total * _OBJECT_STORE_SHARE, _OBJECT_STORE_MAX))


def resources(parameters: float, world_size: int) -> dict[str, float | int]:
    """The export job's entrypoint resources: one GPU and the merger's memory."""
    return {"entrypoint_num_gpus": 1, "entrypoint_memory": memory_need(parameters, world_size)}


def memory_problems(
    profile: HardwareProfile, parameters: float, world_size: int, key: str
) -> list[str]:
    """Why the export could not be scheduled on a GPU worker of this target; [] if it can."""
    need, have = memory_need(parameters, world_size), ray_memory(profile)
    if need <= have:
        return []
    return [
        f"{key}=true: merging a {parameters / 1e9:.1f}B-parameter model saved by {world_size} "
        f"GPUs needs ~{need / 1e9:.0f} GB of RAM (an estimate), but Ray offers "
        f"{have / 1e9:.0f} GB on a {profile.machine_type} worker: set {key} to false and merge "
        "the checkpoint elsewhere"
    ]


def quantity(text: str) -> float:
    """A Kubernetes quantity such as 2800Gi or 32G, in bytes."""
    match = re.fullmatch(r"([0-9.]+)([kMGT]i?|)", text)
    if match is None:
        raise ValueError(f"not a memory quantity: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


# --- Running it ------------------------------------------------------------------------


def export_pending(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """The run SUCCEEDED, an export is wanted and has not succeeded yet."""
    return (
        olds.get("status") == "SUCCEEDED"
        and bool(news.get("export_entrypoint"))
        and olds.get("export_status") != "SUCCEEDED"
    )


def export_status(jobs: RayJobs, props: dict[str, Any]) -> str | None:
    """The newest export attempt's status in Ray, or what the state last said if Ray has none."""
    if not props.get("export_entrypoint"):
        return None
    found = protocol.attempts(jobs.list_jobs(), protocol.export_run(jobs.submission_id))
    return found[max(found)]["status"] if found else props.get("export_status")


def export_submission(props: dict[str, Any]) -> Submission:
    """The export job as submitted by the provider and the supervisor alike."""
    return Submission(
        props["export_entrypoint"], props["runtime_env"],
        {**props["metadata"], protocol.ROLE_KEY: "model-export"},
        props.get("export_resources") or None,
    )


def run_export(
    jobs: RayJobs, props: dict[str, Any], policy: RequestPolicy, progress: Progress,
    known: int | None = None,
) -> str:
    """Run verl's model merger on the run's last checkpoint as a Ray job, once per run.

    Its attempts are `<run id>-export-a<N>` (protocol.py): a live or SUCCEEDED one is adopted,
    after a FAILED or STOPPED one (or none, `known` being the newest the supervisor's record
    knows when the head's job table is gone) the next is submitted; the merger writes to a
    scratch directory and renames it into place. It requests a GPU and the merger's memory.
    """
    run = protocol.export_run(jobs.submission_id)
    found = protocol.attempts(jobs.list_jobs(), run)
    newest = max(found, default=None)
    progress.say(f"SUCCEEDED; exporting the model to {props.get('model_uri') or 'the run dir'}")
    if newest is not None and found[newest]["status"] not in RESUBMITTABLE:
        number = newest
    else:
        number = max(n for n in (newest, known, -1) if n is not None) + 1
        why = f"export {found[newest]['status']}" if newest is not None else None
        if not protocol.submit_attempt(jobs.for_id, run, number, export_submission(props), why):
            progress.say(f"adopted export attempt {number}")
    attempt = jobs.for_id(protocol.attempt_id(run, number))
    info = poll(attempt, TERMINAL, time.monotonic() + props["timeout_s"], policy)
    if info["status"] != "SUCCEEDED":
        raise RayAccessError(
            f"the run SUCCEEDED, but {attempt.where()} exporting its model ended "
            f"{info['status']} ({info.get('message')}). Last log lines:\n"
            f"{log_tail(attempt, info)}\nThe checkpoints are intact; fix the cause, then run "
            "`pulumi up --refresh` to export again, or set verl-gke:job.exportModel to false"
        )
    progress.say(f"model exported to {props.get('model_uri')}")
    return info["status"]
