"""What the rules share: the resource types they read, how a secret shows, `lookup` in inputs.

Types are the engine's tokens, as plan.json records them.
"""

from __future__ import annotations

from typing import Any, Mapping

SECRET = "[secret]"  # how plan.json (tools/mockrun.py) and the pack show a secret value

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


def lookup(props: Mapping[str, Any] | None, path: str, default: Any = None) -> Any:
    """props["a"]["b"] for path "a.b"; `default` where any step is missing."""
    value: Any = props
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value
