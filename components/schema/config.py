"""The stack's configuration: read once, validated whole, before any resource exists.

Users set only site facts (project, region, zone, reservation, names, cluster mode, node count,
the Hugging Face token); the hardware facts come from `hardware.PROFILES` through
`verl-gke:target`. Every problem of one config is reported together, each naming the key, the
bad value and the fix, and the program stops with a `ConfigError` (a `pulumi.RunError`, so the
CLI prints the messages without a traceback).
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
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

from components.messages import quoted
from components.schema.choices import ClusterMode
from components.schema.choices import Capacity
from components.schema.run import GrpoRunConfig, run_problems
from components.facts.hardware import HardwareProfile, NodeNetworking, Target, profile
from components.schema.staging import StagingConfig, model_path, staging_problems

NAMESPACE = "verl-gke"

# GKE version every target asks for. A4X's DRANET needs 1.34.1-gke.1829001 or newer (Cluster
# Toolkit gke-a4x precondition); one floor for all targets keeps the three stacks alike.
MIN_GKE_VERSION = "1.34.1-gke.1829001"


class ConfigError(pulumi.RunError):
    """Every problem of a stack's config, reported at once without a traceback."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the stack's config has {len(problems)} problem(s):\n{lines}")


_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class StackConfig(BaseModel):
    """Every `verl-gke:*` key (camelCase) plus `gcp:project`.

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
    target: Target = Field(description="Hardware target: a4 (B200), a3u (H200), a4x (GB200).")
    region: str = Field(
        pattern=r"^[a-z]+-[a-z]+[0-9]+$",
        description="Region of the control plane, bucket and subnets.",
    )
    zone: str = Field(
        pattern=r"^[a-z]+-[a-z]+[0-9]+-[a-z]$",
        description="Zone of the GPU nodes (where the reservation is).",
    )
    cluster_name: str = Field("verl", pattern=_NAME, max_length=40, description="GKE cluster name.")
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
    namespace: str = Field("default", pattern=_NAME, description="Namespace of the workload.")
    service_account: str = Field(
        "verl-ray", pattern=_NAME, description="Kubernetes service account of the Ray pods."
    )
    bucket_name: str | None = Field(
        None, description="Bucket for model, data and checkpoints; default `<clusterName>-<project>`."
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
    def gvnic_prefix(self) -> str:
        return self.gvnic_network_prefix or f"{self.cluster_name}-gvnic"

    @property
    def rdma_prefix(self) -> str:
        return self.rdma_network_prefix or f"{self.cluster_name}-rdma"

    @property
    def bucket(self) -> str:
        return self.bucket_name or f"{self.cluster_name}-{self.project}"

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


# Keys the user types, for "did you mean" suggestions and the unknown-key check.
KEYS: dict[str, str] = {
    (field.alias or name): name for name, field in StackConfig.model_fields.items()
}
KEYS.pop("project")


# Pulumi.yaml's defaults for keys whose real default is derived: they mean "not set".
UNSET = {"gpuNodes": "0"}
_SECRET_KEYS = ("hfToken", "wandbApiKey", "mlflowTrackingUri", "mlflowTrackingToken")


def load(raw: Mapping[str, Any], secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate fully qualified config (`verl-gke:zone`, `gcp:project`) into a StackConfig.

    Values may be strings as the Pulumi CLI hands them over (objects as JSON text); "" (and
    gpuNodes 0) stand for "unset". `secret_keys` are the keys set with `--secret`.
    """
    problems: list[str] = []
    values: dict[str, Any] = {}
    for full_key, value in raw.items():
        namespace, _, key = full_key.partition(":")
        if full_key == "gcp:project":
            values["project"] = value
        elif namespace != NAMESPACE:
            continue  # provider settings (gcp:region, kubernetes:context ...) are not ours
        elif key not in KEYS:
            problems.append(_unknown_key(key))
        elif str(value) in ("", UNSET.get(key)):
            continue
        elif key in _SECRET_KEYS and full_key not in secret_keys:
            problems.append(
                f"{full_key} is stored in plain text: remove it with `pulumi config rm "
                f"{full_key}` and set it again with `pulumi config set --secret {full_key} <value>`"
            )
        else:
            values[key] = _parse(key, value)
    if "project" not in values:
        problems.append(
            "gcp:project is not set: run `pulumi config set gcp:project <your-project-id>` "
            "(`gcloud config get project` prints yours)"
        )
    if problems:
        raise ConfigError(problems)
    try:
        config = StackConfig.model_validate(values)
    except ValidationError as error:
        raise ConfigError([_describe(e, values) for e in error.errors()]) from None
    problems = cross_field_problems(config)
    if problems:
        raise ConfigError(problems)
    return config


