"""Image references a run may name: a tag that names one build, or a digest.

`job.image` is refused when its tag floats (none, `latest`, `nightly`, `main`, ...), and
components/raycluster/ray_cluster_args.py applies the same rule to whatever image it is given: a
restarted pod must train on the build the run started with.
"""

from __future__ import annotations

import re

from components.messages import quoted

# Tags that name a branch or a channel, not a build: they move with every push, as `latest`
# does (a word of the tag, between `.`, `_` or `-`: `vllm023.dev1` is not `dev`).
FLOATING_TAG_WORDS = (
    "latest", "nightly", "main", "master", "dev", "develop", "edge", "stable", "unstable",
    "canary", "rolling",
)
_FLOATING = re.compile(rf"(^|[._-])({'|'.join(FLOATING_TAG_WORDS)})($|[._-])", re.IGNORECASE)


def floating_tag(image: str) -> bool:
    """True when the reference names no fixed build: no tag, or a moving tag (`latest`,
    `nightly`, `main`, ...)."""
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return True  # no tag means `latest`
    tag = last.split(":", 1)[1]
    return _FLOATING.search(tag) is not None


def image_problem(key: str, image: str) -> str | None:
    if not image or any(c.isspace() for c in image):
        return f"{key}={quoted(image)} is not an image reference: use e.g. verlai/verl:vllm023.dev1"
    if floating_tag(image):
        return (
            f"{key}={quoted(image)} has a floating tag (none, or one that moves, such as "
            "latest, nightly or main): a restarted pod could train on another build. Pin a tag "
            "that names one build (e.g. verlai/verl:vllm023.dev1) or a digest "
            "(<image>@sha256:<64 hex>)"
        )
    return None
