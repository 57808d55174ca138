"""A project renamed by `pulumi new` (Pulumi.yaml's `name:`) reads, checks and names every key
under its own name: the Pulumi CLI qualifies a bare key with the project's name
(https://www.pulumi.com/docs/iac/concepts/config/, "Configuration Keys"), so the template's
`target` is `<name>:target` there (components/forms/pulumi_forms.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from pulumi.runtime import settings as pulumi_settings

from components.forms import pulumi_forms
from components.schema import config
from components.schema.config import ConfigError
from tools import config_schema, mockrun, plan

ROOT = plan.ROOT
NAME = "my-grpo"
GRPO_RUN = "pulumi-python:dynamic/verl-gke:GrpoRun"  # a type token: not renamed


@pytest.fixture
def renamed(tmp_path, monkeypatch):
    """A copy of the project named NAME: Pulumi.yaml's `name:` and the a4 stack file's keys
    renamed, as `pulumi new` with another project name writes them; `plan` points at it."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    project["name"] = NAME
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    stack = yaml.safe_load((ROOT / "Pulumi.a4.yaml").read_text())
    stack["config"] = {k.replace("verl-gke:", f"{NAME}:", 1): v for k, v in stack["config"].items()}
    (tmp_path / "Pulumi.a4.yaml").write_text(yaml.safe_dump(stack))
    (tmp_path / "__main__.py").symlink_to(ROOT / "__main__.py")
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    yield tmp_path
    # A mock run leaves its project in the SDK's settings (pulumi/runtime/settings.py SETTINGS),
    # where messages named outside `load` find it: leave the template's name there, as every
    # other mock run of this project does (tools/mockrun.py run, tools/plan.py run_program).
    pulumi_settings._set_project(pulumi_forms.TEMPLATE_PROJECT)


def _stack_file(root: Path, name: str, config_text: str) -> Path:
    path = root / f"Pulumi.{name}.yaml"
    path.write_text("config:\n" + config_text)
    return path


def test_a_renamed_project_plans_with_the_keys_under_its_name(renamed):
    """The whole program plans from `<name>:` keys alone (target, and a job field that reaches
    the run), where it used to stop at "verl-gke:target is required"."""
    _stack_file(renamed, "a4", f"  {NAME}:target: a4\n  {NAME}:job:\n    totalEpochs: 3\n")
    inputs, recording = plan.run_program("a4")
    assert f"{NAME}:zone" in inputs.example_keys  # the plan's example values: under the name too
    [run] = recording.of_type(GRPO_RUN)
    assert "trainer.total_epochs=3" in json.dumps(run.plain_inputs)
    # What the program writes for later (the guard's advice on destroy) names the key too.
    [guard] = recording.of_type("pulumi-python:dynamic/verl-gke:DeletionProtection")
    assert guard.plain_inputs["to_destroy"].startswith(f"pulumi config set {NAME}:deletionProtection false")


def test_a_renamed_projects_preflight_names_its_keys(renamed):
    """A problem found at preview (the reservation holds fewer VMs than the nodes) names the
    keys under the project's name: the program's own, read with `pulumi.get_project()`."""
    small = {**plan.example_invokes({f"{NAME}:target": "a4", f"{NAME}:region": "us-central1"})
             [mockrun.GET_RESERVATION]}
    small["specificReservations"] = [{**small["specificReservations"][0], "count": 1}]
    with pytest.raises(ConfigError) as error:
        plan.run_program("a4", invokes={mockrun.GET_RESERVATION: small})
    text = "\n".join(error.value.problems)
    assert f"{NAME}:reservation = 'example-reservation' holds 1 VMs, fewer than {NAME}:gpuNodes" in text


def test_a_renamed_projects_errors_name_its_own_keys(renamed):
    """Each kind of problem names the key as the renamed project spells it: a value invalid on
    its own, a misspelt job field (and the command that fixes it), a model's own check, a check
    across keys; and a key left under the template's name is refused with its new name, not
    ignored as another namespace's."""
    _stack_file(renamed, "a4", (
        f"  {NAME}:target: a4\n  {NAME}:deletionProtection: maybe\n"
        f"  {NAME}:job:\n    totalEpoch: 3\n    runName: Not_A_Name\n"
        f"  {NAME}:clusterMode: autopilot\n  {NAME}:reservation: my-reservation\n"
        "  verl-gke:gpuNodes: 4\n"
    ))
    with pytest.raises(ConfigError) as error:
        plan.run_program("a4")
    text = "\n".join(error.value.problems)
    assert f"{NAME}:deletionProtection = 'maybe' is invalid" in text
    assert f"{NAME}:job.totalEpoch = 3 is not a setting of {NAME}:job: did you mean totalEpochs?" in text
    assert f"`pulumi config set --path '{NAME}:job.totalEpochs' 3`" in text
    assert f"{NAME}:job.runName='Not_A_Name'" in text  # run.py's validator
    assert f"{NAME}:reservation = 'my-reservation' is set, but Autopilot" in text
    assert f"verl-gke:gpuNodes is a key of the project verl-gke, but this project is {NAME}" in text
    assert f"`pulumi config set {NAME}:gpuNodes" in text
    assert "verl-gke:" not in text.replace("verl-gke:gpuNodes", "")


def test_the_tools_read_the_renamed_projects_keys(renamed):
    """The offline plan's own checks (before the program runs) name `<name>:` keys too."""
    _stack_file(renamed, "bare", "  gcp:project: my-project\n")
    with pytest.raises(plan.MissingConfig, match=rf"missing configuration values: {NAME}:target"):
        plan.stack_inputs("bare")
    assert plan.stack_target("a4") == "a4"


def test_a_renamed_project_gets_a_schema_of_its_own_keys(renamed):
    """`python -m tools.config_schema` in the renamed project writes its keys: its stack file
    validates, `target` is required under the new name, and an unknown key of it is refused."""
    schema = config_schema.stack_config_schema()  # the name from plan.ROOT's Pulumi.yaml
    validator = jsonschema.Draft202012Validator(schema)
    stack = yaml.safe_load((renamed / "Pulumi.a4.yaml").read_text())
    assert list(validator.iter_errors(stack)) == []
    assert not validator.is_valid({"config": {"verl-gke:target": "a4"}})  # required: my-grpo:target
    assert not validator.is_valid({"config": {f"{NAME}:target": "a4", f"{NAME}:gpuNode": 4}})
    assert validator.is_valid({"config": {f"{NAME}:target": "a4", "gcp:region": "us-central1"}})


def test_load_reads_the_namespace_it_is_given():
    """config.load outside a program: keys under the `project` it is given, the template's
    name by default (what every other unit test relies on)."""
    raw = {"gcp:project": "my-proj", f"{NAME}:target": "a4x", f"{NAME}:region": "us-central1",
           f"{NAME}:zone": "us-central1-b", f"{NAME}:reservation": "r", f"{NAME}:staging":
           '{"skip": true}'}
    assert config.load(raw, project=NAME).target.value == "a4x"
    with pytest.raises(ConfigError, match="verl-gke:target is required"):
        config.load(raw)