def from_pulumi() -> StackConfig:
    """Read this stack's config from the Pulumi runtime (the CLI or the mock runtime)."""
    from pulumi.runtime import config as runtime_config

    raw = dict(runtime_config.get_config_env())
    raw.update(runtime_config.CONFIG.get())
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys.update(k for k in raw if runtime_config.is_config_secret(k))
    return load(raw, secret_keys)


def _parse(key: str, value: Any) -> Any:
    # Structured keys arrive as JSON text from the CLI (`pulumi config set --path job.rolloutN 8`).
    if key in ("job", "staging") and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # pydantic reports it with the key name
    return value


def _unknown_key(key: str) -> str:
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.6)
    hint = f" Did you mean `{NAMESPACE}:{close[0]}`?" if close else ""
    return (
        f"{NAMESPACE}:{key} is not a setting of this program.{hint} Remove it with "
        f"`pulumi config rm {NAMESPACE}:{key}`; every key is listed in Pulumi.yaml."
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
    "namespace": "use a Kubernetes name: lowercase letters, digits and '-'",
    "serviceAccount": "use a Kubernetes name: lowercase letters, digits and '-'",
    "deletionProtection": "use true or false",
    "deleteBucketOnDestroy": "use true or false",
    "maintenanceExclusionStart": "use an RFC 3339 time such as 2026-12-01T00:00:00Z",
}


