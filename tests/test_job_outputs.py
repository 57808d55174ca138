"""The job's outputs are one tuple (components/run/job_outputs.py JOB_OUTPUTS): the GrpoJob
component's attributes and registered outputs, the provider's computed outputs and the stack's
`job` output are derived from it, and the outputs contract (schemas/stack-outputs.schema.json)
and GrpoJob's typed attributes are held to it here."""

from __future__ import annotations

import json

from components.run import grpo_job, job_provider
from components.run.job_outputs import INPUT, JOB_OUTPUTS, PROVIDER, PROVIDER_OUTPUTS
from tests.conftest import rendered
from tools.plan import ROOT

SCHEMA = json.loads((ROOT / "schemas" / "stack-outputs.schema.json").read_text())


def test_the_outputs_contract_names_every_job_output_and_no_other():
    """schemas/stack-outputs.schema.json's `job` object has a property for each output of the
    tuple and none more (it forbids the others), and requires only outputs of it."""
    job = SCHEMA["properties"]["job"]
    assert list(job["properties"]) == [output.key for output in JOB_OUTPUTS]
    assert set(job["required"]) <= set(job["properties"])
    assert job["additionalProperties"] is False


def test_grpo_job_types_each_output_as_an_attribute():
    """GrpoJob's annotated attributes, its typed face, are the tuple's outputs (and the spec it
    hands to the supervisor): an output added to the tuple is typed there too."""
    annotated = set(grpo_job.GrpoJob.__annotations__) - {"supervision_spec"}
    assert annotated == {output.name for output in JOB_OUTPUTS}


def test_the_provider_computes_the_provider_outputs_and_echoes_the_inputs():
    """The run resource's properties: the provider's OUTPUT_KEYS are the tuple's PROVIDER
    outputs (and Ray's message), and each INPUT output is one of its inputs."""
    assert job_provider.OUTPUT_KEYS == PROVIDER_OUTPUTS
    provider = {o.name for o in JOB_OUTPUTS if o.source == PROVIDER}
    assert set(job_provider.OUTPUT_KEYS) == provider | {"message"}
    assert {o.name for o in JOB_OUTPUTS if o.source == INPUT} <= set(job_provider.INPUT_KEYS)


def test_the_stack_exports_every_job_output_with_the_components_values():
    """A rendered stack's `job` output holds every output of the tuple, by its key, with the
    component's values (the run's inputs where the output echoes one, the run's directory)."""
    _, recording = rendered("a4", "standard")
    exported = recording.plain_outputs()["job"]
    assert list(exported) == [output.key for output in JOB_OUTPUTS]
    run = recording.one("pulumi-python:dynamic/verl-gke:GrpoRun", "grpo-run").plain_inputs
    assert exported["runDir"] == run["run_dir"]
    assert (exported["entrypoint"], exported["submissionId"]) == (
        run["entrypoint"], run["submission_id"])
