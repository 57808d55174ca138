"""The stack's GCP resources: a hardened bucket, explicit GPU capacity, fixed names, labels.

Each rule reads one resource's inputs; gcp-labels also reads pulumi-gcp's Args classes, to know
which types take labels.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from typing import Any, Mapping

from pulumi_policy import ReportViolation, ResourceValidationArgs

from policy.common import BUCKET, NODE_POOL, lookup

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


# --- GPU capacity ------------------------------------------------------------------------------

# Machine families whose VMs carry GPUs (their accelerators come with the machine type).
GPU_MACHINE_PREFIXES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")


def is_gpu_pool(props: Mapping[str, Any]) -> bool:
    machine = lookup(props, "nodeConfig.machineType", "") or ""
    return bool(lookup(props, "nodeConfig.guestAccelerators")) or machine.startswith(GPU_MACHINE_PREFIXES)


def capacity_source(props: Mapping[str, Any]) -> str | None:
    """How a pool gets its GPUs: 'reservation', 'spot', 'flex-start', or None (on demand)."""
    affinity = lookup(props, "nodeConfig.reservationAffinity", {}) or {}
    if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION" and affinity.get("values"):
        return "reservation"
    if lookup(props, "nodeConfig.spot") is True:
        return "spot"
    if lookup(props, "nodeConfig.flexStart") is True or lookup(props, "queuedProvisioning.enabled") is True:
        return "flex-start"
    return None


def validate_gpu_capacity(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A GPU node pool consumes a named reservation, or is explicitly spot or flex-start.

    On-demand A4 / A3 Ultra / A4X capacity is practically never there: such a pool waits forever.
    """
    if args.resource_type == NODE_POOL and is_gpu_pool(args.props) and not capacity_source(args.props):
        report("GPU node pool takes on-demand capacity: set a SPECIFIC_RESERVATION affinity, "
               "spot or flexStart (verl-gke:reservation / verl-gke:provisioning)")


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

# What the program labels everything it owns with (components/schema/config.py resource_labels):
# costs split by stack, target and cluster; preflight refuses a bucket labelled for another stack.
# Spelled out here, not imported: the pack stands alone (its venv has none of components/);
# tests/test_policy.py keeps them equal to components/schema/names.py.
STACK_LABEL = "verl-gke-stack"
TARGET_LABEL = "verl-gke-target"
CLUSTER_LABEL = "verl-gke-cluster"
REQUIRED_LABELS = (STACK_LABEL, TARGET_LABEL, CLUSTER_LABEL)


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
