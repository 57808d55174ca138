"""Every name the stack gives a Google Cloud object, derived in one place, with its limit.

Defaults carry the stack's name, so two stacks of this project in one GCP project (say `a4` and
`a4x`) never reach for the same cluster, bucket, VPC or placement policy. Each derived name is
checked against the rule of the API that receives it, and a name that breaks one is refused at
config time, naming the key that sets it. Kubernetes object names live inside one cluster and
are fixed by the components.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from components.messages import quoted

# GKE: "The name must start with a lowercase letter, and can contain up to 40 lowercase
# letters, numbers, and hyphens" (container.v1 Cluster.name; gcloud container clusters create).
CLUSTER_NAME_MAX = 40
_CLUSTER_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# Compute Engine resource names (networks, subnetworks, firewalls, resource policies): RFC 1035,
# "1-63 characters long and match the regular expression [a-z]([-a-z0-9]*[a-z0-9])?"
# (compute.v1 Network.name and the others).
GCE_NAME_MAX = 63
_GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# Labels (GCS buckets, GCE and GKE resources): values of at most 63 lowercase letters, digits,
# '_' and '-' (cloud.google.com/resource-manager/docs/labels-overview#requirements).
LABEL_VALUE_MAX = 63

STACK_LABEL = "verl-gke-stack"
TARGET_LABEL = "verl-gke-target"
CLUSTER_LABEL = "verl-gke-cluster"
DEFAULT_CLUSTER_PREFIX = "verl"
A4X_TOPOLOGY = "1x72"


def stack_slug(stack: str) -> str:
    """The stack's name as name material: lowercase letters, digits and single hyphens."""
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9]+", "-", stack.lower())).strip("-")


def default_cluster_name(stack: str) -> str:
    return f"{DEFAULT_CLUSTER_PREFIX}-{stack_slug(stack) or 'stack'}"


def stack_label(stack: str) -> str:
    return (stack_slug(stack) or "stack")[:LABEL_VALUE_MAX]


# Compute Engine names of the A4 / A3 Ultra node networks (components/network/rdma_networks.py).
def network_name(prefix: str) -> str:
    return f"{prefix}-net"


def subnet_name(prefix: str) -> str:
    return f"{prefix}-sub"


def rdma_subnet_name(prefix: str, index: int) -> str:
    return f"{prefix}-sub-{index}"


def firewall_name(prefix: str) -> str:
    return f"{prefix}-internal"


def placement_policy_name(cluster: str) -> str:
    """A4X's workload policy: regional and project-wide, so named after the cluster."""
    return f"{cluster}-{A4X_TOPOLOGY}-placement"


def cluster_name_problem(key: str, name: str) -> str | None:
    if len(name) <= CLUSTER_NAME_MAX and _CLUSTER_NAME.fullmatch(name):
        return None
    return (
        f"{key} = {quoted(name)} is not a GKE cluster name: use at most {CLUSTER_NAME_MAX} "
        "lowercase letters, digits and '-', starting with a letter and ending with a letter or "
        "digit"
    )


def gce_name_problem(key: str, name: str, what: str) -> str | None:
    """Why `name`, derived from `key`, cannot name a Compute Engine `what`; None if it can."""
    if _GCE_NAME.fullmatch(name):
        return None
    return (
        f"{key} makes the {what} name {quoted(name)}, which Compute Engine refuses (at most "
        f"{GCE_NAME_MAX} lowercase letters, digits and '-', starting with a letter): set a "
        f"shorter {key}"
    )


