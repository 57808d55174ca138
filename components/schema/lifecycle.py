"""How a GRPO run is executed and followed, as opposed to what it trains (`components/schema/run.py`).

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

CONFIG_KEY = "verl-gke:job"


class WaitFor(str, enum.Enum):
    """How far `pulumi up` follows the job before reporting it created."""

    SUBMITTED = "submitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"


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
        WaitFor.RUNNING,
        description="How far `pulumi up` follows the job: submitted, running or succeeded.",
    )
    timeout_minutes: int = Field(
        30, gt=0, description="How long `pulumi up` waits for `waitFor` before failing."
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
        0, ge=0, le=100,
        description="While `pulumi up` follows the job (waitFor running or succeeded), resubmit "
        "a job that fails up to this many times, each resuming from its checkpoints "
        "(KubeRay RayJob's backoffLimit). default: 0.",
    )

    @field_validator("dashboard_address")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(
                f"{CONFIG_KEY}.dashboardAddress={value!r} is not an http(s) URL: use e.g. "
                "http://127.0.0.1:8265, or leave it unset to port-forward to the head Service"
            )
        return value
