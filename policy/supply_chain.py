"""Supply chain: every image is pinned, and so is every chart and manifest that brings images in.

An image under a floating tag, a chart at a moving version or a manifest read at a branch would
change what the stack runs without a change to the program.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from pulumi_policy import ReportViolation, ResourceValidationArgs

CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def container_images(value: Any) -> Iterator[str]:
    """Every `image` of every container anywhere in a Kubernetes object's inputs."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if key in CONTAINER_LISTS and isinstance(inner, list):
                for container in inner:
                    if isinstance(container, Mapping) and "image" in container:
                        yield container["image"]
            yield from container_images(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from container_images(inner)


def image_pin_problem(image: str) -> str | None:
    """Why `image` is not pinned, or None: a digest, or a tag other than `latest`."""
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]  # a registry port ("host:5000/x") is not a tag
    if ":" not in last:
        return "has no tag (Kubernetes pulls :latest)"
    if last.rsplit(":", 1)[1] == "latest":
        return "uses the floating tag :latest"
    return None


HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
MANIFEST_FILES = ("kubernetes:yaml/v2:ConfigFile", "kubernetes:yaml:ConfigFile")
# A raw GitHub file: .../<owner>/<repo>/<ref>/<path>; only a commit SHA is a fixed ref.
GITHUB_RAW = re.compile(r"^https://raw\.githubusercontent\.com/[^/]+/[^/]+/([^/]+)/")


def _floating_helm_values(value: Any, path: str = "values") -> Iterator[str]:
    """Paths of Helm values that float an image: `tag: latest`, or an unpinned `image:` string."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            here = f"{path}.{key}"
            if key == "tag" and inner == "latest":
                yield here
            elif key == "image" and isinstance(inner, str) and image_pin_problem(inner):
                yield here
            else:
                yield from _floating_helm_values(inner, here)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _floating_helm_values(inner, f"{path}[{index}]")


def validate_images_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Every container image names a tag other than latest, or a digest; so does whatever
    brings images in: a Helm chart (an exact chart version, no floating image value) and a
    manifest file (fetched at a commit, not a branch)."""
    if not args.resource_type.startswith("kubernetes:"):
        return
    for image in container_images(dict(args.props)):
        problem = image_pin_problem(image) if isinstance(image, str) else None
        if problem:
            report(f"image {image!r} {problem}: pin it in components/facts/pins.py")
    if args.resource_type == HELM_RELEASE:
        version = args.props.get("version")
        if not isinstance(version, str) or not re.fullmatch(r"v?\d+\.\d+\.\d+([-+][\w.]+)?", version):
            report(f"Helm chart {args.props.get('chart')!r} version {version!r} is not an exact "
                   "version: the chart's default images would change under the stack")
        for path in _floating_helm_values(args.props.get("values") or {}):
            report(f"{path} floats an image: pin its tag")
    if args.resource_type in MANIFEST_FILES:
        match = GITHUB_RAW.match(str(args.props.get("file", "")))
        if match and not re.fullmatch(r"[0-9a-f]{40}", match.group(1)):
            report(f"manifest {args.props['file']!r} is read at {match.group(1)!r}, not a commit: "
                   "its images change when the branch moves")
