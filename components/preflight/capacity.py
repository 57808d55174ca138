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
- The Standard cluster's system pool (components/cluster/gke_cluster.py: c2-standard-16, 1 to 5
  nodes, surge 1) consumes the region's C2 CPU quota, which a new project may hold small: its
  first node is created about 11 minutes into the first `up`, so a quota below one node and its
  upgrade surge is refused here, and one below the autoscaler's maximum plus the surge warns.
  Compute Engine's quota metric is `C2_CPUS` (compute.v1 discovery document, revision 20261106,
  Quota.metric), `C2-CPUS-per-project-region` in Cloud Quotas (the quota ID Compute Engine's
  quota-exceeded error names: "metric name = compute.googleapis.com/c2_cpus, limit name =
  C2-CPUS-per-project-region"). Autopilot chooses its own machines: nothing to check.
"""

from __future__ import annotations

from typing import Awaitable

import pulumi
import pulumi_gcp as gcp

from components.cluster.gke_cluster import SYSTEM_MACHINE_TYPE, SYSTEM_NODES
from components.schema.choices import Capacity
from components.preflight.reads import later
from components.schema.config import StackConfig
from components.forms.pulumi_forms import Key

C2_CPU_QUOTA = "C2-CPUS-per-project-region"
# The system pool's upgrade surge: nodes created beside the old ones while GKE upgrades or
# recreates the pool (gke_cluster.py _system_pool, upgrade_settings max_surge=1; a test holds
# this to the plan's system pool).
SYSTEM_SURGE = 1


def reservation_read(config: StackConfig) -> Awaitable | None:
    """The reservation invoke, not sent yet (reads.py); None when the GPUs come from quota."""
    if not uses_reservation(config):
        return None
    name, _, _ = (config.reservation or "").partition("/reservationBlocks/")
    return later(
        "gcp:compute/getReservation:getReservation", gcp.compute.GetReservationResult,
        name=name, zone=config.zone, project=config.project,
    )


def quotas_read(config: StackConfig) -> Awaitable | None:
    """The list of Compute Engine's quotas, not sent yet; None when no quota is checked: the
    GPUs come from a reservation and Autopilot has no system pool."""
    if not _checks_gpu_quota(config) and config.autopilot:
        return None
    return later(
        "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos", gcp.cloudquota.GetSQuotaInfosResult,
        parent=f"projects/{config.project}", service="compute.googleapis.com",
    )


def uses_reservation(config: StackConfig) -> bool:
    return not config.autopilot and config.provisioning is Capacity.RESERVATION


def _checks_gpu_quota(config: StackConfig) -> bool:
    return not uses_reservation(config) and config.hardware.preemptible_gpu_quota is not None


def problems(config: StackConfig, reservation, quotas) -> list[str]:
    """What is wrong with the capacity, from the answers of `reservation_read` and
    `quotas_read` (a named block is read here, once the reservation lists it)."""
    found_problems: list[str] = []
    if quotas is not None:
        if _checks_gpu_quota(config):
            found_problems += quota_problems(config, quotas)
        if not config.autopilot:
            found_problems += system_pool_problems(config, quotas)
    if reservation is None:
        return found_problems
    name, _, block = (config.reservation or "").partition("/reservationBlocks/")
    found = reservation_problems(config, name, reservation)
    if block and not found:
        found = block_problems(config, name, block, reservation.block_names or [])
    return found_problems + found


def system_pool_cpus() -> dict[str, int]:
    """C2 vCPUs the system pool takes: its first node with the upgrade surge, and its
    autoscaler's maximum with the surge (a c2-standard-N has N vCPUs, Compute Engine's
    compute-optimized machine family table)."""
    family, _, vcpus = SYSTEM_MACHINE_TYPE.rpartition("-")
    assert family == "c2-standard", SYSTEM_MACHINE_TYPE  # the quota below is C2's
    per_node = int(vcpus)
    return {
        "first": (1 + SYSTEM_SURGE) * per_node,
        "most": (SYSTEM_NODES[1] + SYSTEM_SURGE) * per_node,
    }


def system_pool_problems(config: StackConfig, listed) -> list[str]:
    """Whether the region's C2 CPU quota holds the system pool (Standard)."""
    need = system_pool_cpus()
    per_node = need["first"] // (1 + SYSTEM_SURGE)
    limit = regional_quota(listed, C2_CPU_QUOTA, config.region)
    describe = (f"`gcloud beta quotas info describe {C2_CPU_QUOTA} "
                f"--service=compute.googleapis.com --project={config.project}`")
    if limit is None:
        pulumi.log.warn(
            f"could not read quota {C2_CPU_QUOTA} in {config.region}; check that it allows "
            f"{need['most']} C2 vCPUs for the system pool: {describe}"
        )
        return []
    if limit < need["first"]:
        return [
            f"{Key('region')} = {config.region!r}: the system pool ({SYSTEM_MACHINE_TYPE}, "
            f"{per_node} vCPUs a node) needs {need['first']} C2 vCPUs for its first node and its "
            f"upgrade surge, and {C2_CPU_QUOTA} there is {limit}: request at least "
            f"{need['most']} (IAM & Admin > Quotas, {describe}), or choose another region"
        ]
    if limit < need["most"]:
        pulumi.log.warn(
            f"{C2_CPU_QUOTA} in {config.region} is {limit}: the system pool's autoscaler can "
            f"grow to {SYSTEM_NODES[1]} {SYSTEM_MACHINE_TYPE} nodes, {need['most']} vCPUs with "
            f"the upgrade surge; beyond {limit // per_node} nodes, pods on it wait (other C2 "
            f"VMs in the region count too): {describe}"
        )
    return []


def reservation_problems(config: StackConfig, name: str, found) -> list[str]:
    key = str(Key("reservation"))
    listing = f"`gcloud compute reservations list --project {config.project} --zones {config.zone}`"
    # A missing reservation reads as an empty one: the data source clears its id on 404
    # (terraform-provider-google resource_compute_reservation.go, HandleNotFoundError).
    specific = (found.specific_reservations or [None])[0]
    if not found.status or specific is None:
        return [f"{key} = {name!r} does not exist in {Key('zone')} = {config.zone!r}: {listing}"]
    machine = (specific.instance_properties or [None])[0]
    machine_type = getattr(machine, "machine_type", None)
    hw = config.hardware
    if machine_type != hw.machine_type:
        return [
            f"{key} = {name!r} reserves {machine_type}, but target {config.target.value} runs "
            f"{hw.machine_type}: name a reservation of {hw.machine_type}, or change {Key('target')}"
        ]
    if specific.count < config.nodes:
        return [
            f"{key} = {name!r} holds {specific.count} VMs, fewer than {Key('gpuNodes')} = "
            f"{config.nodes}: lower gpuNodes or grow the reservation"
        ]
    free = specific.count - (specific.in_use_count or 0)
    if free < config.nodes:
        # Not an error: on a later `pulumi up` the VMs in use may be this stack's own nodes.
        pulumi.log.warn(
            f"{key} = {name!r} has {free} of {specific.count} VMs free and {Key('gpuNodes')} is "
            f"{config.nodes}: unless the VMs in use are this stack's, nodes will wait for capacity"
        )
    return []


def block_problems(
    config: StackConfig, reservation: str, block: str, blocks: list[str]
) -> list[str]:
    key = str(Key("reservation"))
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
            f"{Key('gpuNodes')} = {config.nodes}: lower gpuNodes or name the reservation alone"
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
        f"{Key('gpuNodes')} = {config.nodes} needs {needed} {hw.gpu_type} GPUs of preemptible "
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
