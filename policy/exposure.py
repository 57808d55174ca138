"""Ray head exposure: nothing outside the cluster reaches a Ray head; a NetworkPolicy guards it.

Both are stack policies: whether a Service or an Ingress reaches a head, and whether a
NetworkPolicy selects one, shows only in the RayClusters, Services and policies of the stack.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from pulumi_policy import ReportViolation, StackValidationArgs

from policy.common import INGRESS_TYPES, K8S_SERVICE, NETWORK_POLICY, RAY_CLUSTER, lookup

EXPOSED_SERVICE_TYPES = ("LoadBalancer", "NodePort")


def _namespace(props: Mapping[str, Any]) -> str:
    return lookup(props, "metadata.namespace") or "default"


def _selects_ray_head(selector: Mapping[str, Any] | None) -> bool:
    """A Service selector that reaches head pods: it names the head, or a cluster without a role."""
    selector = selector or {}
    if selector.get("ray.io/node-type") == "head":
        return True
    return "ray.io/cluster" in selector and "ray.io/node-type" not in selector


def _ingress_backends(props: Mapping[str, Any]) -> Iterator[str]:
    default = lookup(props, "spec.defaultBackend.service.name")
    if default:
        yield default
    for rule in lookup(props, "spec.rules", []) or []:
        for path in lookup(rule, "http.paths", []) or []:
            name = lookup(path, "backend.service.name")
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
                    report(f"Ingress {lookup(r.props, 'metadata.name')!r} routes to the Ray head "
                           f"Service {backend!r}", r.urn)


def _check_ray_clusters(resources: list[Any], report: ReportViolation) -> set[tuple[str, str]]:
    """Reports RayClusters that ask KubeRay to expose their head; their head Services' names."""
    found = set()
    for r in resources:
        if r.resource_type != RAY_CLUSTER:
            continue
        name = lookup(r.props, "metadata.name")
        found.add((_namespace(r.props), f"{name}-head-svc"))
        service_type = lookup(r.props, "spec.headGroupSpec.serviceType")
        if service_type in EXPOSED_SERVICE_TYPES:
            report(f"RayCluster {name!r} asks KubeRay for a {service_type} head Service: use "
                   "ClusterIP and `kubectl port-forward`", r.urn)
        if lookup(r.props, "spec.headGroupSpec.enableIngress"):
            report(f"RayCluster {name!r} sets headGroupSpec.enableIngress: the head must not "
                   "be reachable from outside the cluster", r.urn)
    return found


def _check_services(resources: list[Any], report: ReportViolation) -> set[tuple[str, str]]:
    """Reports Services that expose a Ray head outside the cluster; every Service selecting one."""
    found = set()
    for r in resources:
        if r.resource_type != K8S_SERVICE or not _selects_ray_head(lookup(r.props, "spec.selector")):
            continue
        name = lookup(r.props, "metadata.name")
        found.add((_namespace(r.props), name))
        service_type = lookup(r.props, "spec.type")
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
        labels = lookup(r.props, "spec.podSelector.matchLabels", {}) or {}
        if "Ingress" in (lookup(r.props, "spec.policyTypes", []) or []) and labels.get(
            "ray.io/node-type", "head"
        ) == "head":
            guarded.add((_namespace(r.props), labels.get("ray.io/cluster")))
    for r in args.resources:
        if r.resource_type == RAY_CLUSTER:
            key = (_namespace(r.props), lookup(r.props, "metadata.name"))
            if key not in guarded:
                report(f"RayCluster {key[1]!r} in namespace {key[0]!r} has no NetworkPolicy with "
                       "policyTypes [Ingress] selecting its head (ray.io/cluster: "
                       f"{key[1]})", r.urn)
