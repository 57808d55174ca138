"""The stack config: every key has a good and a bad value, and every problem is explained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pulumi
import pytest
import yaml

from components import config
from components.config import ConfigError, StackConfig
from components.gpu_node_pool import Capacity
from components.hardware import Target

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


def load(**changes: str | None) -> StackConfig:
    raw = dict(BASE)
    for key, value in changes.items():
        full = key if key == "gcp:project" else f"verl-gke:{key}"
        if value is None:
            raw.pop(full, None)
        else:
            raw[full] = value
    return config.load(raw)


def problems(**changes: str | None) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load(**changes)
    return error.value.problems


def test_valid_config_derives_the_rest_from_the_target():
    """A minimal stack file yields the target's hardware and names derived from the cluster."""
    cfg = load()
    assert cfg.target is Target.A4
    assert cfg.nodes == 2 and cfg.hardware.gpus_per_node == 8
    assert cfg.bucket == "verl-my-proj"
    assert (cfg.gvnic_prefix, cfg.rdma_prefix) == ("verl-gvnic", "verl-rdma")
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
    ],
)
def test_bad_value_names_key_value_and_fix(key, value, expected):
    """Each bad value is reported with its full key, the value as given and how to fix it."""
    [message] = problems(**{key: value})
    assert message.startswith(f"verl-gke:{key} = {value!r} is invalid")
    assert expected in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"zone": "europe-west4-b"}, "is not in verl-gke:region = 'us-central1'"),
        ({"reservation": None}, "verl-gke:reservation is not set"),
        ({"reservation": "Bad Name"}, "is not a reservation name"),
        ({"gpuNodes": "0"}, "verl-gke:gpuNodes = 0 is out of range for a4-highgpu-8g: use 1 to 10"),
        ({"gpuNodes": "11"}, "use 1 to 10"),
        ({"target": "a4x", "clusterMode": "autopilot"}, "A4X needs a Standard cluster"),
        ({"target": "a4x", "rdmaNetworkPrefix": "x"}, "uses DRANET"),
        ({"bucketName": "UPPER"}, "is not a valid bucket name"),
        ({"hfToken": None}, "verl-gke:hfToken is not set"),
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
    """Provider settings (gcp:region, kubernetes:...) are not this program's to reject."""
    cfg = config.load({**BASE, "gcp:region": "us-east1", "kubernetes:context": "x"})
    assert cfg.region == "us-central1"


def test_missing_required_keys_are_all_reported():
    """Missing project, region and zone come back together, each with the command to set it."""
    raw = {"verl-gke:target": "a4"}
    with pytest.raises(ConfigError) as error:
        config.load(raw)
    assert any("gcp:project is not set" in p for p in error.value.problems)
    raw["gcp:project"] = "p"
    with pytest.raises(ConfigError) as error:
        config.load(raw)
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


def test_pulumi_yaml_declares_every_key_with_the_programs_defaults():
    """Pulumi.yaml and the config model agree: same keys, same defaults, a description each."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert set(declared) == set(config.KEYS)
    for key, spec in declared.items():
        assert spec.get("description"), key
        field = StackConfig.model_fields[config.KEYS[key]]
        if "default" in spec:
            default = field.get_default(call_default_factory=True)
            default = getattr(default, "value", default)
            assert spec["default"] == default, key
        elif key not in ("job", "staging"):
            assert field.default is None or field.is_required(), key


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
