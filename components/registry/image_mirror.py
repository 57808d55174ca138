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

Not done here: Artifact Registry's image prewarming, which fills the image streaming cache
before any node asks (docs.cloud.google.com/artifact-registry/docs/prewarm-images). The API
exists (`projects.locations.repositories.prewarmArtifact`, POST
`v1/{repository}:prewarmArtifact`, body `PrewarmArtifactRequest` {tag | version: the full
`projects/*/locations/*/repositories/*/packages/*/tags|versions/*` name, platform {architecture,
os}, streamLocation, retentionDays (default 3), force}, answering a long-running Operation;
`checkPrewarmedArtifact` reports state CACHING / ACTIVE / FAILED: artifactregistry v1 discovery
document, revision 20261031, in google-api-python-client), but not for this repository, on a
fresh project, as far as anything published says:
- it names a tag or version of the repository, and a remote repository holds one only after a
  client has pulled it through (a remote repository downloads and caches a package version the
  first time it is requested: Artifact Registry, "Create remote repositories",
  artifact-registry/docs/repositories/remote-repo); nothing documents a prewarm that makes a
  remote repository fetch from upstream, so at the start of a first `up` it would name nothing;
- multi-architecture images are not supported, a per-architecture version must be named
  (prewarm-images, Limitations; the request's `platform` field is documented no further), and
  whether the pinned tags are single-architecture manifests or indexes was not read (the
  registry is not reachable from where this is written);
- GKE image streaming on arm64 (A4X) nodes is documented nowhere that was found;
- prewarmed images count against 100 GB per consumer project, and the cache expires (3 days by
  default), so a later `up` would have to warm it again.
A copy of the image into a standard repository first (which a prewarm could then name) would
move ~30 GB through whatever runs the copy, on every `up` whose cache expired. Instead the
pre-pull DaemonSet (components/cluster/image_prepull.py) makes the A4 / A3 Ultra system pool,
which exists ~10 minutes before the GPU nodes, the repository's first client: its pull fetches
the layers into the region, and each GPU node starts its own pull as it registers.
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


# Host names of Docker Hub itself (docker/distribution reference/normalize.go: `docker.io` is
# the default domain, `index.docker.io` its legacy name; registry-1 is the API host).
DOCKER_HUB_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")


def docker_hub_path(image: str) -> str:
    """A Docker Hub reference without its host: `docker.io/verlai/verl:t` -> `verlai/verl:t`."""
    host, _, rest = image.partition("/")
    return rest if rest and host in DOCKER_HUB_HOSTS else image


def other_registry(image: str) -> str | None:
    """The registry host of a reference that is not Docker Hub's (`nvcr.io/nvidia/x:t` ->
    `nvcr.io`), or None: a first path part with a dot or a port, or `localhost`, is a host."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return None if first in DOCKER_HUB_HOSTS else first
    return None


def mirrored(image: str, region: str, project: str, repository_id: str) -> str:
    """`verlai/verl:tag` -> `<region>-docker.pkg.dev/<project>/<repo>/verlai/verl:tag`.

    Docker Hub's official images live under `library/` (`python:3` is `library/python:3`), which
    a remote repository's path must spell out; digests (`@sha256:...`) carry over unchanged.
    Docker Hub's own host names (`docker.io/verlai/verl:tag`, `index.docker.io/...`) name the
    same image and are mirrored as the bare form is; another registry's image is returned as it
    is (pulled directly: `other_registry`).
    """
    image = docker_hub_path(image)
    if other_registry(image):
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
        self._warned: set[str] = set()  # another registry's images, said once each
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
        if (host := other_registry(image)) and image not in self._warned:
            # Once per image: the RayCluster and the pre-pull DaemonSet both ask for the verl one.
            self._warned.add(image)
            pulumi.log.warn(
                f"image {image} is pulled directly from {host}, not through the stack's Docker "
                "Hub mirror: no regional cache and no image streaming for it (push it to an "
                "Artifact Registry repository of your own to get both)"
            )
        return mirrored(image, args.region, args.project, args.repository_id)
