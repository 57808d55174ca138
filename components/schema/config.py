"""The stack's configuration: read once, validated whole, before any resource exists.

Users set only site facts (project, region, zone, reservation, names, cluster mode, node count,
the Hugging Face token); the hardware facts come from `hardware.PROFILES` through
`verl-gke:target`. Every problem of one config is reported together, each naming the key, the
bad value and the fix, and the program stops with a `ConfigError` (a `pulumi.RunError`, so the
CLI prints the messages without a traceback). By concern:
- config_checks.py: the checks that span keys, or a key and the hardware profile
  (`cross_field_problems`, which `load` runs in the same pass, on what did validate: a key that
  is invalid on its own is reported and left at its default for them);
- stack_config.py: the model (`StackConfig`), its keys, the trackers' credentials as env vars
  (`tracker_env`); re-exported here, where most code and the tests import it from;
- here: reading the values (`load`, `from_pulumi`) and the fix for a key that is invalid on its
  own.
The arrows go one way: this module -> config_checks.py -> stack_config.py.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Collection, Mapping

import pulumi
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from components.messages import quoted
from components.forms import hydra_overrides, pulumi_forms
from components.schema.config_checks import cross_field_problems
from components.forms.pulumi_forms import namespace
# The model, re-exported: most code and the tests import it from here.
from components.schema.stack_config import (  # noqa: F401
    CONFIG_SCHEMA_PATH,
    KEYS,
    OBJECT_KEYS,
    OBJECT_MODELS,
    STRUCTURED_KEYS,
    StackConfig,
    tracker_env,
)


class ConfigError(pulumi.RunError):
    """Every problem of a stack's config, reported at once without a traceback."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the stack's config has {len(problems)} problem(s):\n{lines}")


# Pulumi.yaml's defaults for keys whose real default is derived: they mean "not set".
UNSET = {"gpuNodes": "0"}
_SECRET_KEYS = ("hfToken", "wandbApiKey", "mlflowTrackingUri", "mlflowTrackingToken")


def load(
    raw: Mapping[str, Any],
    secret_keys: Collection[str] = (),
    stack: str = "dev",
    project: str | None = None,
) -> StackConfig:
    """Validate fully qualified config (`verl-gke:zone`, `gcp:project`) into a StackConfig.

    Values may be strings as the Pulumi CLI hands them over (objects as JSON text); "" (and
    gpuNodes 0) stand for "unset". `secret_keys` are the keys set with `--secret`; `stack` is
    the Pulumi stack, which default names carry; `project` is the Pulumi project, whose name is
    the namespace of every key read and named (`from_pulumi` passes `pulumi.get_project()`; the
    tools, Pulumi.yaml's `name:`; default: the template's, verl-gke).
    """
    with pulumi_forms.keys_of(project or pulumi_forms.TEMPLATE_PROJECT):
        return _load(raw, secret_keys, stack)


def _load(raw: Mapping[str, Any], secret_keys: Collection[str], stack: str) -> StackConfig:
    ns = namespace()
    problems: list[str] = []
    values: dict[str, Any] = {"stack": stack}
    for full_key, value in raw.items():
        namespace_, _, key = full_key.partition(":")
        if full_key == "gcp:project":
            values["project"] = value
        elif namespace_ == pulumi_forms.TEMPLATE_PROJECT != ns and key.split(".")[0] in KEYS:
            problems.append(_template_key(full_key, key, ns))
        elif namespace_ != ns:
            continue  # provider settings (kubernetes:context ...) are not ours; gcp:region below
        elif key not in KEYS:
            problems.append(pulumi_forms.flat_key_problem(key, value, OBJECT_MODELS) or _unknown_key(key))
        elif str(value) in ("", UNSET.get(key)):
            continue
        elif key in _SECRET_KEYS and full_key not in secret_keys:
            problems.append(
                f"{full_key} is stored in plain text: remove it with `pulumi config rm "
                f"{full_key}` and set it again with `pulumi config set --secret {full_key} <value>`"
            )
            values[key] = value  # set, only stored wrongly: the checks across keys count it
        else:
            values[key] = _parse(key, value)
    problems += pulumi_forms.provider_twin_problems(raw, values)
    if "project" not in values:
        problems.append(
            "gcp:project is not set: run `pulumi config set gcp:project <your-project-id>` "
            "(`gcloud config get project` prints yours)"
        )
    # Every problem at once: the fields that are invalid on their own, then the checks across
    # keys on what did validate (each invalid field left at its default).
    checked = {"project": PLACEHOLDER_PROJECT, **values}
    try:
        config = _validate(checked)
    except ValidationError as error:
        problems += [_describe(e, checked) for e in error.errors()]
        config = _what_validates(checked, error)
    if config is not None:
        problems += cross_field_problems(config)
    if problems:
        raise ConfigError(problems)
    return config


