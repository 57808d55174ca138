"""The stack's policies: one copy of every rule, for `pulumi preview` and for the offline plan.

`policy/__main__.py` hands POLICIES to pulumi-policy's PolicyPack, which the Pulumi CLI runs
with `--policy-pack policy`; `tools/policy_check.py` feeds each resource of `build/<stack>/
plan.json` to the same validate functions (`make policy`). Both see resources the same way:
`props` are the engine's inputs (camelCase keys, as in plan.json) and every secret value is the
string SECRET (see `show_secrets_as_the_plan_does`).

What the pack deliberately does not check: what only a live project knows (quota, whether a
reservation exists), and anything the program's own tests already pin (e.g. `replaceOnChanges`,
which the engine does not hand to analyzers; tests/test_day_two.py asserts it).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from typing import Any, Callable, Iterator, Mapping

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy import pack_config

SECRET = "[secret]"  # how plan.json (tools/mockrun.py) and the pack show a secret value
PACK_NAME = "verl-gke"

BUCKET = "gcp:storage/bucket:Bucket"
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
K8S_PROVIDER = "pulumi:providers:kubernetes"
K8S_SECRET = "kubernetes:core/v1:Secret"
K8S_SERVICE = "kubernetes:core/v1:Service"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
INGRESS_TYPES = ("kubernetes:networking.k8s.io/v1:Ingress", "kubernetes:networking.k8s.io/v1beta1:Ingress")
GRPO_RUN = "pulumi-python:dynamic/verl-gke:GrpoRun"

# What the program labels everything it owns with (components/schema/config.py resource_labels):
# costs split by stack, target and cluster; preflight refuses a bucket labelled for another stack.
# Spelled out here, not imported: the pack stands alone (its venv has none of components/);
# tests/test_policy.py keeps them equal to components/schema/names.py.
STACK_LABEL = "verl-gke-stack"
TARGET_LABEL = "verl-gke-target"
CLUSTER_LABEL = "verl-gke-cluster"
REQUIRED_LABELS = (STACK_LABEL, TARGET_LABEL, CLUSTER_LABEL)


def _get(props: Mapping[str, Any] | None, path: str, default: Any = None) -> Any:
    """props["a"]["b"] for path "a.b"; `default` where any step is missing."""
    value: Any = props
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def _namespace(props: Mapping[str, Any]) -> str:
    return _get(props, "metadata.namespace") or "default"


# --- Ray head exposure -------------------------------------------------------------------------

EXPOSED_SERVICE_TYPES = ("LoadBalancer", "NodePort")


def _selects_ray_head(selector: Mapping[str, Any] | None) -> bool:
    """A Service selector that reaches head pods: it names the head, or a cluster without a role."""
    selector = selector or {}
    if selector.get("ray.io/node-type") == "head":
        return True
    return "ray.io/cluster" in selector and "ray.io/node-type" not in selector


def _ingress_backends(props: Mapping[str, Any]) -> Iterator[str]:
    default = _get(props, "spec.defaultBackend.service.name")
    if default:
        yield default
    for rule in _get(props, "spec.rules", []) or []:
        for path in _get(rule, "http.paths", []) or []:
            name = _get(path, "backend.service.name")
            if name:
                yield name


def validate_ray_head_not_exposed(args: StackValidationArgs, report: ReportViolation) -> None:
    """No LoadBalancer or NodePort Service and no Ingress in front of a Ray head.

    The Ray dashboard (8265) and client port (10001) run arbitrary code for whoever reaches them.
    KubeRay names a cluster's head Service `<cluster>-head-svc` and creates it with the
    RayCluster's `headGroupSpec.serviceType`, so that field counts as a Service too.
    """
    head_services = _check_ray_clusters(args.resources, report) | _check_services(args.resources, report)
    for r in args.resources:
        if r.resource_type in INGRESS_TYPES:
            for backend in _ingress_backends(r.props):
                if (_namespace(r.props), backend) in head_services:
                    report(f"Ingress {_get(r.props, 'metadata.name')!r} routes to the Ray head "
                           f"Service {backend!r}", r.urn)


def _check_ray_clusters(resources: list[Any], report: ReportViolation) -> set[tuple[str, str]]:
    """Reports RayClusters that ask KubeRay to expose their head; their head Services' names."""
    found = set()
    for r in resources:
        if r.resource_type != RAY_CLUSTER:
            continue
        name = _get(r.props, "metadata.name")
        found.add((_namespace(r.props), f"{name}-head-svc"))
        service_type = _get(r.props, "spec.headGroupSpec.serviceType")
        if service_type in EXPOSED_SERVICE_TYPES:
            report(f"RayCluster {name!r} asks KubeRay for a {service_type} head Service: use "
                   "ClusterIP and `kubectl port-forward`", r.urn)
        if _get(r.props, "spec.headGroupSpec.enableIngress"):
            report(f"RayCluster {name!r} sets headGroupSpec.enableIngress: the head must not "
                   "be reachable from outside the cluster", r.urn)
    return found


