"""The stack config: every key has a good and a bad value, and every problem is explained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pulumi
import pytest
import yaml

from components.schema import config
from components.schema.config import ConfigError, StackConfig
from components.schema.choices import Capacity
from components.facts.hardware import Target
from tools import plan

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_TESTTOKENVALUE0123456789"

BASE = {
    "gcp:project": "my-proj",
    "verl-gke:target": "a4",
    "verl-gke:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "my-res",
    "verl-gke:hfToken": TOKEN,
}


SECRET_KEYS = {"verl-gke:hfToken"}


def load(**changes: str | None) -> StackConfig:
    raw = dict(BASE)
    for key, value in changes.items():
        full = key if key == "gcp:project" else f"verl-gke:{key}"
        if value is None:
            raw.pop(full, None)
        else:
            raw[full] = value
    return config.load(raw, SECRET_KEYS)


def problems(**changes: str | None) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load(**changes)
    return error.value.problems


def test_valid_config_derives_the_rest_from_the_target():
    """A minimal stack file yields the target's hardware and names derived from the cluster."""
    cfg = load()
    assert cfg.target is Target.A4
    assert cfg.nodes == 2 and cfg.hardware.gpus_per_node == 8
    assert cfg.cluster == "verl-dev"  # config.load's default stack
    assert cfg.bucket == "verl-dev-my-proj"
    assert (cfg.gvnic_prefix, cfg.rdma_prefix) == ("verl-dev-gvnic", "verl-dev-rdma")
    assert cfg.provisioning is Capacity.RESERVATION
    assert cfg.deletion_protection is True and cfg.delete_bucket_on_destroy is False
    assert load(target="a4x").nodes == 4


def test_cli_strings_are_converted():
    """The CLI passes every value as a string; numbers and booleans still validate."""
    cfg = load(gpuNodes="4", deletionProtection="false")
    assert cfg.nodes == 4 and cfg.deletion_protection is False


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("target", "a5", "use a4 (B200), a3u (H200) or a4x (GB200)"),
        ("clusterMode", "serverless", "use standard or autopilot"),
        ("provisioning", "ondemand", "use reservation, spot or flex-start"),
        ("gpuNodes", "two", "use a whole number of nodes"),
        ("clusterName", "Verl_Cluster", "lowercase letters"),
        ("namespace", "Team A", "Kubernetes name"),
        ("serviceAccount", "ray@sa", "Kubernetes name"),
        ("deletionProtection", "maybe", "use true or false"),
        ("deleteBucketOnDestroy", "yes please", "use true or false"),
        ("maintenanceExclusionStart", "next week", "RFC 3339"),
        ("gvnicNetworkPrefix", "GV", "see its description"),
        ("rdmaNetworkPrefix", "rdma_", "see its description"),
        ("region", "US Central", "use a region such as us-central1"),
        ("zone", "b", "use a zone such as us-central1-b"),
    ],
)
def test_bad_value_names_key_value_and_fix(key, value, expected):
    """Each bad value is reported with its full key, the value as given and how to fix it."""
    [message] = problems(**{key: value})
    assert message.startswith(f"verl-gke:{key} = {value!r} is invalid")
    assert expected in message


