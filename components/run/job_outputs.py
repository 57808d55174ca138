"""The GRPO job's outputs, listed once.

Each is a name and where its value comes from: `GrpoJob` (components/run/grpo_job.py) sets
its attributes and registers its outputs from this tuple, the stack's `job` output
(`__main__.py`) is the component's outputs as they are, and the job's provider
(components/run/job_provider.py) computes exactly the `provider` ones (`PROVIDER_OUTPUTS`).
schemas/stack-outputs.schema.json, which dashboards read, is held to it by
tests/test_job_outputs.py, as GrpoJob's typed attributes are.

An output is added here (and to the schema), never renamed: the `job` output is a contract
(docs/observability.md).
"""

from __future__ import annotations

from dataclasses import dataclass

PROVIDER = "provider"  # computed by GrpoJobProvider: Ray's view of the run
INPUT = "input"  # one of the run resource's inputs, echoed back as its output
COMPONENT = "component"  # computed by GrpoJob from the config, a plain value


@dataclass(frozen=True)
class JobOutput:
    name: str  # GrpoJob's attribute, the run resource's property
    key: str  # the component's output and the stack's `job.<key>` (camelCase)
    source: str  # PROVIDER, INPUT or COMPONENT


JOB_OUTPUTS = (
    JobOutput("submission_id", "submissionId", INPUT),
    JobOutput("status", "status", PROVIDER),
    JobOutput("start_time", "startTime", PROVIDER),
    JobOutput("end_time", "endTime", PROVIDER),
    JobOutput("dashboard_path", "dashboardPath", PROVIDER),
    JobOutput("entrypoint", "entrypoint", INPUT),
    JobOutput("metrics", "metrics", PROVIDER),
    JobOutput("checkpoint_uri", "checkpointUri", INPUT),
    JobOutput("run_dir", "runDir", COMPONENT),
    JobOutput("model_uri", "modelUri", INPUT),
    JobOutput("export_status", "exportStatus", PROVIDER),
    JobOutput("attempts", "attempts", PROVIDER),
    JobOutput("failures", "failures", PROVIDER),
    JobOutput("preemptions", "preemptions", PROVIDER),
    JobOutput("last_failure", "lastFailure", PROVIDER),
    JobOutput("state", "state", PROVIDER),
    JobOutput("first_step_s", "firstStepSeconds", PROVIDER),
    # When this `up` reached each milestone of the critical-path model (components/run/
    # timeline.py MILESTONES), what tools/critical_path.py --measured reads.
    JobOutput("timeline", "timeline", PROVIDER),
)

# What the provider computes: the PROVIDER outputs, and Ray's `message` for the last status,
# which the provider keeps in the state and no output shows.
PROVIDER_OUTPUTS = (*(o.name for o in JOB_OUTPUTS if o.source == PROVIDER), "message")
