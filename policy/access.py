"""Access: IAM at bucket scope, nodes under their own service account, credentials as secrets.

What a workload of the stack may do in the project, and how the credentials it is given travel.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from pulumi_policy import ReportViolation, ResourceValidationArgs

from policy.common import CLUSTER, GRPO_RUN, K8S_PROVIDER, K8S_SECRET, NODE_POOL, SECRET, lookup

# --- IAM ---------------------------------------------------------------------------------------

BUCKET_IAM_TYPES = (
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:storage/bucketIAMBinding:BucketIAMBinding",
    "gcp:storage/bucketIAMPolicy:BucketIAMPolicy",
)
BASIC_ROLES = ("roles/owner", "roles/editor")
# The project-scope roles GKE documents for a dedicated node service account ("Use least
# privilege IAM service accounts"; image streaming's requirements): components/cluster/
# node_identity.py grants exactly these. Anything else the stack grants is bucket-scoped.
NODE_SERVICE_ACCOUNT_ROLES = (
    "roles/container.defaultNodeServiceAccount",  # logs, metrics, resource metadata
    "roles/artifactregistry.reader",  # image pulls through the stack's mirror
    "roles/serviceusage.serviceUsageConsumer",  # image streaming
)


def is_iam_type(resource_type: str) -> bool:
    """gcp:<module>/<x>IAM{Member,Binding,Policy}:..., at any scope (project, folder, SA ...)."""
    return resource_type.startswith("gcp:") and re.search(r":\w*IAM(Member|Binding|Policy)$", resource_type) is not None


def _roles(props: Mapping[str, Any]) -> list[str]:
    roles = [props["role"]] if isinstance(props.get("role"), str) else []
    policy = props.get("policyData")
    if isinstance(policy, str):  # IAMPolicy: the JSON policy document
        roles += re.findall(r'"role"\s*:\s*"([^"]+)"', policy)
    return roles


def validate_iam_bucket_scope(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """IAM only at bucket scope (plus a node service account's documented roles), never
    owner or editor: a grant above the bucket reaches every other workload in the project."""
    if not is_iam_type(args.resource_type):
        return
    roles = _roles(args.props)
    for role in roles:
        if role in BASIC_ROLES:
            report(f"{role} is a basic role: grant the predefined role the workload needs")
    if args.resource_type in BUCKET_IAM_TYPES:
        return
    member = str(args.props.get("member", ""))
    if (
        args.resource_type == "gcp:projects/iAMMember:IAMMember"
        and len(roles) == 1 and roles[0] in NODE_SERVICE_ACCOUNT_ROLES
        and member.startswith("serviceAccount:")
    ):
        return
    report(f"{args.resource_type} grants {', '.join(roles) or 'roles'} above bucket scope: grant "
           "on the bucket (gcp.storage.BucketIAMMember) instead")


# --- Node service account ----------------------------------------------------------------------

DEFAULT_COMPUTE_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")


def _default_service_account(value: Any) -> bool:
    return value in (None, "", "default") or (isinstance(value, str) and DEFAULT_COMPUTE_SA.match(value) is not None)


def validate_node_service_account(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Nodes never run as the Compute Engine default service account (Editor on the project).

    Node pools set `nodeConfig.serviceAccount`; a cluster sets it for the default pool GKE boots
    before `removeDefaultNodePool` deletes it, and Autopilot sets it in its auto-provisioning
    defaults. Unset means the default account.
    """
    if args.resource_type == NODE_POOL:
        where = "nodeConfig.serviceAccount"
    elif args.resource_type == CLUSTER:
        autopilot = args.props.get("enableAutopilot") is True
        where = "clusterAutoscaling.autoProvisioningDefaults.serviceAccount" if autopilot else "nodeConfig.serviceAccount"
    else:
        return
    account = lookup(args.props, where)
    if _default_service_account(account):
        shown = "unset" if account in (None, "") else repr(account)
        report(f"{where} is {shown}: nodes would run as the Compute Engine default service "
               "account; give them the stack's dedicated node service account")


# --- Secrets -----------------------------------------------------------------------------------

# Environment variables that carry credentials: the Hugging Face token and experiment trackers'
# keys (verl's trainer.logger backends: wandb, mlflow, swanlab, comet, neptune).
SECRET_ENV_NAMES = (
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN",
    "WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_URI",  # may carry credentials (user:password@host): the program keeps it secret
    "SWANLAB_API_KEY", "COMET_API_KEY", "NEPTUNE_API_TOKEN",
)


def _plain_env_secrets(value: Any) -> Iterator[str]:
    """Names of credential env vars given a literal `value` in any container of an object."""
    if isinstance(value, Mapping):
        if value.get("name") in SECRET_ENV_NAMES and "value" in value and value["value"] != SECRET:
            yield value["name"]
        for inner in value.values():
            yield from _plain_env_secrets(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _plain_env_secrets(inner)


def plain_secret_fields(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Paths of inputs that must be secret and are not."""
    found: list[str] = []
    if resource_type == K8S_SECRET:
        for field in ("data", "stringData"):
            for key, value in (props.get(field) or {}).items():
                if value != SECRET:
                    found.append(f"{field}.{key}")
    if resource_type == K8S_PROVIDER and props.get("kubeconfig") not in (None, SECRET):
        found.append("kubeconfig")
    if resource_type == GRPO_RUN:
        access = props.get("access")
        if access not in (None, SECRET) and lookup(props, "access.kubeconfig") not in (None, SECRET):
            found.append("access.kubeconfig")
        env = lookup(props, "runtime_env.env_vars", {}) or {}
        if env != SECRET:
            found += [f"runtime_env.env_vars.{k}" for k in SECRET_ENV_NAMES if k in env and env[k] != SECRET]
    if resource_type.startswith("kubernetes:"):
        found += [f"env {name}" for name in _plain_env_secrets(dict(props))]
    return found


def validate_secrets(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """The Hugging Face token, tracker keys and the kubeconfig only ever travel as secrets.

    A plain value is stored unencrypted in the state file and printed by `pulumi preview --diff`.
    Containers take credentials from a Secret (`valueFrom.secretKeyRef`), never a literal.
    """
    for path in plain_secret_fields(args.resource_type, args.props):
        report(f"{path} holds a credential in plain text: wrap it in pulumi.Output.secret (or "
               "use valueFrom.secretKeyRef)")