# Stands in for an unset gcp:project (itself reported) while the other keys are checked.
PLACEHOLDER_PROJECT = "unset-project"


def _validate(values: Mapping[str, Any]) -> StackConfig:
    """The model of `values`, every field by the name the user types (camelCase) only: the
    snake_case field names are refused, as the stack file's JSON Schema refuses them, with the
    name that was meant (`_describe`)."""
    return StackConfig.model_validate(values, by_alias=True, by_name=False)


def _what_validates(values: Mapping[str, Any], error: ValidationError) -> StackConfig | None:
    """The config without the fields `error` found invalid (each at its default), for the
    checks across keys; None where that is not possible (a required key is missing)."""
    kept = json.loads(json.dumps(values, default=str))
    for _ in range(3):  # a field left out can, rarely, leave another one invalid
        for problem in error.errors():
            if problem["type"] == "missing" or not problem["loc"]:
                return None
            parent, key, current = None, None, kept
            for part in problem["loc"]:
                if not isinstance(current, dict) or part not in current:
                    break
                parent, key, current = current, part, current[part]
            if parent is None:
                return None
            if key == "extraOverrides" and isinstance(current, dict):
                flat, refused = hydra_overrides.flattenable(current, "")
                if refused:
                    # Only the entries that are no single override are refused: the others
                    # are still checked, in this round (ECOSYSTEM-REVIEW-4 RE-10).
                    parent[key] = flat
                    continue
            parent.pop(key, None)
        try:
            return _validate(kept)
        except ValidationError as again:
            error = again
    return None


def from_pulumi() -> StackConfig:
    """Read this stack's config from the Pulumi runtime (the CLI or the mock runtime)."""
    from pulumi.runtime import config as runtime_config

    raw = dict(runtime_config.get_config_env())
    raw.update(runtime_config.CONFIG.get())
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys.update(k for k in raw if runtime_config.is_config_secret(k))
    return load(raw, secret_keys, pulumi.get_stack(), pulumi.get_project())


def _parse(key: str, value: Any) -> Any:
    # Structured keys arrive as JSON text from the CLI (`pulumi config set --path job.rolloutN 8`).
    if key in STRUCTURED_KEYS and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value  # pydantic reports it with the key name
    return pulumi_forms.normalise_lists(key, value)


def _unknown_key(key: str) -> str:
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.6)
    hint = f" Did you mean `{namespace()}:{close[0]}`?" if close else ""
    return (
        f"{namespace()}:{key} is not a setting of this program.{hint} Remove it with "
        f"`pulumi config rm {namespace()}:{key}`; every key is listed in Pulumi.yaml."
    )


def _template_key(full_key: str, key: str, ns: str) -> str:
    """A key of this program left under the template's name in a project named otherwise (a
    stack file copied from the template): not read, so refused rather than silently ignored."""
    return (
        f"{full_key} is a key of the project {pulumi_forms.TEMPLATE_PROJECT}, but this project is "
        f"{ns} (Pulumi.yaml's name), which reads {ns}:{key}: rename it, `pulumi config rm "
        f"{full_key}` and `pulumi config set {ns}:{key} <value>` (in the stack file: `{ns}:{key}:`)"
    )


