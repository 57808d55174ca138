"""The stack's configuration model: `StackConfig`, every `<project>:*` key with its type,
default and description, the facts derived from them (the cluster's name, the nodes, the run
with its staged model path), and the names of the keys.

What reads and checks a stack's values into it is elsewhere: components/schema/config.py
(`load`, `from_pulumi`: every key, each problem with its fix) and config_checks.py (the checks
that span keys), both standing on this module; it imports neither.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic.alias_generators import to_camel

from components.facts.hardware import HardwareProfile, NodeNetworking, Target, profile
from components.facts.models import DEFAULT_MODEL, ModelShape
from components.schema import names
from components.schema.choices import Capacity, ClusterMode
from components.runspec.run import GrpoRunConfig, ResolvedRun, resolve_run, runs_by_name
from components.schema.staging import StagingConfig, model_path

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
    def shipped_shape(self) -> ModelShape | None:
        """The model's shape when the config alone gives it: the default model at its pinned
        revision, shipped as data (components/facts/models.py); None for any other model, whose
        shape only the model check can read (components/preflight/model_shape.py)."""
        staging = self.staging
        if self.run.model_path == model_path(staging.model_id) and (
                staging.model_id, staging.model_revision) == (DEFAULT_MODEL.model_id,
                                                              DEFAULT_MODEL.revision):
            return DEFAULT_MODEL
        return None

    @cached_property
    def runs(self) -> Mapping[str, ResolvedRun]:
        """The stack's runs by name, each resolved once (components/runspec/run.py) for this
        cluster and `shipped_shape`: one today, `job`. The model check resolves a run again
        only for a shape it reads that the config could not give (a model other than the
        default). Needs at least one node (config.load checks the runs only then)."""
        return runs_by_name(resolve_run(
            self.run, self.hardware, self.nodes, self.model_revision, self.shipped_shape))

    def model_copy(self, *, update: Mapping | None = None, deep: bool = False) -> StackConfig:
        """A copy whose runs are resolved for its own values (pydantic would copy `runs` as
        cached from this one)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("runs", None)
        return copied

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
OBJECT_MODELS = {
    key: annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    for key in OBJECT_KEYS
    for annotation in [StackConfig.model_fields[KEYS[key]].annotation]
}
