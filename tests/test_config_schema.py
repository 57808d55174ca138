"""schemas/stack-config.schema.json: generated from the config's models, current, and right
about what the program accepts and refuses (the forms; the program checks the meaning)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from components.schema import config
from tools import config_schema, plan

ROOT = plan.ROOT


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(config_schema.SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator, values: dict) -> list[str]:
    """Each schema error as "<path>: <message>" (the path names the key; the message may not)."""
    document = {"config": {"verl-gke:target": "a4", **values}}
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_committed_schema_is_what_the_models_generate():
    """Change a model and forget `python -m tools.config_schema`: this fails (as does --check)."""
    assert config_schema.SCHEMA.read_text() == config_schema.rendered()
    assert config_schema.main(["--check"]) == 0


def test_every_key_the_program_reads_is_in_the_schema(validator):
    """Each verl-gke: key the loader knows, and gcp:project, with its model's description."""
    properties = validator.schema["properties"]["config"]["properties"]
    assert set(properties) == {"gcp:project", *(f"verl-gke:{k}" for k in config.KEYS)}
    field = config.StackConfig.model_fields["gpu_nodes"]
    assert properties["verl-gke:gpuNodes"]["description"] == field.description


@pytest.mark.parametrize("stack", ["a4", "a3u", "a4x"])
def test_the_shipped_stack_files_validate(validator, stack):
    assert list(validator.iter_errors(yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text()))) == []


@pytest.mark.parametrize("values", [
    {"verl-gke:gpuNodes": "4"},  # what `pulumi config set` writes
    {"verl-gke:gpuNodes": 4, "verl-gke:deletionProtection": "false"},
    {"verl-gke:clusterName": ""},  # Pulumi.yaml's "unset"
    {"verl-gke:hfToken": {"secure": "AAABAHh0Z...=="}},
    {"verl-gke:job": {"logger": ["console", "tensorboard"], "rolloutN": 8}},
    {"verl-gke:job": {"logger": "[console,wandb]"}},
    {"gcp:region": "us-central1", "kubernetes:context": "x"},  # other namespaces
])
def test_forms_the_program_accepts_validate(validator, values):
    assert errors(validator, values) == []


@pytest.mark.parametrize("values, where", [
    ({"verl-gke:gpuNodes": "two"}, "gpuNodes"),
    ({"verl-gke:gpuNode": "2"}, "gpuNode"),  # a typo
    ({"verl-gke:job.rolloutN": 8}, "job.rolloutN"),  # a flat key
    ({"verl-gke:hfToken": "hf_plain"}, "hfToken"),  # a plain-text secret
    ({"verl-gke:target": "a5"}, "target"),
    ({"verl-gke:job": {"rolloutn": 8}}, "rolloutn"),
    ({"verl-gke:job": {"rollout_n": 8}}, "rollout_n"),  # snake_case: no alias on either side
])
def test_forms_the_program_refuses_are_flagged(validator, values, where):
    found = errors(validator, values)
    assert any(where in error for error in found), found
    # ...and the program refuses the same config.
    raw = {"gcp:project": "my-proj", "verl-gke:region": "us-central1", "verl-gke:zone":
           "us-central1-b", "verl-gke:reservation": "r", "verl-gke:hfToken": "hf_x",
           "verl-gke:target": "a4"}
    raw.update({k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in values.items()})
    secret = set() if values.get("verl-gke:hfToken") == "hf_plain" else {"verl-gke:hfToken"}
    with pytest.raises(config.ConfigError):
        config.load(raw, secret)
