"""An existing bucket under the stack's bucket name: adopted, if it can be this stack's.

`pulumi up` after `pulumi destroy` meets the bucket the destroy kept; a plain create would fail
with 409. It is adopted (Pulumi's `import` option, components/storage/gcs_fuse_storage.py) when
it can be this stack's: in the configured region, with a hierarchical namespace, and not
labelled as another stack's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from typing import Awaitable

import pulumi_gcp as gcp

from components.messages import quoted
from components.preflight.reads import later
from components.schema import names
from components.schema.config import StackConfig
from components.schema.pulumi_forms import Key


@dataclass(frozen=True)
class ExistingBucket:
    name: str
    location: str  # as Cloud Storage reports it, upper case (US-CENTRAL1)
    labels: dict[str, str] = field(default_factory=dict)
    hierarchical_namespace: bool = False


def listing(project: str, name: str) -> Awaitable:
    """Buckets of the project whose name starts with `name`, not sent yet (reads.py).

    `google_storage_buckets` lists by prefix and returns an empty list when nothing matches
    (terraform-provider-google data_source_google_storage_buckets.go), where the singular data
    source fails on a missing bucket.
    """
    return later(
        "gcp:storage/getBuckets:getBuckets", gcp.storage.GetBucketsResult,
        project=project, prefix=name,
    )


def find_bucket(listed, project: str, name: str) -> ExistingBucket | None:
    """The bucket of that name in `listed` (the answer to `listing`), or None. The singular
    data source is asked only once the bucket is known to exist, for what the list does not
    say (its hierarchical namespace)."""
    match = next((b for b in listed.buckets or [] if b.name == name), None)
    if match is None:
        return None
    detail = gcp.storage.get_bucket(name=name, project=project)
    namespaces = detail.hierarchical_namespaces or []
    return ExistingBucket(
        name=name,
        location=match.location,
        labels=dict(match.labels or {}),
        hierarchical_namespace=any(ns.enabled for ns in namespaces),
    )


def adoption_problems(bucket: ExistingBucket, config: StackConfig) -> list[str]:
    key = str(Key("bucketName")) if config.bucket_name else f"{Key('bucketName')} (unset)"
    problems = []
    owner = bucket.labels.get(names.STACK_LABEL)
    mine = names.stack_label(config.stack)
    if owner is not None and owner != mine:
        problems.append(
            f"{key}: the bucket {quoted(bucket.name)} exists and belongs to stack {quoted(owner)} "
            f"(label {names.STACK_LABEL}); two stacks must not share one bucket, or destroying "
            f"one could delete the other's checkpoints: set {Key('bucketName')} to another name"
        )
    if bucket.location.lower() != config.region.lower():
        problems.append(
            f"{Key('region')} = {config.region!r}, but the bucket {quoted(bucket.name)} that "
            f"holds this stack's data is in {bucket.location}, and a bucket cannot move: set "
            f"{Key('region')} to {bucket.location.lower()!r}, or set {Key('bucketName')} to a "
            "new bucket (the old one keeps its checkpoints)"
        )
    if not bucket.hierarchical_namespace:
        problems.append(
            f"{key}: the bucket {quoted(bucket.name)} exists without a hierarchical namespace. "
            "This stack's buckets have one (atomic folder renames for staging and checkpoints "
            "through GCS FUSE), and an existing bucket cannot be given one: set "
            f"{Key('bucketName')} to a new bucket"
        )
    return problems
