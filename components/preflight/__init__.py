"""What the program asks the live project before it registers any resource.

These are invokes (data sources), which Pulumi runs at `pulumi preview` as well as at `up`, so a
pull-request preview already says what would fail. Every problem is reported together, as a
ConfigError naming the key to change and the fix; nothing has been created when it is raised.

- apis.py: the Google APIs the stack uses are enabled (checked first: the rest needs them).
- the GKE version a new cluster gets (components/cluster/gke_version.py).
- capacity.py: the reservation exists and fits, or the preemptible GPU quota does.
- bucket.py: an existing bucket under the stack's name is adopted, if it can be this stack's.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.cluster import gke_version
from components.preflight import apis, capacity
from components.preflight.bucket import ExistingBucket, adoption_problems, find_bucket
from components.schema.config import ConfigError, StackConfig


@dataclass(frozen=True)
class Preflight:
    gke_version: str
    bucket: ExistingBucket | None  # None: the stack creates it


def run(config: StackConfig) -> Preflight:
    """Ask the project; raise ConfigError with every problem found."""
    missing = apis.missing(config.project)
    if missing:
        raise ConfigError([apis.problem(config.project, missing)])
    problems: list[str] = []
    offered = gke_version.offered(config.project, config.region)
    version = gke_version.pick(offered, config.hardware.min_gke_version)
    if version is None:
        problems.append(
            gke_version.problem(
                offered, config.hardware.min_gke_version, config.target.value, config.region
            )
        )
    problems += capacity.problems(config)
    bucket = find_bucket(config.project, config.bucket)
    if bucket is not None:
        problems += adoption_problems(bucket, config)
    if problems:
        raise ConfigError(problems)
    return Preflight(gke_version=version or "", bucket=bucket)
