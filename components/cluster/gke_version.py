"""The GKE version a new cluster starts at: resolved when the program runs, never hard-coded.

The Google provider sends `min_master_version` as the new cluster's exact
`initialClusterVersion` (terraform-provider-google resource_container_cluster.go:
`InitialClusterVersion: d.Get("min_master_version")`), and GKE stops offering a patch version
for new clusters within months; a pinned `1.X.Y-gke.N` therefore breaks `pulumi up` one day
("Master version ... is unsupported"). So the program asks GKE, through the
`google_container_engine_versions` data source (an invoke: it runs at `pulumi preview` too),
for the release channel's default version in the cluster's location today, and checks it
against the target's floor (A4X's DRANET needs 1.34.1-gke.1829001).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi_gcp as gcp

CHANNEL = "REGULAR"
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?")


def version_key(version: str) -> tuple[int, int, int, int]:
    """`1.34.1-gke.1829001` as a tuple that sorts the way GKE orders versions."""
    match = _VERSION.fullmatch(version)
    if not match:
        raise ValueError(f"not a GKE version: {version!r}")
    return tuple(int(part or 0) for part in match.groups())  # type: ignore[return-value]


@dataclass(frozen=True)
class ChannelVersions:
    """What GKE offers new clusters of one release channel in one location."""

    default: str | None  # releaseChannelDefaultVersion[channel]
    latest: str | None  # releaseChannelLatestVersion[channel]


def offered(project: str, location: str, channel: str = CHANNEL) -> ChannelVersions:
    result = gcp.container.get_engine_versions(project=project, location=location)
    return ChannelVersions(
        default=(result.release_channel_default_version or {}).get(channel),
        latest=(result.release_channel_latest_version or {}).get(channel),
    )


def pick(versions: ChannelVersions, floor: str | None) -> str | None:
    """The channel's default if it meets the floor, else its latest if that does; else None.

    The default is what GKE itself would create, so it is preferred; the latest of the same
    channel is still a version GKE offers new clusters of that channel.
    """
    for candidate in (versions.default, versions.latest):
        if candidate and (floor is None or version_key(candidate) >= version_key(floor)):
            return candidate
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
        f"verl-gke:region = {location!r}: target {target} needs GKE {floor} or newer, but the "
        f"{CHANNEL} channel there offers {have} for new clusters. Choose a region that offers it "
        f"(`gcloud container get-server-config --region <region> --flatten=channels "
        f"--filter=channels.channel={CHANNEL}`), or wait until GKE rolls it out there"
    )