def test_bad_project_id_is_explained():
    """gcp:project takes the id; a display name is refused with the command that prints the id."""
    [message] = problems(**{"gcp:project": "My Project"})
    assert message.startswith("gcp:project = 'My Project' is invalid")
    assert "gcloud config get project" in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"zone": "europe-west4-b"}, "is not in verl-gke:region = 'us-central1'"),
        ({"reservation": None}, "verl-gke:reservation is not set"),
        ({"reservation": "Bad Name"}, "is not a reservation name"),
        ({"gpuNodes": "-1"}, "verl-gke:gpuNodes = -1 is out of range for a4-highgpu-8g: use 1 to 252"),
        ({"gpuNodes": "253"}, "use 1 to 252 (each node takes an address in every /24 node subnet"),
        ({"target": "a4x", "gpuNodes": "19"}, "use 1 to 18 (one NVL72 domain"),
        ({"target": "a4x", "clusterMode": "autopilot"}, "A4X needs a Standard cluster"),
        ({"target": "a4x", "rdmaNetworkPrefix": "x"}, "uses DRANET"),
        ({"bucketName": "UPPER"}, "is not a valid bucket name"),
        ({"hfToken": None}, "verl-gke:hfToken is not set"),
        ({"hfToken": ""}, "verl-gke:hfToken is not set"),
        ({"reservation": ""}, "verl-gke:reservation is not set"),
        ({"clusterMode": "autopilot"}, "Autopilot places GPU pods on Spot capacity"),
        ({"clusterMode": "autopilot", "reservation": None, "provisioning": "flex-start"},
         "verl-gke:provisioning = 'flex-start' is set, but Autopilot"),
    ],
)
def test_cross_field_problems(changes, expected):
    """Checks spanning keys (or a key and the hardware) name both sides and the fix."""
    assert any(expected in p for p in problems(**changes)), problems(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"provisioning": "spot", "reservation": None},
        {"provisioning": "flex-start", "reservation": None},
        {"clusterMode": "autopilot", "reservation": None},
        {"clusterMode": "autopilot", "reservation": ""},
        {"reservation": "my-res/reservationBlocks/block-1"},
        {"target": "a4x", "gpuNodes": "16"},
        {"hfToken": None, "staging": '{"skip": true}'},
    ],
)
def test_accepted_alternatives(changes):
    """Spot, flex-start, Autopilot need no reservation; blocks, 16 A4X trays, own buckets are fine."""
    load(**changes)


def test_unknown_key_suggests_the_closest():
    """A typo is rejected, named, and answered with the key that was probably meant."""
    [message] = problems(gpuNode="3")
    assert message.startswith("verl-gke:gpuNode is not a setting of this program.")
    assert "Did you mean `verl-gke:gpuNodes`?" in message
    assert "pulumi config rm verl-gke:gpuNode" in message


def test_other_namespaces_are_left_to_their_owners():
    """Provider settings (kubernetes:..., a gcp:region that agrees) are not this program's to
    reject."""
    cfg = config.load({**BASE, "gcp:region": "us-central1", "kubernetes:context": "x"}, SECRET_KEYS)
    assert cfg.region == "us-central1"


@pytest.mark.parametrize("provider_key, ours", [("gcp:region", "region"), ("gcp:zone", "zone")])
def test_a_provider_region_or_zone_that_disagrees_is_refused_not_ignored(provider_key, ours):
    """gcp:region / gcp:zone are a Pulumi habit; the program places everything by its own keys,
    so one that disagrees would be silently ignored: it is refused, with both commands."""
    with pytest.raises(ConfigError) as error:
        config.load({**BASE, provider_key: "europe-west4-a"}, SECRET_KEYS)
    [message] = error.value.problems
    assert message.startswith(f"{provider_key} = 'europe-west4-a' but verl-gke:{ours} = ")
    assert f"pulumi config rm {provider_key}" in message


@pytest.mark.parametrize("flat, value, command", [
    ("job.rolloutN", "8", "pulumi config set --path 'verl-gke:job.rolloutN' 8"),
    # a near miss of the nested field gets the field that was meant
    ("job.rollout_n", "8", "pulumi config set --path 'verl-gke:job.rolloutN' 8"),
    ("staging.skip", "true", "pulumi config set --path 'verl-gke:staging.skip' true"),
    ("labels.team", "ml", "pulumi config set --path 'verl-gke:labels.team' ml"),
])
def test_a_flat_key_that_meant_a_nested_one_gets_the_path_command(flat, value, command):
    """`pulumi config set verl-gke:job.rolloutN 8` without --path stores one flat key: the
    message gives the `--path` command that sets the nested field, not just "remove it"."""
    [message] = problems(**{flat: value})
    assert message.startswith(f"verl-gke:{flat} is one flat key")
    assert f"pulumi config rm verl-gke:{flat}" in message
    assert command in message


