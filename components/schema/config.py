"""The stack's configuration: read once, validated whole, before any resource exists.

Users set only site facts (project, region, zone, reservation, names, cluster mode, node count,
the Hugging Face token); the hardware facts come from `hardware.PROFILES` through
`verl-gke:target`. Every problem of one config is reported together, each naming the key, the
bad value and the fix, and the program stops with a `ConfigError` (a `pulumi.RunError`, so the
CLI prints the messages without a traceback). By concern:
- config_checks.py: the checks that span keys, or a key and the hardware profile
  (`cross_field_problems`, which `load` runs in the same pass, on what did validate: a key that
  is invalid on its own is reported and left at its default for them);
- here: the model (`StackConfig`), its keys, reading them (`load`, `from_pulumi`), the fix for a
  key that is invalid on its own, and the trackers' credentials as env vars (`tracker_env`).
"""

from __future__ import annotations

import datetime
import difflib
import json
from typing import Any, Collection, Mapping

import pulumi
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from components.schema.choices import ClusterMode
from components.schema.choices import Capacity
from components.schema.config_checks import cross_field_problems
from components.schema.run import GrpoRunConfig
from components.facts.hardware import HardwareProfile, NodeNetworking, Target, profile
from components.messages import quoted
from components.schema import names, pulumi_forms
from components.schema.pulumi_forms import namespace
from components.schema.staging import StagingConfig, model_path


