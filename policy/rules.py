"""The stack's policies: one copy of every rule, for `pulumi preview` and for the offline plan.

`policy/__main__.py` hands POLICIES to pulumi-policy's PolicyPack, which the Pulumi CLI runs
with `--policy-pack policy`; `tools/policy_check.py` feeds each resource of `build/<stack>/
plan.json` to the same validate functions (`make policy`). Both see resources the same way:
`props` are the engine's inputs (camelCase keys, as in plan.json) and every secret value is the
string SECRET (see `show_secrets_as_the_plan_does`).

The rules live by concern: exposure.py (the Ray head), control_plane.py (the cluster's API
endpoint), access.py (IAM, the nodes' service account, credentials), resources.py (bucket, GPU capacity, fixed names, labels) and
supply_chain.py (images), with what they share in common.py. This module makes them the pack.

What the pack deliberately does not check: what only a live project knows (quota, whether a
reservation exists), and anything the program's own tests already pin (e.g. `replaceOnChanges`,
which the engine does not hand to analyzers; tests/test_day_two.py asserts it).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from policy import pack_config
from policy.access import validate_iam_bucket_scope, validate_node_service_account, validate_secrets
from policy.common import SECRET
from policy.control_plane import validate_control_plane_not_open
from policy.exposure import validate_ray_cluster_network_policy, validate_ray_head_not_exposed
from policy.resources import (
    ALLOW_FORCE_DESTROY,
    validate_bucket_hardened,
    validate_fixed_name_delete_first,
    validate_gcp_labels,
    validate_gpu_capacity,
)
from policy.supply_chain import validate_images_pinned

PACK_NAME = "verl-gke"

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
        name="control-plane-not-open",
        description="The GKE control plane has no public IP endpoint open to every address.",
        validate=validate_control_plane_not_open,
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