def _check_services(resources: list[Any], report: ReportViolation) -> set[tuple[str, str]]:
    """Reports Services that expose a Ray head outside the cluster; every Service selecting one."""
    found = set()
    for r in resources:
        if r.resource_type != K8S_SERVICE or not _selects_ray_head(_get(r.props, "spec.selector")):
            continue
        name = _get(r.props, "metadata.name")
        found.add((_namespace(r.props), name))
        service_type = _get(r.props, "spec.type")
        if service_type in EXPOSED_SERVICE_TYPES:
            report(f"Service {name!r} exposes a Ray head as {service_type}: use ClusterIP", r.urn)
    return found


def validate_ray_cluster_network_policy(args: StackValidationArgs, report: ReportViolation) -> None:
    """Every RayCluster has a NetworkPolicy, in its namespace, that restricts ingress to its head.

    Without one, any pod in the cluster (in any namespace) reaches the dashboard's job API.
    """
    guarded: set[tuple[str, str]] = set()
    for r in args.resources:
        if r.resource_type != NETWORK_POLICY:
            continue
        labels = _get(r.props, "spec.podSelector.matchLabels", {}) or {}
        if "Ingress" in (_get(r.props, "spec.policyTypes", []) or []) and labels.get(
            "ray.io/node-type", "head"
        ) == "head":
            guarded.add((_namespace(r.props), labels.get("ray.io/cluster")))
    for r in args.resources:
        if r.resource_type == RAY_CLUSTER:
            key = (_namespace(r.props), _get(r.props, "metadata.name"))
            if key not in guarded:
                report(f"RayCluster {key[1]!r} in namespace {key[0]!r} has no NetworkPolicy with "
                       "policyTypes [Ingress] selecting its head (ray.io/cluster: "
                       f"{key[1]})", r.urn)


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


# --- Bucket ------------------------------------------------------------------------------------

ALLOW_FORCE_DESTROY = "allowForceDestroy"


def validate_bucket_hardened(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Buckets: uniform access, public access prevented, never force-destroyed unless configured.

    `allowForceDestroy` (policy config) is what "configured" means: `make policy` sets it from
    the stack's `verl-gke:deleteBucketOnDestroy`, the workflow likewise (tools/policy_check.py
    --print-config). A force-destroyed bucket takes every checkpoint with it.
    """
    if args.resource_type != BUCKET:
        return
    if args.props.get("uniformBucketLevelAccess") is not True:
        report("uniformBucketLevelAccess must be true: object ACLs bypass the bucket's IAM")
    if args.props.get("publicAccessPrevention") != "enforced":
        report("publicAccessPrevention must be 'enforced'")
    if args.props.get("forceDestroy") is True and not args.get_config().get(ALLOW_FORCE_DESTROY):
        report("forceDestroy deletes every object (checkpoints included) with the bucket: set it "
               "only through verl-gke:deleteBucketOnDestroy")


# --- Images ------------------------------------------------------------------------------------

CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def container_images(value: Any) -> Iterator[str]:
    """Every `image` of every container anywhere in a Kubernetes object's inputs."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if key in CONTAINER_LISTS and isinstance(inner, list):
                for container in inner:
                    if isinstance(container, Mapping) and "image" in container:
                        yield container["image"]
            yield from container_images(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from container_images(inner)


def image_pin_problem(image: str) -> str | None:
    """Why `image` is not pinned, or None: a digest, or a tag other than `latest`."""
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]  # a registry port ("host:5000/x") is not a tag
    if ":" not in last:
        return "has no tag (Kubernetes pulls :latest)"
    if last.rsplit(":", 1)[1] == "latest":
        return "uses the floating tag :latest"
    return None


HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
MANIFEST_FILES = ("kubernetes:yaml/v2:ConfigFile", "kubernetes:yaml:ConfigFile")
# A raw GitHub file: .../<owner>/<repo>/<ref>/<path>; only a commit SHA is a fixed ref.
GITHUB_RAW = re.compile(r"^https://raw\.githubusercontent\.com/[^/]+/[^/]+/([^/]+)/")


def _floating_helm_values(value: Any, path: str = "values") -> Iterator[str]:
    """Paths of Helm values that float an image: `tag: latest`, or an unpinned `image:` string."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            here = f"{path}.{key}"
            if key == "tag" and inner == "latest":
                yield here
            elif key == "image" and isinstance(inner, str) and image_pin_problem(inner):
                yield here
            else:
                yield from _floating_helm_values(inner, here)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _floating_helm_values(inner, f"{path}[{index}]")


def validate_images_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Every container image names a tag other than latest, or a digest; so does whatever
    brings images in: a Helm chart (an exact chart version, no floating image value) and a
    manifest file (fetched at a commit, not a branch)."""
    if not args.resource_type.startswith("kubernetes:"):
        return
    for image in container_images(dict(args.props)):
        problem = image_pin_problem(image) if isinstance(image, str) else None
        if problem:
            report(f"image {image!r} {problem}: pin it in components/facts/pins.py")
    if args.resource_type == HELM_RELEASE:
        version = args.props.get("version")
        if not isinstance(version, str) or not re.fullmatch(r"v?\d+\.\d+\.\d+([-+][\w.]+)?", version):
            report(f"Helm chart {args.props.get('chart')!r} version {version!r} is not an exact "
                   "version: the chart's default images would change under the stack")
        for path in _floating_helm_values(args.props.get("values") or {}):
            report(f"{path} floats an image: pin its tag")
    if args.resource_type in MANIFEST_FILES:
        match = GITHUB_RAW.match(str(args.props.get("file", "")))
        if match and not re.fullmatch(r"[0-9a-f]{40}", match.group(1)):
            report(f"manifest {args.props['file']!r} is read at {match.group(1)!r}, not a commit: "
                   "its images change when the branch moves")


# --- GPU capacity ------------------------------------------------------------------------------

# Machine families whose VMs carry GPUs (their accelerators come with the machine type).
GPU_MACHINE_PREFIXES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")


def is_gpu_pool(props: Mapping[str, Any]) -> bool:
    machine = _get(props, "nodeConfig.machineType", "") or ""
    return bool(_get(props, "nodeConfig.guestAccelerators")) or machine.startswith(GPU_MACHINE_PREFIXES)


def capacity_source(props: Mapping[str, Any]) -> str | None:
    """How a pool gets its GPUs: 'reservation', 'spot', 'flex-start', or None (on demand)."""
    affinity = _get(props, "nodeConfig.reservationAffinity", {}) or {}
    if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION" and affinity.get("values"):
        return "reservation"
    if _get(props, "nodeConfig.spot") is True:
        return "spot"
    if _get(props, "nodeConfig.flexStart") is True or _get(props, "queuedProvisioning.enabled") is True:
        return "flex-start"
    return None


