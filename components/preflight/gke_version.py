"""The GKE version a new cluster starts at: resolved when the program runs, never hard-coded.

The Google provider sends `min_master_version` as the new cluster's `initialClusterVersion`
(terraform-provider-google-beta @93c65b2d60, the provider pulumi-gcp bridges,
resource_container_cluster.go:3203: `InitialClusterVersion: d.Get("min_master_version")`), and
GKE stops offering a patch version for new clusters within months. So the program asks GKE,
through the `google_container_engine_versions` data source (an invoke: it runs at `pulumi
preview` too), what the REGULAR channel offers in the cluster's location today, and sends the
*minor alias* of that version (`1.34`), not the patch:

- container.v1 `Cluster.initialClusterVersion`: "1.X": picks the highest valid patch+gke.N patch
  in the 1.X version" (discovery document in google-api-python-client, revision 20261027).
- The cluster ignores changes to `minMasterVersion` (a later, newer default must not become an
  upgrade request), and the engine copies an ignored input's stored value into a replacement
  (pulumi/pulumi step_generator.go processIgnoreChanges). A stored exact patch would be retired
  by the time a replacement needs it ("Master version ... is unsupported"); a minor alias is
  valid for as long as GKE offers that minor. Stacks created before the alias still store a
  patch: docs/operations.md says how to move them onto the alias once.

A target's floor (A4X's DRANET needs 1.34.1-gke.1829001) is checked against the lowest patch the
alias can give a cluster of the channel: the newest of the channel's own versions of that minor
(`ChannelVersions.certain_patch`). The data source reports two of them: the channel's
`defaultVersion`, and `latest`, the first of the channel's `validVersions` (beta
data_source_google_container_engine_versions.go:152-160). `valid_master_versions` is every
channel's list (ServerConfig.validMasterVersions, :113-118), so a patch found only there may be
one the REGULAR channel does not offer (REAL-PROVIDER-REVIEW-3 finding 4); it is not used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Awaitable

import pulumi_gcp as gcp

from components.preflight.reads import later
from components.forms.pulumi_forms import Key

CHANNEL = "REGULAR"
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?")


def version_key(version: str) -> tuple[int, int, int, int]:
    """`1.34.1-gke.1829001` as a tuple that sorts the way GKE orders versions."""
    match = _VERSION.fullmatch(version)
    if not match:
        raise ValueError(f"not a GKE version: {version!r}")
    return tuple(int(part or 0) for part in match.groups())  # type: ignore[return-value]


def minor(version: str) -> str:
    """`1.34.6-gke.1129000` -> `1.34`, the alias `initialClusterVersion` accepts."""
    major, minor_, *_ = version_key(version)
    return f"{major}.{minor_}"


@dataclass(frozen=True)
class ChannelVersions:
    """What GKE offers new clusters of one release channel in one location."""

    default: str | None  # the channel's defaultVersion (releaseChannelDefaultVersion[channel])
    latest: str | None  # the first of the channel's validVersions (releaseChannelLatestVersion)

    def certain_patch(self, minor_alias: str) -> str | None:
        """The newest of the channel's own versions of `minor_alias`: the alias resolves to the
        highest valid patch of that minor, so a cluster of the channel gets at least this one."""
        patches = [
            v for v in (self.default, self.latest)
            if v and _VERSION.fullmatch(v) and minor(v) == minor_alias
        ]
        return max(patches, key=version_key, default=None)


@dataclass(frozen=True)
class Choice:
    """The version a new cluster is asked for, and the patch it gets at least."""

    alias: str  # `1.34`: sent as min_master_version
    at_least: str  # the channel's newest known patch of that minor (certain_patch)


def offered_read(project: str, location: str) -> Awaitable:
    """The engine-versions invoke, not sent yet (components/preflight/reads.py)."""
    return later(
        "gcp:container/getEngineVersions:getEngineVersions", gcp.container.GetEngineVersionsResult,
        project=project, location=location,
    )


def channel_versions(result, channel: str = CHANNEL) -> ChannelVersions:
    """ChannelVersions of one channel from a getEngineVersions result."""
    return ChannelVersions(
        default=(result.release_channel_default_version or {}).get(channel),
        latest=(result.release_channel_latest_version or {}).get(channel),
    )


def pick(versions: ChannelVersions, floor: str | None) -> Choice | None:
    """The minor of the channel's default if the channel surely gives that minor at or above
    the floor, else the minor of the channel's latest if it does; else None.

    The default is what GKE itself would create, so its minor is preferred; the latest of the
    same channel is still a version GKE offers new clusters of that channel.
    """
    for candidate in (versions.default, versions.latest):
        if not candidate:
            continue
        alias = minor(candidate)
        at_least = versions.certain_patch(alias) or candidate
        if floor is None or version_key(at_least) >= version_key(floor):
            return Choice(alias=alias, at_least=at_least)
    return None


def problem(
    versions: ChannelVersions, floor: str | None, target: str, location: str
) -> str:
    """Why no offered version will do, and what to do about it."""
    have = ", ".join(
        f"{kind} {version}"
        for kind, version in (("default", versions.default), ("latest", versions.latest))
        if version
    ) or "no version"
    return (
        f"{Key('region')} = {location!r}: target {target} needs GKE {floor} or newer, but the "
        f"{CHANNEL} channel there offers {have} for new clusters. Choose a region that offers it "
        f"(`gcloud container get-server-config --region <region> --flatten=channels "
        f"--filter=channels.channel={CHANNEL}`), or wait until GKE rolls it out there"
    )
