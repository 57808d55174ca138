"""Where the training runs, as every monitoring query needs to name it."""

from __future__ import annotations

from dataclasses import dataclass

from components.observability import log_shipper
from components.observability.training_log import LogMetric


@dataclass(frozen=True)
class Scope:
    """The stack's cluster and workload, as labels of logs and metrics.

    project / region / cluster_name: the GKE cluster (a regional cluster's log entries carry
    the region as `resource.labels.location`).
    namespace: the workload namespace (`resource.labels.namespace_name` on log entries, the
    `namespace` label Managed Service for Prometheus adds to every scraped series).
    """

    project: str
    region: str
    cluster_name: str
    namespace: str

    def metric_name(self, metric: LogMetric) -> str:
        """The log-based metric's id: unique per cluster in the project, at most 100 characters
        of `A-Za-z0-9_-.,+!*',()%/` (pulumi-gcp 10.2 `logging.Metric.name` docstring)."""
        return f"verl-gke/{self.region}/{self.cluster_name}/{metric.key}"

    def metric_type(self, metric: LogMetric) -> str:
        """The Cloud Monitoring type of a user-defined log-based metric."""
        return f"logging.googleapis.com/user/{self.metric_name(metric)}"

    def shipper_entries(self) -> list[str]:
        """Filter lines selecting the log shipper's entries of this cluster and namespace.

        GKE writes container stdout as `k8s_container` entries labelled with project_id,
        location, cluster_name, namespace_name, pod_name and container_name
        (cloud.google.com/logging/docs/api/v2/resource-list#resource-types, k8s_container).
        """
        return [
            'resource.type="k8s_container"',
            f'resource.labels.project_id="{self.project}"',
            f'resource.labels.location="{self.region}"',
            f'resource.labels.cluster_name="{self.cluster_name}"',
            f'resource.labels.namespace_name="{self.namespace}"',
            f'resource.labels.container_name="{log_shipper.CONTAINER}"',
        ]

    def promql_labels(self) -> str:
        """PromQL matchers for this cluster's workload series in Managed Prometheus."""
        return f'cluster="{self.cluster_name}", namespace="{self.namespace}"'

    def promql_cluster(self) -> str:
        """PromQL matcher for any series of this cluster (DCGM runs in a GKE namespace)."""
        return f'cluster="{self.cluster_name}", location="{self.region}"'
