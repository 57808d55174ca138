"""What the program asks the live project before it registers any resource.

These are invokes (data sources), which Pulumi runs at `pulumi preview` as well as at `up`, so a
pull-request preview already says what would fail. Every problem is reported together, as a
ConfigError naming the key to change and the fix; nothing has been created when it is raised.

- apis.py: the Google APIs the stack uses are enabled.
- the GKE version a new cluster gets (components/cluster/gke_version.py).
- capacity.py: the reservation exists and fits, or the preemptible GPU quota does.
- bucket.py: an existing bucket under the stack's name is adopted, if it can be this stack's.

Every read whose arguments the config already gives is issued in one round, all in flight
together; only what depends on an answer (a reservation block, an existing bucket's details)
follows in a second. Each invoke waits for the provider and the API (Service Usage batches its
reads over 3 s), so rounds, not invokes, are what preflight adds to every preview and up
(`make bench`: bench/preflight_bench.py). A read that fails because its API is off is not
reported for itself: the API message says what to do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime.sync_await import _sync_await

from components.cluster import gke_version
from components.preflight import apis, bucket, capacity
from components.preflight.bucket import ExistingBucket, adoption_problems
from components.schema.config import ConfigError, StackConfig


@dataclass(frozen=True)
class Preflight:
    gke_version: str  # the minor alias a new cluster is created at (`1.34`)
    bucket: ExistingBucket | None  # None: the stack creates it


def run(config: StackConfig) -> Preflight:
    """Ask the project; raise ConfigError with every problem found."""
    reads: dict[str, pulumi.Output | None] = {
        **{f"api:{api}": read for api, read in apis.reads(config.project).items()},
        "versions": gke_version.offered_output(config.project, config.region),
        "capacity": capacity.first_read(config),
        "buckets": bucket.listing(config.project, config.bucket),
    }
    answers = together(reads)
    missing = apis.missing({k[len("api:"):]: v for k, v in answers.items() if k.startswith("api:")})
    if missing:
        raise ConfigError([apis.problem(config.project, missing)])
    failed = [f"could not ask the project ({key}): {a}" for key, a in answers.items() if isinstance(a, Exception)]
    if failed:
        raise ConfigError(failed)

    problems: list[str] = []
    offered = gke_version.channel_versions(answers["versions"])
    choice = gke_version.pick(offered, config.hardware.min_gke_version)
    if choice is None:
        problems.append(
            gke_version.problem(
                offered, config.hardware.min_gke_version, config.target.value, config.region
            )
        )
    problems += capacity.problems(config, answers["capacity"])
    existing = bucket.find_bucket(answers["buckets"], config.project, config.bucket)
    if existing is not None:
        problems += adoption_problems(existing, config)
    if problems:
        raise ConfigError(problems)
    return Preflight(gke_version=choice.alias if choice else "", bucket=existing)


def together(reads: dict[str, pulumi.Output | None]) -> dict[str, Any]:
    """The answer to every read (None stays None), waited for at once: all are in flight before
    the first answer arrives. A failed invoke is its exception, caught (it does not fail the
    program: capacity.py's docstring cites the SDK).

    The program must know the answers before it registers anything, so this blocks the way
    the SDK's own synchronous invokes do (pulumi/runtime/invoke.py `invoke` -> `_sync_await`).
    """
    pending = {key: read for key, read in reads.items() if read is not None}

    async def wait() -> list[Any]:
        return await asyncio.gather(*(read.future() for read in pending.values()), return_exceptions=True)

    answers = dict(zip(pending, _sync_await(wait())))
    return {key: answers.get(key) for key in reads}