def test_logger_takes_a_yaml_list():
    """`job.logger: [console, tensorboard]` (a YAML list, or `--path job.logger[0]`) is the same
    run as Hydra's `[console,tensorboard]`; a list with an unknown tracker is still refused."""
    as_list = load(job='{"logger": ["console", "tensorboard"]}')
    as_hydra = load(job='{"logger": "[console,tensorboard]"}')
    assert as_list.job.loggers == ["console", "tensorboard"]
    assert as_list.job == as_hydra.job
    [message] = problems(job='{"logger": ["console", "slack"]}')
    assert "verl-gke:job.logger" in message and "slack" in message


def test_a_logger_list_from_the_stack_file_reaches_the_program(tmp_path):
    """The whole path: a stack file with `logger: [console, tensorboard]` plans, and the job's
    trainer.logger is verl's list."""
    stack_file = tmp_path / "Pulumi.lists.yaml"
    stack_file.write_text(
        "config:\n  verl-gke:target: a4\n  verl-gke:job:\n    logger: [console, tensorboard]\n"
    )
    _, recording = plan.run_program("a4", config_file=stack_file)
    [run] = recording.of_type("pulumi-python:dynamic/verl-gke:GrpoRun")
    assert "trainer.logger=[console,tensorboard]" in json.dumps(run.plain_inputs)


def test_a_message_quoting_an_example_value_says_the_user_did_not_type_it(tmp_path):
    """Plan mode fills unset site facts with example values; a problem that quotes one (here the
    example zone, outside the region the user set) says so and how to set the real one."""
    stack_file = tmp_path / "Pulumi.half.yaml"
    stack_file.write_text("config:\n  verl-gke:target: a4\n  verl-gke:region: europe-west4\n")
    with pytest.raises(ConfigError) as error:
        plan.run_program("a4", config_file=stack_file)
    [message] = error.value.problems
    assert "'us-central1-b' is not in verl-gke:region = 'europe-west4'" in message
    assert ("note: verl-gke:zone = 'us-central1-b' is the offline plan's example value, not "
            "yours: set yours with `pulumi config set verl-gke:zone <value>`") in message
    assert "verl-gke:region = 'europe-west4' is the offline plan's example" not in message


def test_a_stack_file_that_imports_an_esc_environment_is_refused(tmp_path):
    """ESC environments hold config the offline plan cannot read: refused, named, with the way
    to plan anyway, instead of a plan that silently lacks their values."""
    stack_file = tmp_path / "Pulumi.esc.yaml"
    stack_file.write_text("environment:\n  - myorg/gpu-site\nconfig:\n  verl-gke:target: a4\n")
    with pytest.raises(plan.StackFileError, match=r"imports the Pulumi ESC environment\(s\) "
                       r"'myorg/gpu-site'.*--config-file <copy>"):
        plan.stack_inputs("esc", config_file=stack_file)


def test_a_provider_region_without_ours_is_asked_for_by_name(tmp_path):
    """gcp:region set, verl-gke:region not: the plan does not paper over it with an example
    region; like the CLI it asks for verl-gke:region, and says which value the user meant."""
    stack_file = tmp_path / "Pulumi.twin.yaml"
    stack_file.write_text("config:\n  verl-gke:target: a4\n  gcp:region: europe-west4\n")
    with pytest.raises(plan.MissingConfig, match=r"verl-gke:region.*gcp:region is set, but this "
                       r"program reads verl-gke:region: `pulumi config set verl-gke:region "
                       r"europe-west4`"):
        plan.stack_inputs("twin", config_file=stack_file)