_FIXES = {
    "project": "use the project id (not its name or number): `gcloud config get project`",
    "region": "use a region such as us-central1 (`gcloud compute regions list`)",
    "zone": "use a zone such as us-central1-b (`gcloud compute zones list`)",
    "target": "use a4 (B200), a3u (H200) or a4x (GB200)",
    "clusterMode": "use standard or autopilot",
    "provisioning": "use reservation, spot or flex-start",
    "gpuNodes": "use a whole number of nodes",
    "clusterName": "use lowercase letters, digits and '-', starting with a letter, at most 40",
    "bucketName": "use a bucket name of at most 63 characters (222 with dots)",
    "namespace": "use a Kubernetes name: lowercase letters, digits and '-'",
    "serviceAccount": "use a Kubernetes name: lowercase letters, digits and '-'",
    "deletionProtection": "use true or false",
    "deleteBucketOnDestroy": "use true or false",
    "maintenanceExclusionStart": "use an RFC 3339 time such as 2026-12-01T00:00:00Z",
    "network": "use the name of a VPC in the project (`gcloud compute networks list`)",
    "subnetwork": "use the name of a subnetwork of that VPC in the region",
    "controlPlaneCidrs": 'use a list of CIDR ranges, e.g. ["203.0.113.0/24"]',
    "labels": 'use an object of label keys and values, e.g. {"team": "research"}',
    "noStepAlertMinutes": "use a whole number of minutes, 2 to 1440",
}


def _describe(error: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    path = [str(p) for p in error["loc"]]
    top = path[0] if path else ""
    key = "gcp:project" if top == "project" else f"{namespace()}:{'.'.join(path)}"
    if error["type"] == "missing":
        return f"{key} is required: set it with `pulumi config set {key} <value>`"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error" and message.startswith(f"{key}="):
        return message  # the model's own validator already names the key, value and fix
    shown = "[secret]" if top in _SECRET_KEYS else quoted(error.get("input"))
    fix = _FIXES.get(top, "see its description in Pulumi.yaml")
    if top in OBJECT_KEYS:
        # Pulumi.yaml's description of an object cannot list its fields: the docs and the schema do.
        fix = f"see {namespace()}:{top} in docs/config.md (or {CONFIG_SCHEMA_PATH})"
    if top in OBJECT_KEYS and error["type"] == "extra_forbidden":
        meant = _meant_field(path)
        if meant:
            parent = f"{namespace()}:{'.'.join(path[:-1])}"
            value = error.get("input")
            typed = json.dumps(value) if isinstance(value, (int, float, bool)) else "<value>"
            return (
                f"{key} = {shown} is not a setting of {parent}: did you mean {meant}? Rename it: "
                f"`pulumi config rm --path '{key}'` and `pulumi config set --path "
                f"'{parent}.{meant}' {typed}` (in the stack file: `{meant}:` under `{parent}:`)"
            )
        fix = f"remove it; the settings of {namespace()}:{top} are listed in docs/config.md (and {CONFIG_SCHEMA_PATH})"
    return f"{key} = {shown} is invalid ({error['msg']}): {fix}"


def _meant_field(path: list[str]) -> str | None:
    """The field a misspelt nested key meant: its camelCase form (`rollout_n` -> rolloutN), or
    the closest name of its object's fields (`totalEpoch` -> totalEpochs)."""
    model: Any = StackConfig
    for part in path[:-1]:
        fields = {(f.alias or n): f for n, f in model.model_fields.items()}
        annotation = fields[part].annotation if part in fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    names_ = [f.alias or n for n, f in model.model_fields.items()]
    typed = path[-1]
    if to_camel(typed) in names_:
        return to_camel(typed)
    lowered = {n.lower(): n for n in names_}
    if typed.lower() in lowered:
        return lowered[typed.lower()]
    close = difflib.get_close_matches(typed, names_, n=1, cutoff=0.75)
    return close[0] if close else None
