"""What the program asks the live project before it registers any resource.

These are invokes (data sources), which Pulumi runs at `pulumi preview` as well as at `up`, so a
pull-request preview already says what would fail. Every problem is reported together, as a
ConfigError naming the key to change and the fix; nothing has been created when it is raised.
Imported by __main__.py; it imports the cluster, the config and the facts below it.

- apis.py: the Google APIs the stack uses are enabled.
- the GKE version a new cluster gets (components/preflight/gke_version.py).
- capacity.py: the reservation exists and fits, or the preemptible GPU quota does; and the
  region's C2 CPU quota holds the Standard cluster's system pool.
- bucket.py: an existing bucket under the stack's name is adopted, if it can be this stack's;
  the run's files in it (a gs:// working directory or file, a /data/... file of the user's)
  exist, and its reward file defines the function verl calls.

Every read whose arguments the config already gives is issued in one round, all in flight
together; only what depends on an answer (a reservation block, an existing bucket's details)
follows in a second. Each invoke waits for the provider and the API (Service Usage batches its
reads over 3 s), so rounds, not invokes, are what preflight adds to every preview and up
(`make bench`: bench/preflight_bench.py). A read that fails because its API is off is not
reported for itself: the API message says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.preflight import gke_version
from components.preflight import apis, bucket, capacity
from components.preflight.bucket import ExistingBucket, adoption_problems
from components.preflight.reads import together
from components.schema.config import ConfigError, StackConfig
from components.forms.pulumi_forms import Key
from components.runspec.run_experiment import image_warnings, job_key

# What each read of the first round asks, as a failure message names it ({key} under the
# project's name when it is shown).
ASKED = {
    **{f"api:{api}": f"whether {api} is enabled" for api in apis.REQUIRED_APIS},
    "versions": "the GKE versions offered in {region}",
    "capacity": "the reservation ({reservation})",
    "quotas": "Compute Engine's quotas (preemptible GPUs, C2 CPUs)",
    "buckets": "the project's buckets (to find {bucketName})",
}


def _asked(read: str) -> str:
    return ASKED[read].format(**{k: Key(k) for k in ("region", "reservation", "bucketName")})


@dataclass(frozen=True)
class Preflight:
    gke_version: str  # the minor alias a new cluster is created at (`1.34`)
    bucket: ExistingBucket | None  # None: the stack creates it


def run(config: StackConfig) -> Preflight:
    """Ask the project; raise ConfigError with every problem found."""
    reads = {
        **{f"api:{api}": read for api, read in apis.reads(config.project).items()},
        "versions": gke_version.offered_read(config.project, config.region),
        "capacity": capacity.reservation_read(config),
        "quotas": capacity.quotas_read(config),
        "buckets": bucket.listing(config.project, config.bucket),
    }
    answers = together(reads)
    missing = apis.missing({k[len("api:"):]: v for k, v in answers.items() if k.startswith("api:")})
    if missing:
        raise ConfigError([apis.problem(config.project, missing)])
    failed = [
        f"gcp:project = {config.project!r}: could not read {_asked(key)} ({answer}). Check that the "
        "credentials `pulumi` runs with can read it (`gcloud auth application-default login`, "
        "the roles in the README's prerequisites), then preview again"
        for key, answer in answers.items() if isinstance(answer, Exception)
    ]
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
    problems += capacity.problems(config, answers["capacity"], answers["quotas"])
    existing = bucket.find_bucket(answers["buckets"], config.project, config.bucket)
    if existing is not None:
        problems += adoption_problems(existing, config)
    brought, warnings = bucket.brought_problems(config, existing)
    problems += brought
    for warning in [*warnings, *image_warnings(config.run, job_key)]:
        pulumi.log.warn(warning)
    if problems:
        raise ConfigError(problems)
    return Preflight(gke_version=choice.alias if choice else "", bucket=existing)