class ConfigError(pulumi.RunError):
    """Every problem of a stack's config, reported at once without a traceback."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the stack's config has {len(problems)} problem(s):\n{lines}")


_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class StackConfig(BaseModel):
    """Every `<project>:*` key (camelCase; the project is verl-gke unless renamed) plus
    `gcp:project`.

    Field defaults are the program's defaults; `Pulumi.yaml` declares the same ones (a test keeps
    the two in step).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )

    project: str = Field(
        pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$", description="GCP project id (`gcp:project`)."
    )
    stack: str = Field(
        "dev", min_length=1, description="The Pulumi stack's name (not a key: the CLI's stack)."
    )
    target: Target = Field(description="Hardware target: a4 (B200), a3u (H200), a4x (GB200).")
    region: str = Field(
        pattern=r"^[a-z]+-[a-z]+[0-9]+$",
        description="Region of the control plane, bucket and subnets.",
    )
    zone: str = Field(
        pattern=r"^[a-z]+-[a-z]+[0-9]+-[a-z]$",
        description="Zone of the GPU nodes (where the reservation is).",
    )
    cluster_name: str | None = Field(
        None,
        pattern=_NAME,
        max_length=names.CLUSTER_NAME_MAX,
        description="GKE cluster name; default `verl-<stack>`.",
    )
    cluster_mode: ClusterMode = Field(ClusterMode.STANDARD, description="standard or autopilot.")
    provisioning: Capacity = Field(
        Capacity.RESERVATION,
        description="GPU capacity on Standard: reservation, spot or flex-start.",
    )
    reservation: str | None = Field(
        None,
        description="Reservation name, or `<name>/reservationBlocks/<block>` (Standard).",
    )
    gpu_nodes: int | None = Field(
        None, description="GPU nodes (= Ray workers); default: the target's (2, 2, 4)."
    )
    gvnic_network_prefix: str | None = Field(
        None, pattern=_NAME, description="gVNIC VPC name prefix; default `<clusterName>-gvnic`."
    )
    rdma_network_prefix: str | None = Field(
        None, pattern=_NAME, description="RDMA VPC name prefix; default `<clusterName>-rdma`."
    )
    namespace: str = Field(
        "default", pattern=_NAME, max_length=63, description="Namespace of the workload."
    )
    service_account: str = Field(
        "verl-ray",
        pattern=_NAME,
        max_length=63,
        description="Kubernetes service account of the Ray pods.",
    )
    bucket_name: str | None = Field(
        None,
        max_length=222,
        description="Bucket for model, data and checkpoints; default `<clusterName>-<project>`.",
    )
    hf_token: SecretStr | None = Field(None, description="Hugging Face token (secret).")
    wandb_api_key: SecretStr | None = Field(
        None, description="Weights & Biases API key (secret); required by job.logger wandb."
    )
    mlflow_tracking_uri: SecretStr | None = Field(
        None,
        description="MLflow tracking server URI (secret: it may carry credentials); required "
        "by job.logger mlflow.",
    )
    mlflow_tracking_token: SecretStr | None = Field(
        None, description="MLflow tracking token (secret), if the server wants one."
    )
    network: str | None = Field(
        None,
        pattern=_NAME,
        max_length=63,
        description="An existing VPC for the cluster's nodes; default: the stack creates one.",
    )
    subnetwork: str | None = Field(
        None,
        pattern=_NAME,
        max_length=63,
        description="Its subnetwork in `region`; set together with `network`.",
    )
    control_plane_cidrs: list[str] = Field(
        default_factory=list,
        description="Keep a public IP endpoint for the control plane, limited to these CIDR "
        "ranges; default: none, the DNS endpoint only (IAM-authorised).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Your labels on every labelled Google Cloud resource (cost attribution).",
    )
    deletion_protection: bool = Field(True, description="GKE cluster deletion protection.")
    delete_bucket_on_destroy: bool = Field(
        False, description="Delete the bucket and its checkpoints on `pulumi destroy`."
    )
    maintenance_exclusion_start: datetime.datetime | None = Field(
        None,
        description="Start of the no-upgrade window (RFC 3339); default: the creation day.",
    )
    job: GrpoRunConfig = Field(default_factory=GrpoRunConfig, description="The GRPO run.")
    staging: StagingConfig = Field(default_factory=StagingConfig, description="Model staging.")
    alert_notification_channel: str | None = Field(
        None, description="Notification channel of every alert; default: none."
    )
    no_step_alert_minutes: int = Field(
        60, description="Minutes without a new training step before the no-step alert fires."
    )

    # Derived facts, so that no component recomputes them.
    @property
    def hardware(self) -> HardwareProfile:
        return profile(self.target)

    @property
    def nodes(self) -> int:
        return self.gpu_nodes if self.gpu_nodes is not None else self.hardware.default_nodes

    @property
    def autopilot(self) -> bool:
        return self.cluster_mode is ClusterMode.AUTOPILOT

    @property
    def cluster(self) -> str:
        """The GKE cluster's name: set, or `verl-<stack>` so that stacks never share one."""
        return self.cluster_name or names.default_cluster_name(self.stack)

    @property
    def gvnic_prefix(self) -> str:
        return self.gvnic_network_prefix or f"{self.cluster}-gvnic"

    @property
    def rdma_prefix(self) -> str:
        return self.rdma_network_prefix or f"{self.cluster}-rdma"

    @property
    def bucket(self) -> str:
        return self.bucket_name or f"{self.cluster}-{self.project}"

    @property
    def placement_policy(self) -> str | None:
        """A4X's workload policy name; None where the pool has none."""
        if self.hardware.networking is not NodeNetworking.DRANET or self.autopilot:
            return None
        return names.placement_policy_name(self.cluster)

    @property
    def resource_labels(self) -> dict[str, str]:
        """What every labelled Google Cloud resource of the stack carries: the user's labels, and
        the stack, target and cluster, so that billing can be split by each."""
        return {
            **self.labels,
            names.STACK_LABEL: names.stack_label(self.stack),
            names.TARGET_LABEL: self.target.value,
            names.CLUSTER_LABEL: names.label_value(self.cluster),
        }

    @property
    def run(self) -> GrpoRunConfig:
        """The job's config; its model path follows the staged model unless set explicitly."""
        if "model_path" in self.job.model_fields_set:
            return self.job
        return self.job.model_copy(update={"model_path": model_path(self.staging.model_id)})

    @property
    def model_revision(self) -> str | None:
        """The revision of the job's model if it is the staged one (part of the run's identity);
        None for a model path of the user's own, whose revision the program cannot know."""
        if self.run.model_path == model_path(self.staging.model_id):
            return self.staging.model_revision
        return None

    @property
    def exclusion_start(self) -> str | None:
        """The configured start in GKE's format, or None: the cluster picks its creation day."""
        start = self.maintenance_exclusion_start
        if start is None:
            return None
        if start.tzinfo is None:
            start = start.replace(tzinfo=datetime.timezone.utc)
        return start.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tracker_env(config: StackConfig) -> dict[str, str]:
    """The trackers' credentials as the env vars their clients read (wandb: WANDB_API_KEY;
    mlflow: MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN), plain values for a secret Output."""
    values = {
        "WANDB_API_KEY": config.wandb_api_key,
        "MLFLOW_TRACKING_URI": config.mlflow_tracking_uri,
        "MLFLOW_TRACKING_TOKEN": config.mlflow_tracking_token,
    }
    return {name: value.get_secret_value() for name, value in values.items() if value}


# Keys the user types, for "did you mean" suggestions and the unknown-key check.
KEYS: dict[str, str] = {
    (field.alias or name): name for name, field in StackConfig.model_fields.items()
}
KEYS.pop("project")
KEYS.pop("stack")


# Keys whose values are objects or lists: the CLI hands them over as JSON text.
STRUCTURED_KEYS = ("job", "staging", "labels", "controlPlaneCidrs")
# Keys whose value is an object (Pulumi.yaml declares them `type: object`, default {}).
OBJECT_KEYS = ("job", "staging", "labels")
# The JSON Schema of a stack file generated from these models, for editors (tools/config_schema.py).
CONFIG_SCHEMA_PATH = "schemas/stack-config.schema.json"
# Each object key's model, for the fields a flat `verl-gke:job.rolloutN` meant (None: a map).
_OBJECT_MODELS = {
    key: annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    for key in OBJECT_KEYS
    for annotation in [StackConfig.model_fields[KEYS[key]].annotation]
}

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
            problems.append(pulumi_forms.flat_key_problem(key, value, _OBJECT_MODELS) or _unknown_key(key))
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
