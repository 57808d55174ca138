"""Images through Artifact Registry, and image streaming's prerequisites (issue 13, section 1).

GKE image streaming's requirements (kubernetes-engine/docs/how-to/image-streaming): the
Container File System API enabled; Container-Optimized OS with containerd nodes; images in
Artifact Registry (standard or remote repositories) or public Docker Hub images; with a custom
node service account, roles/serviceusage.serviceUsageConsumer; Private Google Access for
private nodes.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from components.cluster.node_identity import NODE_ROLES
from components.facts import pins
from components.facts.hardware import profile
from components.preflight.apis import REQUIRED_APIS
from components.registry.image_mirror import mirrored
from tests.conftest import STACK_MODES, rendered

REPOSITORY = "gcp:artifactregistry/repository:Repository"


def _images(value: Any) -> Iterator[str]:
    """Every `image` of every container in a Kubernetes object, however deep."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "image" and isinstance(inner, str):
                yield inner
            else:
                yield from _images(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _images(inner)


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_every_verl_and_staging_image_comes_through_the_regions_mirror(stack, mode):
    """No pod pulls from Docker Hub: the RayCluster's verl image and the staging Job's Python
    image come from the stack's remote repository in the cluster's region, which they wait for;
    staging never pulls the training image."""
    _, recording = rendered(stack, mode)
    repo = recording.one(REPOSITORY)
    inputs = repo.plain_inputs
    assert (inputs["mode"], inputs["format"], inputs["location"]) == (
        "REMOTE_REPOSITORY", "DOCKER", "us-central1",
    )
    assert inputs["remoteRepositoryConfig"]["dockerRepository"] == {"publicRepository": "DOCKER_HUB"}
    prefix = f"us-central1-docker.pkg.dev/example-project/{inputs['repositoryId']}/"
    pods = [recording.one("kubernetes:ray.io/v1:RayCluster"), recording.one("kubernetes:batch/v1:Job", "staging-job")]
    for pod_owner in pods:
        images = set(_images(pod_owner.plain_inputs["spec"]))
        assert images and all(i.startswith(prefix) for i in images), (pod_owner.name, images)
        assert repo.urn in pod_owner.dependencies
    ray_images, staging_images = (set(_images(p.plain_inputs["spec"])) for p in pods)
    assert f"{prefix}{pins.VERL_IMAGES[profile(stack).arch]}" in ray_images
    # Docker Hub's official images live under library/ in a remote repository.
    assert staging_images == {f"{prefix}library/{pins.STAGING_IMAGE}"}
    assert not any("verlai/verl" in i for i in staging_images)


def test_two_stacks_have_their_own_mirror():
    """The repository id carries the cluster's name, so stacks never share (or delete) one."""
    ids = {rendered(s, "standard")[1].one(REPOSITORY).plain_inputs["repositoryId"] for s in ("a4", "a3u", "a4x")}
    assert ids == {"verl-a4-dockerhub", "verl-a3u-dockerhub", "verl-a4x-dockerhub"}


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("verlai/verl:vllm011.dev7", "r1-docker.pkg.dev/p/m/verlai/verl:vllm011.dev7"),
        ("verlai/verl@sha256:" + "a" * 64, "r1-docker.pkg.dev/p/m/verlai/verl@sha256:" + "a" * 64),
        ("python:3.11", "r1-docker.pkg.dev/p/m/library/python:3.11"),
        ("nvcr.io/nvidia/k8s/dra-driver:v25.3.1", "nvcr.io/nvidia/k8s/dra-driver:v25.3.1"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
    ],
)
def test_docker_hub_references_map_into_the_mirror(image, expected):
    """User images keep their path, official ones gain `library/`, digests carry over, and an
    image of another registry is left alone."""
    assert mirrored(image, "r1", "p", "m") == expected


@pytest.mark.parametrize("stack", ["a4", "a3u", "a4x"])
def test_image_streaming_prerequisites_hold(stack):
    """Every node pool: COS with containerd and image streaming on; the node account holds
    Service Usage Consumer and Artifact Registry Reader; the nodes' subnet has Private Google
    Access; the Container File System API is among those the preflight requires."""
    _, recording = rendered(stack, "standard")
    for pool in recording.of_type("gcp:container/nodePool:NodePool"):
        node = pool.plain_inputs["nodeConfig"]
        assert node["imageType"] == "COS_CONTAINERD", pool.name
        assert node["gcfsConfig"] == {"enabled": True}, pool.name
    assert {"roles/serviceusage.serviceUsageConsumer", "roles/artifactregistry.reader"} <= set(NODE_ROLES)
    subnet = recording.one("gcp:compute/subnetwork:Subnetwork", "primary-network-subnet")
    assert subnet.plain_inputs["privateIpGoogleAccess"] is True
    assert "containerfilesystem.googleapis.com" in REQUIRED_APIS
