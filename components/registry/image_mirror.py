"""ImageMirror: an Artifact Registry remote repository that caches Docker Hub in the region.

Every node used to pull the ~25 GB verl image from Docker Hub: out of region, under Docker Hub's
pull limits (shared by every node behind the cluster's one Cloud NAT address) and by a tag that
can move. A remote repository (a pull-through cache, `mode: REMOTE_REPOSITORY` with
`public_repository: DOCKER_HUB`) in the cluster's region serves each layer from the region after
its first pull, and is an Artifact Registry repository, which GKE image streaming reads
(kubernetes-engine/docs/how-to/image-streaming, requirements). The nodes' service account reads
it through `roles/artifactregistry.reader` (components/cluster/node_identity.py).

`mirrored` turns a Docker Hub reference into the mirror's; a reference that names another
registry (it has a host with a dot or a port) is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.options import child_options, fixed_name


@dataclass(frozen=True)
class ImageMirrorArgs:
    project: str
    region: str
    repository_id: str  # unique per stack (components/schema/names.py)
    labels: dict[str, str] = field(default_factory=dict)


def registry_host(region: str) -> str:
    return f"{region}-docker.pkg.dev"


def mirrored(image: str, region: str, project: str, repository_id: str) -> str:
    """`verlai/verl:tag` -> `<region>-docker.pkg.dev/<project>/<repo>/verlai/verl:tag`.

    Docker Hub's official images live under `library/` (`python:3` is `library/python:3`), which
    a remote repository's path must spell out; digests (`@sha256:...`) carry over unchanged.
    """
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image  # another registry: not Docker Hub's to mirror
    path = image if "/" in image.split("@", 1)[0] else f"library/{image}"
    return f"{registry_host(region)}/{project}/{repository_id}/{path}"


class ImageMirror(pulumi.ComponentResource):
    repository: gcp.artifactregistry.Repository

    def __init__(
        self, name: str, args: ImageMirrorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:ImageMirror", name, None, opts)
        self._args = args
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-repository",
            gcp.artifactregistry.RepositoryArgs(
                repository_id=args.repository_id,
                project=args.project,
                location=args.region,
                format="DOCKER",
                mode="REMOTE_REPOSITORY",
                description="Docker Hub, cached in the region for the verl-gke cluster",
                remote_repository_config=gcp.artifactregistry.RepositoryRemoteRepositoryConfigArgs(
                    description="Docker Hub",
                    docker_repository=(
                        gcp.artifactregistry.RepositoryRemoteRepositoryConfigDockerRepositoryArgs(
                            public_repository="DOCKER_HUB"
                        )
                    ),
                ),
                labels=args.labels or None,
            ),
            opts=fixed_name(child_options(self, opts), name_field="repositoryId"),
        )
        self.register_outputs({"repository": self.repository.name})

    def ref(self, image: str) -> str:
        """The mirror's reference for a Docker Hub image (plain text: checked at construction
        by the components that take it); pods using it must depend on this component."""
        args = self._args
        return mirrored(image, args.region, args.project, args.repository_id)