def validate_gpu_capacity(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A GPU node pool consumes a named reservation, or is explicitly spot or flex-start.

    On-demand A4 / A3 Ultra / A4X capacity is practically never there: such a pool waits forever.
    """
    if args.resource_type == NODE_POOL and is_gpu_pool(args.props) and not capacity_source(args.props):
        report("GPU node pool takes on-demand capacity: set a SPECIFIC_RESERVATION affinity, "
               "spot or flexStart (verl-gke:reservation / verl-gke:provisioning)")


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
    account = _get(args.props, where)
    if _default_service_account(account):
        shown = "unset" if account in (None, "") else repr(account)
        report(f"{where} is {shown}: nodes would run as the Compute Engine default service "
               "account; give them the stack's dedicated node service account")


# --- Fixed names -------------------------------------------------------------------------------

# The input that names the cloud object, where it is not `name`.
IDENTITY_INPUTS = {
    "gcp:serviceaccount/account:Account": "accountId",
    "gcp:artifactregistry/repository:Repository": "repositoryId",
}
NEVER_REPLACED = (BUCKET,)  # replacing the bucket is refused outright (components/guards.py)


def fixed_name(resource_type: str, logical_name: str, props: Mapping[str, Any]) -> str | None:
    """The cloud name a GCP resource is created under when the program chose it, else None.

    Pulumi auto-names `name` as `<logical name>-<7 hex>` when the program leaves it unset;
    such a name is new on every replacement, so create-before-delete is safe for it.
    """
    if not resource_type.startswith("gcp:"):
        return None
    value = props.get(IDENTITY_INPUTS.get(resource_type, "name"))
    if not isinstance(value, str) or re.fullmatch(re.escape(logical_name) + r"-[0-9a-f]{7}", value):
        return None
    return value


def validate_fixed_name_delete_first(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A GCP resource with a program-chosen name is replaced delete-first.

    Create-first would ask the API for a second object of the same name: 409, and the
    replacement stops halfway. components/options.py `fixed_name` sets it.
    """
    if args.resource_type in NEVER_REPLACED:
        return
    name = fixed_name(args.resource_type, args.name, args.props)
    if name is not None and args.opts.delete_before_replace is not True:
        report(f"{name!r} is a fixed name: create it with components.options.fixed_name "
               "(deleteBeforeReplace), or a replacement fails with 409 Already exists")


# --- Labels ------------------------------------------------------------------------------------

LABEL_INPUTS = ("labels", "resourceLabels")


@functools.lru_cache(maxsize=None)
def label_input(resource_type: str) -> str | None:
    """The input a GCP resource type takes its labels in, from its pulumi-gcp Args class.

    `gcp:container/cluster:Cluster` -> pulumi_gcp.container.ClusterArgs, whose constructor takes
    `resource_labels`: labelable, under "resourceLabels". None when the Args class has neither
    `labels` nor `resource_labels` (a VPC, a node pool: no labels of its own).
    """
    match = re.fullmatch(r"gcp:([a-zA-Z0-9]+)(?:/[a-zA-Z0-9]+)?:([A-Za-z0-9]+)", resource_type)
    if not match:
        return None
    module, name = match.groups()
    try:
        args_class = getattr(importlib.import_module(f"pulumi_gcp.{module}"), f"{name}Args")
    except (ImportError, AttributeError):
        return None
    parameters = inspect.signature(args_class.__init__).parameters
    for snake, camel in (("labels", "labels"), ("resource_labels", "resourceLabels")):
        if snake in parameters:
            return camel
    return None


def validate_gcp_labels(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Every labelable GCP resource carries the stack's labels (cost and ownership per stack)."""
    key = label_input(args.resource_type) if args.resource_type.startswith("gcp:") else None
    if key is None:
        return
    labels = args.props.get(key) or {}
    missing = [label for label in REQUIRED_LABELS if label not in labels]
    if missing:
        report(f"{key} lacks {', '.join(missing)}: label every labelable resource with the stack")


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
        if access not in (None, SECRET) and _get(props, "access.kubeconfig") not in (None, SECRET):
            found.append("access.kubeconfig")
        env = _get(props, "runtime_env.env_vars", {}) or {}
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


# --- The pack ----------------------------------------------------------------------------------

# No policy sets its own level: policy/config.json does (pack_config.py), and an organisation
# overrides it there, per stack (--policy-pack-config) or in its Pulumi Cloud policy group. A
# policy the config does not name gets the pack's level, PACK_LEVEL.
PACK_LEVEL = EnforcementLevel.MANDATORY

POLICIES = [
    StackValidationPolicy(
        name="ray-head-not-exposed",
        description="No LoadBalancer or NodePort Service and no Ingress in front of a Ray head.",
        validate=validate_ray_head_not_exposed,
    ),
    StackValidationPolicy(
        name="ray-cluster-network-policy",
        description="Every RayCluster has a NetworkPolicy restricting ingress to its head.",
        validate=validate_ray_cluster_network_policy,
    ),
    ResourceValidationPolicy(
        name="iam-bucket-scope-only",
        description="IAM grants only on buckets (and a node account's documented roles), never owner or editor.",
        validate=validate_iam_bucket_scope,
    ),
    ResourceValidationPolicy(
        name="bucket-hardened",
        description="Buckets: uniform access, public access prevention, no force-destroy unless configured.",
        validate=validate_bucket_hardened,
        config_schema=PolicyConfigSchema(
            properties={ALLOW_FORCE_DESTROY: {"type": "boolean", "default": False}},
        ),
    ),
    ResourceValidationPolicy(
        name="images-pinned",
        description="Every container image is pinned (tag other than latest, or digest), and so are charts and manifests.",
        validate=validate_images_pinned,
    ),
    ResourceValidationPolicy(
        name="gpu-capacity-explicit",
        description="GPU node pools consume a reservation, or are explicitly spot or flex-start.",
        validate=validate_gpu_capacity,
    ),
    ResourceValidationPolicy(
        name="nodes-dedicated-service-account",
        description="Nodes never run as the Compute Engine default service account.",
        validate=validate_node_service_account,
    ),
    ResourceValidationPolicy(
        name="fixed-name-delete-first",
        description="GCP resources with a fixed name are replaced delete-first.",
        validate=validate_fixed_name_delete_first,
    ),
    ResourceValidationPolicy(
        name="gcp-labels",
        description="Every labelable GCP resource carries the stack's labels.",
        validate=validate_gcp_labels,
    ),
    ResourceValidationPolicy(
        name="credentials-are-secrets",
        description="The Hugging Face token, tracker keys and the kubeconfig are secrets.",
        validate=validate_secrets,
    ),
]


def settings(
    *overrides: Mapping[str, Any] | None, path: Any = pack_config.DEFAULT_CONFIG
) -> dict[str, pack_config.PolicySettings]:
    """Each policy's level and settings: policy/config.json, then each of `overrides` (documents
    in the --policy-pack-config format) in turn, as the CLI merges them."""
    layers = [pack_config.read(path), *(layer for layer in overrides if layer)]
    return pack_config.resolve(layers, [p.name for p in POLICIES])


def initial_config(path: Any = pack_config.DEFAULT_CONFIG) -> dict[str, dict[str, Any]]:
    """policy/config.json as PolicyPack's `initial_config`: what the CLI starts from before
    applying --policy-pack-config or a policy group's config."""
    return {
        name: {"enforcementLevel": EnforcementLevel(own.level), **own.properties}
        for name, own in settings(path=path).items()
    }


def show_secrets_as_the_plan_does() -> None:
    """Make pulumi-policy hand validations "[secret]" where the engine sent a secret.

    pulumi-policy 1.21.0 decodes a secret-marked input into its plain value before validation
    (pulumi_policy/deserialize.py `_deserialize_property`, `proxy_secrets=False` in Analyze and
    AnalyzeStack), so no Python policy can tell a secret token from a plain one. Replacing the
    value by SECRET instead, as plan.json does, lets `credentials-are-secrets` work the same
    online and offline, and keeps secret values out of the policy process. Remediations
    (`proxy_secrets=True`) keep the SDK's own behaviour.
    """
    from pulumi_policy import deserialize

    if getattr(deserialize._deserialize_property, "_verl_gke", False):
        return
    original: Callable[..., Any] = deserialize._deserialize_property

    @functools.wraps(original)  # keeps the original as __wrapped__ (tests check its shape)
    def deserialize_property(prop: Any, proxy_secrets: bool = False) -> Any:
        if (
            not proxy_secrets
            and isinstance(prop, dict)
            and prop.get(deserialize.SPECIAL_SIG_KEY) == deserialize.SPECIAL_SECRET_SIG
        ):
            return SECRET
        return original(prop, proxy_secrets)

    deserialize_property._verl_gke = True  # type: ignore[attr-defined]
    deserialize._deserialize_property = deserialize_property