def _describe(error: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    path = [str(p) for p in error["loc"]]
    top = path[0] if path else ""
    key = "gcp:project" if top == "project" else f"{NAMESPACE}:{'.'.join(path)}"
    if error["type"] == "missing":
        return f"{key} is required: set it with `pulumi config set {key} <value>`"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error" and message.startswith(f"{key}="):
        return message  # the model's own validator already names the key, value and fix
    shown = "[secret]" if top in _SECRET_KEYS else quoted(error.get("input"))
    fix = _FIXES.get(top, "see its description in Pulumi.yaml")
    if top in ("job", "staging"):
        # Objects are not declared in Pulumi.yaml (its schema has no object type).
        fix = f"see the {NAMESPACE}:{top} table in README.md"
    if top in ("job", "staging") and error["type"] == "extra_forbidden":
        fix = f"remove it; the settings of {NAMESPACE}:{top} are listed in README.md"
    return f"{key} = {shown} is invalid ({error['msg']}): {fix}"


def cross_field_problems(config: StackConfig) -> list[str]:
    """Checks that involve more than one key, or a key and the hardware profile."""
    hw = config.hardware
    problems: list[str] = []
    zone_region = config.zone.rsplit("-", 1)[0]
    if zone_region != config.region:
        problems.append(
            f"{NAMESPACE}:zone = {config.zone!r} is not in {NAMESPACE}:region = "
            f"{config.region!r}: pick a zone of that region (e.g. {config.region}-b) or set "
            f"the region to {zone_region!r}"
        )
    if config.autopilot and not hw.autopilot_supported:
        problems.append(
            f"{NAMESPACE}:clusterMode = 'autopilot' is not available for target "
            f"{hw.target.value}: A4X needs a Standard cluster (DRANET node pool); set "
            f"{NAMESPACE}:clusterMode to standard"
        )
    if config.autopilot and (config.reservation or config.provisioning is not Capacity.RESERVATION):
        problems.append(
            f"{NAMESPACE}:reservation / provisioning are set, but Autopilot places GPU pods on "
            "Spot capacity it manages itself (the tutorial's compute class) and would ignore them: "
            f"remove them, or set {NAMESPACE}:clusterMode to standard to use them"
        )
    if (
        not config.autopilot
        and config.provisioning is Capacity.RESERVATION
        and not config.reservation
    ):
        problems.append(
            f"{NAMESPACE}:reservation is not set but {NAMESPACE}:provisioning is "
            "'reservation': set the reservation name "
            f"(`gcloud compute reservations list --zones {config.zone}`), or choose "
            f"{NAMESPACE}:provisioning spot or flex-start"
        )
    if config.reservation and not re.fullmatch(
        r"[a-z]([-a-z0-9]*[a-z0-9])?(/reservationBlocks/[a-z0-9]([-a-z0-9]*[a-z0-9])?)?",
        config.reservation,
    ):
        problems.append(
            f"{NAMESPACE}:reservation = {config.reservation!r} is not a reservation name: use "
            "`<name>` or `<name>/reservationBlocks/<block>`"
        )
    nodes_problem = hw.nodes_problem(f"{NAMESPACE}:gpuNodes", config.nodes)
    if nodes_problem:
        problems.append(nodes_problem)
    if not re.fullmatch(r"[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]", config.bucket) or ".." in config.bucket:
        problems.append(
            f"{NAMESPACE}:bucketName = {config.bucket!r} is not a valid bucket name: use 3-63 "
            "lowercase letters, digits, '-', '_' or '.'"
        )
    if hw.networking is NodeNetworking.DRANET and (
        config.gvnic_network_prefix or config.rdma_network_prefix
    ):
        problems.append(
            f"{NAMESPACE}:gvnicNetworkPrefix / rdmaNetworkPrefix are set, but target a4x uses "
            "DRANET (GKE creates its networks): remove them"
        )
    if config.hf_token is None and not config.staging.skip:
        problems.append(
            f"{NAMESPACE}:hfToken is not set, but the model is staged from Hugging Face: run "
            f"`pulumi config set --secret {NAMESPACE}:hfToken <token>` (a read token from "
            f"huggingface.co/settings/tokens), or set {NAMESPACE}:staging.skip to true for a "
            "bucket you filled yourself"
        )
    problems += tracker_problems(config)
    if not nodes_problem:  # the run's checks divide by the GPU count
        problems += run_problems(config.run, hw, config.nodes)
    problems += staging_problems(config.staging)
    return problems


# Each tracker of job.logger and the secret key it cannot work without, with where to get it.
_TRACKER_KEYS = {
    "wandb": ("wandbApiKey", "wandb_api_key", "an API key from wandb.ai/authorize"),
    "mlflow": ("mlflowTrackingUri", "mlflow_tracking_uri", "your tracking server's URI"),
}


def tracker_problems(config: StackConfig) -> list[str]:
    """A logger without its credentials fails in verl's Tracking at the first step, hours in;
    here it is refused before anything is created."""
    problems = []
    for logger, (key, field, what) in _TRACKER_KEYS.items():
        if logger in config.job.loggers and getattr(config, field) is None:
            problems.append(
                f"{NAMESPACE}:job.logger includes {logger}, but {NAMESPACE}:{key} is not set: "
                f"run `pulumi config set --secret {NAMESPACE}:{key} <value>` ({what}), or "
                f"remove {logger} from {NAMESPACE}:job.logger"
            )
    return problems


def tracker_env(config: StackConfig) -> dict[str, str]:
    """The trackers' credentials as the env vars their clients read (wandb: WANDB_API_KEY;
    mlflow: MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN), plain values for a secret Output."""
    values = {
        "WANDB_API_KEY": config.wandb_api_key,
        "MLFLOW_TRACKING_URI": config.mlflow_tracking_uri,
        "MLFLOW_TRACKING_TOKEN": config.mlflow_tracking_token,
    }
    return {name: value.get_secret_value() for name, value in values.items() if value}
