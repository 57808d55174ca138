"""Helm releases of the charts pinned in components/facts/pins.py."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.facts.pins import HelmChart


def pinned_release(
    resource_name: str,
    release_name: str,
    chart: HelmChart,
    namespace: pulumi.Input[str],
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v3.Release:
    """Install `chart` at its pinned version as `release_name` in `namespace`."""
    return k8s.helm.v3.Release(
        resource_name,
        k8s.helm.v3.ReleaseArgs(
            name=release_name,
            chart=chart.chart,
            version=chart.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
            namespace=namespace,
            values=values,
        ),
        opts=opts,
    )
