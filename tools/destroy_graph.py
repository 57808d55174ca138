"""The order `pulumi destroy` deletes a plan's resources in, from the dependencies plan.json records.

The engine deletes a resource only after everything that depends on it is gone (pulumi/pulumi
pkg/resource/deploy/deployment_executor.go builds the delete steps in reverse topological order
of the dependency graph). A resource depends on: its explicit `dependsOn` (already expanded from
components to their custom children by the SDK), the resources behind its input values
(`inputsFrom`), its provider, and its parent. Component resources are never deleted by a
provider; they only carry edges, which the recorded URNs already see through.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

Resource = Mapping[str, Any]


def dependencies(resource: Resource) -> set[str]:
    """URNs `resource` depends on: what `pulumi destroy` deletes only after it."""
    found = set(resource.get("dependsOn") or [])
    for urns in (resource.get("inputsFrom") or {}).values():
        found.update(urns)
    provider = (resource.get("options") or {}).get("provider")
    if provider:
        found.add(provider)
    if resource.get("parent"):
        found.add(resource["parent"])
    return found


def deleted_before(resources: Iterable[Resource]) -> dict[str, set[str]]:
    """For each custom resource, every custom resource whose delete must finish before its own
    starts (its direct and indirect dependents)."""
    resources = list(resources)
    custom = {r["urn"] for r in resources if r.get("custom", True)}
    dependents: dict[str, set[str]] = {r["urn"]: set() for r in resources}
    for r in resources:
        for dependency in dependencies(r):
            dependents.setdefault(dependency, set()).add(r["urn"])
    closure: dict[str, set[str]] = {}

    def walk(urn: str) -> set[str]:
        if urn not in closure:
            closure[urn] = set()  # the graph is acyclic (the engine refuses cycles)
            found: set[str] = set()
            for dependent in dependents.get(urn, ()):
                found.add(dependent)
                found |= walk(dependent)
            closure[urn] = found
        return closure[urn]

    return {urn: walk(urn) & custom for urn in custom}


def first_deleted(resources: Iterable[Resource]) -> set[str]:
    """The custom resources `pulumi destroy` can delete first: no custom resource depends on them."""
    return {urn for urn, before in deleted_before(resources).items() if not before}