def bucket_name_problems(key: str, name: str) -> list[str]:
    """Cloud Storage's bucket naming rules (cloud.google.com/storage/docs/buckets#naming)."""
    problems = []
    shown = quoted(name)
    parts = name.split(".")
    if not re.fullmatch(r"[a-z0-9][-_.a-z0-9]*[a-z0-9]", name):
        problems.append(
            f"{key} = {shown} is not a valid bucket name: use lowercase letters, digits, '-', "
            "'_' and '.', starting and ending with a letter or digit"
        )
    if "." not in name and not 3 <= len(name) <= 63:
        problems.append(f"{key} = {shown} has {len(name)} characters: a bucket name has 3 to 63")
    if "." in name:
        if len(name) > 222 or any(not 1 <= len(p) <= 63 for p in parts):
            problems.append(
                f"{key} = {shown}: a dotted bucket name has at most 222 characters and 1 to 63 "
                "between dots"
            )
        if _is_ip_address(name):
            problems.append(f"{key} = {shown} looks like an IP address, which Cloud Storage refuses")
    if name.startswith("goog") or re.search(r"g[o0][o0]g[l1]e", name):
        problems.append(
            f"{key} = {shown}: bucket names cannot start with 'goog' or contain 'google' (or "
            "look-alikes such as 'g00gle'): choose another name"
        )
    return problems


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


# The stack's primary network (components/network/primary_network.py).
def primary_network_name(cluster: str) -> str:
    return f"{cluster}-net"


def primary_subnet_name(cluster: str) -> str:
    return f"{cluster}-sub"


def router_name(cluster: str) -> str:
    return f"{cluster}-router"


def nat_name(cluster: str) -> str:
    return f"{cluster}-nat"


# Artifact Registry repository ids: "up to 63 characters, lowercase letters, numbers, and
# hyphens, starting with a letter" (artifactregistry.v1 Repository name rules).
def mirror_repository_id(cluster: str) -> str:
    return f"{cluster}-dockerhub"


# IAM service account ids: "6-30 characters ... [a-z]([-a-z0-9]*[a-z0-9])" (iam.v1
# CreateServiceAccountRequest.accountId).
SERVICE_ACCOUNT_ID_MAX = 30


def node_service_account_id(cluster: str) -> str:
    """`<cluster>-nodes`, or for a long cluster name its start and a digest of the whole (two
    long names that share a start still get two accounts)."""
    wanted = f"{cluster}-nodes"
    if len(wanted) <= SERVICE_ACCOUNT_ID_MAX:
        return wanted
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:6]
    head = cluster[: SERVICE_ACCOUNT_ID_MAX - len(digest) - len("--nodes")].rstrip("-")
    return f"{head}-{digest}-nodes"


# Labels (cloud.google.com/resource-manager/docs/labels-overview#requirements): keys start with
# a lowercase letter; keys and values hold lowercase letters, digits, '_' and '-', at most 63;
# a resource has at most 64.
LABEL_KEY = re.compile(r"[a-z][-_a-z0-9]{0,62}")
LABEL_VALUE = re.compile(r"[-_a-z0-9]{0,63}")
MAX_LABELS = 64
RESERVED_LABEL_PREFIX = "verl-gke-"


def label_value(text: str) -> str:
    """Any text as a label value: lowercase, other characters as '-', at most 63."""
    return re.sub(r"[^-_a-z0-9]", "-", text.lower())[:LABEL_VALUE_MAX]


def label_problems(key: str, labels: dict[str, str], own: int) -> list[str]:
    """The user's labels against GCP's rules; `own` labels the stack adds to every resource."""
    problems = []
    for name, value in labels.items():
        if not LABEL_KEY.fullmatch(str(name)):
            problems.append(
                f"{key}: label key {quoted(name)} is invalid: use at most 63 lowercase letters, "
                "digits, '_' and '-', starting with a letter"
            )
        elif name.startswith(RESERVED_LABEL_PREFIX):
            problems.append(
                f"{key}: label key {quoted(name)} is the stack's own ({RESERVED_LABEL_PREFIX}*): "
                "choose another key"
            )
        if not isinstance(value, str) or not LABEL_VALUE.fullmatch(value):
            problems.append(
                f"{key}.{name} = {quoted(value)} is not a label value: use at most 63 lowercase "
                "letters, digits, '_' and '-'"
            )
    if len(labels) + own > MAX_LABELS:
        problems.append(
            f"{key} has {len(labels)} labels; with the stack's {own} that is more than the "
            f"{MAX_LABELS} a resource can carry: remove {len(labels) + own - MAX_LABELS}"
        )
    return problems
