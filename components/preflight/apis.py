"""The Google APIs the stack uses: all enabled, or one message with the command that enables
them, before any other invoke (which would fail on a disabled API with a less helpful error).

Checked rather than enabled by the stack (`gcp.projects.Service`): the other preflight invokes
run at `pulumi preview`, before any resource exists, so an API the stack would enable itself
would still be off when they run; and enabling APIs is often reserved to project owners.
"""

from __future__ import annotations

import pulumi_gcp as gcp

# Each API and what of the stack needs it.
REQUIRED_APIS: dict[str, str] = {
    "serviceusage.googleapis.com": "these checks",
    "cloudresourcemanager.googleapis.com": "project IAM grants of the node service account",
    "iam.googleapis.com": "the node service account",
    "compute.googleapis.com": "networks, reservations, placement policies",
    "container.googleapis.com": "the GKE cluster",
    "containerfilesystem.googleapis.com": "image streaming (GKE image-streaming requirements)",
    "storage.googleapis.com": "the bucket",
    "logging.googleapis.com": "system, workload and Ray logs",
    "monitoring.googleapis.com": "DCGM metrics and Managed Prometheus",
    "artifactregistry.googleapis.com": "image pulls through Artifact Registry",
    "cloudquotas.googleapis.com": "the GPU quota check",
}


def missing(project: str) -> list[str]:
    """APIs not enabled in the project. `google_project_service` reads a disabled service as
    no resource (an empty id) rather than an error (terraform-provider-google
    resource_google_project_service.go; magic-modules #9464)."""
    return [
        api
        for api in REQUIRED_APIS
        if not gcp.projects.get_project_service(service=api, project=project).id
    ]


def problem(project: str, apis: list[str]) -> str:
    uses = "; ".join(f"{api}: {REQUIRED_APIS[api]}" for api in apis)
    return (
        f"gcp:project = {project!r} has {len(apis)} API(s) this stack needs turned off ({uses}): "
        f"run `gcloud services enable {' '.join(apis)} --project {project}`, then preview again"
    )