def test_missing_required_keys_are_all_reported():
    """Missing project, region and zone come back together, each with the command to set it."""
    raw = {"verl-gke:target": "a4"}
    with pytest.raises(ConfigError) as error:
        config.load(raw, SECRET_KEYS)
    assert any("gcp:project is not set" in p for p in error.value.problems)
    raw["gcp:project"] = "p"
    with pytest.raises(ConfigError) as error:
        config.load(raw, SECRET_KEYS)
    messages = "\n".join(error.value.problems)
    assert "verl-gke:region is required: set it with `pulumi config set verl-gke:region" in messages
    assert "verl-gke:zone is required" in messages


def test_all_problems_of_one_config_are_reported_together():
    """Three independent mistakes give three messages, not one at a time."""
    found = problems(zone="europe-west4-b", bucketName="UPPER", reservation=None)
    assert len(found) == 3


def test_config_error_is_reported_without_a_traceback():
    """ConfigError is a pulumi.RunError, which the Pulumi CLI prints without a stack trace."""
    assert issubclass(ConfigError, pulumi.RunError)


def test_the_token_is_never_echoed():
    """Even a rejected config never repeats the Hugging Face token."""
    with pytest.raises(ConfigError) as error:
        load(zone="europe-west4-b", hfToken=TOKEN)
    assert TOKEN not in str(error.value)
    assert TOKEN not in repr(load())


def test_pulumi_yaml_declares_every_key_as_the_cli_requires():
    """Pulumi.yaml declares every key with a valid type, a description and the program's
    default; only keys every stack must set lack a default (the CLI requires those). An object
    defaults to {}, which the program reads as every field's default."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert set(declared) == set(config.KEYS)
    for key, spec in declared.items():
        if key in config.OBJECT_KEYS:
            assert (spec["type"], spec["default"]) == ("object", {}), key
            assert spec.get("description"), key
            field = StackConfig.model_fields[config.KEYS[key]]
            default = field.get_default(call_default_factory=True)
            assert getattr(default, "model_dump", lambda: default)() == (
                type(default).model_validate({}).model_dump() if hasattr(default, "model_dump") else {}
            ), key
            continue
        assert spec["type"] in ("string", "integer", "boolean", "array"), key
        assert spec.get("description"), key
        assert not ("secret" in spec and "default" in spec), key  # pulumi/pulumi#21865
        if "default" not in spec:
            assert key in ("target", "region", "zone"), f"{key} would be required by the CLI"
            continue
        field = StackConfig.model_fields[config.KEYS[key]]
        default = field.get_default(call_default_factory=True)
        default = getattr(default, "value", default)
        if default is None:  # derived: the declared default must read as "unset"
            assert str(spec["default"]) in ("", config.UNSET.get(key)), key
        else:
            assert spec["default"] == default, key


def test_a_plain_text_token_is_refused():
    """The token must be set with --secret: a plain-text one is named and the fix given."""
    with pytest.raises(ConfigError) as error:
        config.load(BASE, secret_keys=())
    [message] = error.value.problems
    assert "verl-gke:hfToken is stored in plain text" in message
    assert "pulumi config set --secret verl-gke:hfToken" in message
    assert TOKEN not in message


def test_stack_files_hold_only_the_target():
    """Hardware facts live in code: each stack file sets its target and nothing else."""
    for stack in ("a4", "a3u", "a4x"):
        values = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
        assert values == {"verl-gke:target": stack}


def test_plan_command_reports_config_errors_with_exit_2():
    """`make plan` on a bad config prints the problems, no traceback, and exits 2."""
    result = subprocess.run(
        [sys.executable, "-m", "tools.plan", "--stack", "a4x", "--mode", "autopilot", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "A4X needs a Standard cluster" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_plan_refuses_to_run_without_what_the_cli_requires(tmp_path, monkeypatch):
    """Like the Pulumi CLI, the offline plan stops when a key without default is not set."""
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.bare.yaml").write_text("config: {}\n")
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    with pytest.raises(plan.MissingConfig, match=r"missing configuration values: verl-gke:target"):
        plan.stack_inputs("bare")
    (tmp_path / "Pulumi.bare.yaml").write_text("config:\n  verl-gke:target: a4\n")
    inputs = plan.stack_inputs("bare")  # region, zone, project: example values in plan mode
    assert inputs.config["verl-gke:gpuNodes"] == "0"  # declared defaults applied, as strings


def test_the_near_miss_the_config_page_describes_is_what_the_program_says():
    """docs/config.md says a flat `verl-gke:job.rollout_n` is not corrected silently but gets
    the field that was meant and the command with it: the program's message holds both."""
    page = (ROOT / "docs/config.md").read_text()
    assert "`did you mean 'rolloutN'?`" in page
    assert "`pulumi config set --path 'verl-gke:job.rolloutN' 8`" in page
    with pytest.raises(ConfigError) as error:
        config.load({**BASE, "verl-gke:job.rollout_n": "8"}, SECRET_KEYS)
    [message] = error.value.problems
    assert "did you mean 'rolloutN'?" in message
    assert "pulumi config set --path 'verl-gke:job.rolloutN' 8" in message


