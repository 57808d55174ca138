"""An existing bucket under the stack's bucket name: adopted, if it can be this stack's; and
the run's files in it, checked once it can be read.

`pulumi up` after `pulumi destroy` meets the bucket the destroy kept; a plain create would fail
with 409. It is adopted (Pulumi's `import` option, components/storage/gcs_fuse_storage.py) when
it can be this stack's: in the configured region, with a hierarchical namespace, and not
labelled as another stack's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Awaitable, Callable

import pulumi_gcp as gcp

from components.facts.layout import DATA_MOUNT
from components.messages import quoted
from components.preflight.reads import later, together
from components.runspec import run_experiment
from components.schema import names
from components.schema.config import StackConfig
from components.forms.pulumi_forms import Key
from components.runspec.run import GrpoRunConfig
from components.runspec.run_inputs import is_gs, mounted


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


# --- The run's files in the bucket, checked at preview ------------------------------------------
# A gs:// working directory or file, and a /data/... file of the user's own, are objects of the
# stack's bucket: listed here (their directory's objects, for "did you mean") and, for the
# reward file, read and checked as a local one is (components/runspec/run_experiment.py). A
# parquet file's columns are not read here: the provider reads an object whole.
OBJECTS = "gcp:storage/getBucketObjects:getBucketObjects"
CONTENT = "gcp:storage/getBucketObjectContent:getBucketObjectContent"


def brought_objects(run: GrpoRunConfig, bucket: str) -> dict[str, tuple[str, Callable[[str], str]]]:
    """{field: (object name, how an object name is written in that field)} for each file of
    the run in the stack's bucket; the files staging writes (the fields' defaults) are left out."""
    found = {}
    workdir = run.working_dir
    for field in run_experiment.FILE_FIELDS:
        value = getattr(run, field)
        if value is None or value == GrpoRunConfig.model_fields[field].default:
            continue
        if is_gs(value):
            found[field] = (_object(mounted(value)), lambda name: f"gs://{bucket}/{name}")
        elif value.startswith(DATA_MOUNT + "/"):
            found[field] = (_object(value), lambda name: f"{DATA_MOUNT}/{name}")
        elif not value.startswith("/") and workdir is not None and is_gs(workdir):
            base = _object(mounted(workdir))
            found[field] = (f"{base}/{PurePosixPath(value).as_posix()}".lstrip("/"),
                            lambda name, base=base: name[len(base):].lstrip("/") if base else name)
    return found


def _object(mount_path: str) -> str:
    return mount_path[len(DATA_MOUNT):].strip("/")


def brought_problems(
    config: StackConfig, existing: ExistingBucket | None
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the run's files in the stack's bucket: a missing object is
    refused, with the nearest name; a reward file is checked as a local one. Without the bucket
    (not created yet, or an offline plan, which reads none) they are warned about, not checked."""
    run = config.run
    wanted = brought_objects(run, config.bucket)
    if not wanted:
        return [], []
    keys = ", ".join(f"{run_experiment.job_key(f)}={quoted(getattr(run, f))}" for f in wanted)
    if existing is None:
        return [], [
            f"{keys}: not checked, the bucket gs://{config.bucket} does not exist yet (an offline "
            "plan reads no bucket either). Copy the files there before the job starts; "
            "`pulumi preview` checks that each exists (and reads the reward file) once the "
            "bucket does"
        ]
    prefixes = sorted({str(PurePosixPath(name).parent) for name, _ in wanted.values()})
    listed = together({
        prefix: later(OBJECTS, gcp.storage.GetBucketObjectsResult, bucket=config.bucket,
                      prefix="" if prefix == "." else prefix + "/")
        for prefix in prefixes
    })
    problems, warnings, names = [], [], set()
    for prefix, answer in listed.items():
        if isinstance(answer, Exception):
            warnings.append(f"{keys}: could not list gs://{config.bucket}/{prefix} ({answer}), so "
                            "these files are not checked this time")
            return [], warnings
        names.update(o.get("name") if isinstance(o, dict) else o.name
                     for o in answer.bucket_objects or [])
    for field, (name, written) in wanted.items():
        key, value = run_experiment.job_key(field), getattr(run, field)
        if name not in names:
            siblings = [written(n) for n in sorted(names)]
            problems.append(run_experiment.missing_problem(
                key, value, siblings, f"in the stack's bucket (gs://{config.bucket}/{name})"))
        elif field in run_experiment.DATA_FIELDS:
            problem = run_experiment.suffix_problem(key, value)
            problems += [problem] if problem else []
    reward = wanted.get("reward_function_path")
    if reward and reward[0] in names:
        content = together({"reward": later(CONTENT, gcp.storage.GetBucketObjectContentResult,
                                            bucket=config.bucket, name=reward[0])})["reward"]
        if isinstance(content, Exception):
            warnings.append(f"{run_experiment.job_key('reward_function_path')}: could not read "
                            f"gs://{config.bucket}/{reward[0]} ({content}), so it is not checked")
        else:
            problems += run_experiment.reward_source_problems(
                run, run_experiment.job_key, (content.content or "").encode(),
                f"gs://{config.bucket}/{reward[0]}")
    return problems, warnings
