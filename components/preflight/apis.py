"""The Google APIs the stack uses: all enabled, or one message with the command that enables
them.

Checked rather than enabled by the stack (`gcp.projects.Service`): the other preflight invokes
run at `pulumi preview`, before any resource exists, so an API the stack would enable itself
would still be off when they run; and enabling APIs is often reserved to project owners.

The reads are issued together (components/preflight/__init__.py): the provider's Service Usage
batcher waits 3 s (`SendAfter`) for further reads before it sends one batch
(terraform-provider-google google/transport/batcher.go, serviceusage_batching.go), so reads made
one after the other cost 3 s each, and reads in flight together cost 3 s in all.
"""

from __future__ import annotations

from typing import Awaitable

import pulumi_gcp as gcp

from components.preflight.reads import later

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


# What the pull-request preview needs besides (.github/workflows/pull-request.yml): its keyless
# login. google-github-actions/auth exchanges the GitHub token at Security Token Service, then
# impersonates the preview service account through the IAM Credentials API (the action's README:
# "Enable the IAM Credentials API"). Nothing of the stack checks these: the login fails first.
PREVIEW_APIS: dict[str, str] = {
    "sts.googleapis.com": "workload identity federation's token exchange",
    "iamcredentials.googleapis.com": "the preview impersonating its service account",
}


def enable_command(project: str, apis: list[str] | None = None) -> str:
    """The one `gcloud services enable` line for `apis` (default: what a pull-request preview
    of this stack needs, REQUIRED_APIS and PREVIEW_APIS)."""
    wanted = apis if apis is not None else [*REQUIRED_APIS, *PREVIEW_APIS]
    return f"gcloud services enable {' '.join(wanted)} --project {project}"


def reads(project: str) -> dict[str, Awaitable]:
    """One `google_project_service` read per API, none sent yet (components/preflight/reads.py)."""
    return {
        api: later(
            "gcp:projects/getProjectService:getProjectService", gcp.projects.GetProjectServiceResult,
            service=api, project=project,
        )
        for api in REQUIRED_APIS
    }


def missing(answers: dict[str, object]) -> list[str]:
    """APIs not enabled, from the answers to `reads`. `google_project_service` reads a disabled
    service as no resource (an empty id) rather than an error (terraform-provider-google
    resource_google_project_service.go; magic-modules #9464); a read that failed outright (an
    exception) says nothing about the API and is reported by the caller."""
    return [
        api for api, answer in answers.items()
        if not isinstance(answer, Exception) and not getattr(answer, "id", None)
    ]


def problem(project: str, apis: list[str]) -> str:
    uses = "; ".join(f"{api}: {REQUIRED_APIS[api]}" for api in apis)
    return (
        f"gcp:project = {project!r} has {len(apis)} API(s) this stack needs turned off ({uses}): "
        f"run `{enable_command(project, apis)}`, then preview again"
    )