def test_a_stack_file_with_four_kinds_of_mistake_gets_all_four_in_one_plan(tmp_path):
    """One run of the plan lists every problem of a stack file: an unknown key (with the key
    meant), a value invalid on its own, a misspelt `job` field (with the field meant), and a
    check across keys (Autopilot with a reservation) on what did validate, together."""
    stack_file = tmp_path / "Pulumi.mistakes.yaml"
    stack_file.write_text(
        "config:\n  verl-gke:target: a4\n  verl-gke:gpuNode: 4\n"
        "  verl-gke:deletionProtection: maybe\n  verl-gke:clusterMode: autopilot\n"
        "  verl-gke:reservation: my-reservation\n  verl-gke:job:\n    totalEpoch: 3\n"
    )
    with pytest.raises(ConfigError) as error:
        plan.run_program("mistakes", config_file=stack_file)
    problems = error.value.problems
    assert len(problems) == 4, problems
    unknown, invalid, field, across = problems
    assert unknown.startswith("verl-gke:gpuNode is not a setting") and "`verl-gke:gpuNodes`" in unknown
    assert invalid.startswith("verl-gke:deletionProtection = 'maybe' is invalid") and "use true or false" in invalid
    assert field.startswith("verl-gke:job.totalEpoch = 3 is not a setting of verl-gke:job: did you mean totalEpochs?")
    assert "`pulumi config set --path 'verl-gke:job.totalEpochs' 3`" in field
    assert across.startswith("verl-gke:reservation = 'my-reservation' is set, but Autopilot")


@pytest.mark.parametrize("job, meant", [
    ({"rollout_n": 16}, "rolloutN"),  # verl's snake_case name: refused, not an alias
    ({"trainbatchsize": 64}, "trainBatchSize"),
    ({"totalEpoch": 3}, "totalEpochs"),
])
def test_a_misspelt_job_field_gets_the_field_that_was_meant(job, meant):
    """A nested field the model does not have is refused with the camelCase field meant and the
    commands that rename it; snake_case names are not accepted silently (the JSON Schema
    refuses them too: tests/test_config_schema.py)."""
    with pytest.raises(ConfigError) as error:
        config.load({**BASE, "verl-gke:job": json.dumps(job)}, SECRET_KEYS)
    [message] = error.value.problems
    [(typed, value)] = job.items()
    assert f"did you mean {meant}?" in message
    assert f"`pulumi config rm --path 'verl-gke:job.{typed}'`" in message
    assert f"`pulumi config set --path 'verl-gke:job.{meant}' {value}`" in message


def test_a_plain_text_token_is_one_problem_not_two():
    """A token stored in plain text is reported as such, and the checks across keys count it as
    set (no second "hfToken is not set"), now that they run in the same pass."""
    with pytest.raises(ConfigError) as error:
        config.load(BASE, set())
    [message] = error.value.problems
    assert "stored in plain text" in message
