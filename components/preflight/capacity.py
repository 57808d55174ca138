"""Whether the GPU capacity the stack asks for is there: the reservation, or the quota.

Only invokes that answer "none" for what is missing are used, so that "not there" is an answer
rather than an error: a reservation is read with `get_reservation` (a missing one reads as
empty), a block only once the reservation lists it, and the quota from the full list. A failed
invoke, once caught, does not fail the program (since pulumi #6504; components/preflight/
reads.py cites the SDK), so components/preflight/__init__.py turns one into a problem message.

- A reservation (Standard, `provisioning: reservation`) must exist in the zone, be for the
  target's machine type and hold `gpuNodes` VMs; a named block must exist and hold them too.
  Cluster Toolkit's gke-node-pool checks the first as a precondition.
- Spot and flex-start VMs consume the region's preemptible GPU quota ("Spot: Preemptible quota
  is charged", "Flex-start: Preemptible quota is charged": AI Hypercomputer consumption-models
  table); the tutorial's Autopilot compute class asks for Spot capacity too. VMs that consume a
  reservation need no further quota: it was taken when the reservation was made.
"""

from __future__ import annotations

from typing import Awaitable

import pulumi
import pulumi_gcp as gcp

from components.schema.choices import Capacity
from components.preflight.reads import later
from components.schema.config import StackConfig


def first_read(config: StackConfig) -> Awaitable | None:
    """The invoke that answers whether the capacity is there, not sent yet (reads.py); None:
    nothing to read (a target with no preemptible quota to check)."""
    if uses_reservation(config):
        name, _, _ = (config.reservation or "").partition("/reservationBlocks/")
        return later(
            "gcp:compute/getReservation:getReservation", gcp.compute.GetReservationResult,
            name=name, zone=config.zone, project=config.project,
        )
    if config.hardware.preemptible_gpu_quota is None:
        return None
    return later(
        "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos", gcp.cloudquota.GetSQuotaInfosResult,
        parent=f"projects/{config.project}", service="compute.googleapis.com",
    )


def uses_reservation(config: StackConfig) -> bool:
    return not config.autopilot and config.provisioning is Capacity.RESERVATION


def problems(config: StackConfig, answer) -> list[str]:
    """What is wrong with the capacity, from `first_read`'s answer (a named block is read
    here, once the reservation lists it)."""
    if answer is None:
        return []
    if not uses_reservation(config):
        return quota_problems(config, answer)
    name, _, block = (config.reservation or "").partition("/reservationBlocks/")
    found_problems = reservation_problems(config, name, answer)
    if block and not found_problems:
        found_problems = block_problems(config, name, block, answer.block_names or [])
    return found_problems


def reservation_problems(config: StackConfig, name: str, found) -> list[str]:
    key = "verl-gke:reservation"
    listing = f"`gcloud compute reservations list --project {config.project} --zones {config.zone}`"
    # A missing reservation reads as an empty one: the data source clears its id on 404
    # (terraform-provider-google resource_compute_reservation.go, HandleNotFoundError).
    specific = (found.specific_reservations or [None])[0]
    if not found.status or specific is None:
        return [f"{key} = {name!r} does not exist in verl-gke:zone = {config.zone!r}: {listing}"]
    machine = (specific.instance_properties or [None])[0]
    machine_type = getattr(machine, "machine_type", None)
    hw = config.hardware
    if machine_type != hw.machine_type:
        return [
            f"{key} = {name!r} reserves {machine_type}, but target {config.target.value} runs "
            f"{hw.machine_type}: name a reservation of {hw.machine_type}, or change verl-gke:target"
        ]
    if specific.count < config.nodes:
        return [
            f"{key} = {name!r} holds {specific.count} VMs, fewer than verl-gke:gpuNodes = "
            f"{config.nodes}: lower gpuNodes or grow the reservation"
        ]
    free = specific.count - (specific.in_use_count or 0)
    if free < config.nodes:
        # Not an error: on a later `pulumi up` the VMs in use may be this stack's own nodes.
        pulumi.log.warn(
            f"{key} = {name!r} has {free} of {specific.count} VMs free and verl-gke:gpuNodes is "
            f"{config.nodes}: unless the VMs in use are this stack's, nodes will wait for capacity"
        )
    return []


def block_problems(
    config: StackConfig, reservation: str, block: str, blocks: list[str]
) -> list[str]:
    key = "verl-gke:reservation"
    if block not in blocks:
        # Asked only for a listed block: the block data source fails on a missing one.
        return [
            f"{key}: block {block!r} of reservation {reservation!r} does not exist in "
            f"{config.zone} (its blocks: {', '.join(blocks) or 'none'}): `gcloud compute "
            f"reservations blocks list {reservation} --zone {config.zone}` lists them"
        ]
    found = gcp.compute.get_reservation_block(
        name=block, reservation=reservation, zone=config.zone, project=config.project
    )
    if (found.block_count or 0) < config.nodes:
        return [
            f"{key}: block {block!r} holds {found.block_count} VMs, fewer than "
            f"verl-gke:gpuNodes = {config.nodes}: lower gpuNodes or name the reservation alone"
        ]
    return []


def quota_problems(config: StackConfig, listed) -> list[str]:
    hw = config.hardware
    needed = config.nodes * hw.gpus_per_node
    limit = regional_quota(listed, hw.preemptible_gpu_quota, config.region)
    if limit is None:
        # Not listed (Google may rename a quota): say so, do not block.
        pulumi.log.warn(
            f"could not read quota {hw.preemptible_gpu_quota} in {config.region}; check that it "
            f"allows {needed} GPUs: `gcloud beta quotas info describe "
            f"{hw.preemptible_gpu_quota} --service=compute.googleapis.com --project={config.project}`"
        )
        return []
    if limit >= needed:
        return []
    return [
        f"verl-gke:gpuNodes = {config.nodes} needs {needed} {hw.gpu_type} GPUs of preemptible "
        f"quota in {config.region}, and {hw.preemptible_gpu_quota} there is {limit}: request "
        "more (IAM & Admin > Quotas), lower gpuNodes, or use a reservation"
    ]


def regional_quota(listed, quota_id: str, region: str) -> int | None:
    """The quota's value in `region` (or its default for every region); None if not listed.

    Read from the list of all of Compute Engine's quotas (`get_s_quota_infos`), which does not
    fail on an unknown id as the single-quota data source would. Cloud Quotas answers one
    dimensionsInfo per override, each with its `dimensions` (e.g. {"region": "us-central1"}) and
    `details` (a list whose first entry holds the value, a string in pulumi-gcp's result types).
    """
    info = next((q for q in listed.quota_infos or [] if q.quota_id == quota_id), None)
    if info is None:
        return None
    values = {}
    for entry in info.dimensions_infos or []:
        dimensions = dict(entry.dimensions or {})
        details = entry.details or []
        if details and details[0].value not in (None, ""):
            values[dimensions.get("region")] = int(details[0].value)
    return values.get(region, values.get(None))
