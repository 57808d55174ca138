"""The stack config's checks that span keys: what no key can be checked for on its own.

`config.load` runs them (`cross_field_problems`) once `StackConfig` has validated every key by
itself: the zone against the region, the GPU capacity against the target and the cluster mode,
the network and who may reach the control plane, every derived name against the API that
receives it, each tracker against its credentials, and the `job` (run.py), `staging`
(staging.py) and alert (observability.py) settings against the cluster. Each problem names the
keys, the bad value and the fix; all of them are reported together. The run's problems are
those of the run resolved once (StackConfig.runs), the value the program then takes as it is.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import TYPE_CHECKING

from components.facts.hardware import NodeNetworking
from components.messages import quoted
from components.schema import names
from components.schema.choices import Capacity
from components.schema.observability import observability_problems
from components.forms.pulumi_forms import namespace
from components.runspec.run import brought_problems
from components.runspec.run_experiment import experiment_problems, job_key
from components.schema.staging import staging_problems

if TYPE_CHECKING:
    from components.schema.stack_config import StackConfig


def cross_field_problems(config: StackConfig) -> list[str]:
    """Checks that involve more than one key, or a key and the hardware profile."""
    problems = [
        *_placement_problems(config),
        *_capacity_problems(config),
        *name_problems(config),
        *_access_problems(config),
        *names.label_problems(
            f"{namespace()}:labels", config.labels, len(config.resource_labels) - len(config.labels)
        ),
    ]
    nodes_problem = config.hardware.nodes_problem(f"{namespace()}:gpuNodes", config.nodes)
    if nodes_problem:
        problems.append(nodes_problem)
    if config.hardware.networking is NodeNetworking.DRANET and (
        config.gvnic_network_prefix or config.rdma_network_prefix
    ):
        problems.append(
            f"{namespace()}:gvnicNetworkPrefix / rdmaNetworkPrefix are set, but target a4x uses "
            "DRANET (GKE creates its networks): remove them"
        )
    # model_revision is None when the job reads a model of its own: none is downloaded then.
    staged_model = config.model_revision is not None
    if config.hf_token is None and not config.staging.skip and staged_model:
        problems.append(
            f"{namespace()}:hfToken is not set, but the model is staged from Hugging Face: run "
            f"`pulumi config set --secret {namespace()}:hfToken <token>` (a read token from "
            f"huggingface.co/settings/tokens), or set {namespace()}:staging.skip to true for a "
            "bucket you filled yourself"
        )
    problems += tracker_problems(config)
    # The run's checks divide by the GPU count, so they need at least one node; a count out of
    # range but positive is the user's, and the run's problems with it are reported in the same
    # round (the TP and the batch are checked against it, not held back: RE-10).
    if config.nodes >= 1:
        problems += [problem for run in config.runs.values() for problem in run.problems]
    problems += brought_problems(config.run, config.bucket)
    problems += experiment_problems(config.run, config.bucket, job_key)
    problems += staging_problems(config.staging)
    problems += observability_problems(config)
    return problems


# Each tracker of job.logger and the secret key it cannot work without, with where to get it.
_TRACKER_KEYS = {
    "wandb": ("wandbApiKey", "wandb_api_key", "an API key from wandb.ai/authorize"),
    "mlflow": ("mlflowTrackingUri", "mlflow_tracking_uri", "your tracking server's URI"),
}


def tracker_problems(config: StackConfig) -> list[str]:
    """A logger without its credentials fails in verl's Tracking at the first step, hours in;
    here it is refused before anything is created."""
    problems = []
    for logger, (key, field, what) in _TRACKER_KEYS.items():
        if logger in config.job.loggers and getattr(config, field) is None:
            problems.append(
                f"{namespace()}:job.logger includes {logger}, but {namespace()}:{key} is not set: "
                f"run `pulumi config set --secret {namespace()}:{key} <value>` ({what}), or "
                f"remove {logger} from {namespace()}:job.logger"
            )
    return problems


def _placement_problems(config: StackConfig) -> list[str]:
    problems = []
    zone_region = config.zone.rsplit("-", 1)[0]
    if zone_region != config.region:
        problems.append(
            f"{namespace()}:zone = {config.zone!r} is not in {namespace()}:region = "
            f"{config.region!r}: pick a zone of that region (e.g. {config.region}-b) or set "
            f"the region to {zone_region!r}"
        )
    if config.autopilot and not config.hardware.autopilot_supported:
        problems.append(
            f"{namespace()}:clusterMode = 'autopilot' is not available for target "
            f"{config.target.value}: A4X needs a Standard cluster (DRANET node pool); set "
            f"{namespace()}:clusterMode to standard"
        )
    return problems


# GKE: "You can add up to 50 authorized networks (allowed CIDR blocks) in a project" for a
# cluster with a public endpoint (kubernetes-engine/docs/how-to/authorized-networks).
MAX_CONTROL_PLANE_CIDRS = 50


def _access_problems(config: StackConfig) -> list[str]:
    """The primary network and who may reach the control plane."""
    problems = []
    if bool(config.network) != bool(config.subnetwork):
        problems.append(
            f"{namespace()}:network and {namespace()}:subnetwork go together: set both (an existing "
            "VPC and its subnetwork in the region, with Cloud NAT for the nodes), or neither and "
            "the stack creates them"
        )
    key = f"{namespace()}:controlPlaneCidrs"
    for cidr in config.control_plane_cidrs:
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as error:
            problems.append(
                f"{key}: {quoted(cidr)} is not an IPv4 CIDR range ({error}): use e.g. "
                "203.0.113.0/24, host bits zero"
            )
            continue
        # The ranges are what keeps a public IP endpoint (components/cluster/gke_cluster.py);
        # one that holds every address is the open endpoint the DNS endpoint replaces.
        if network.prefixlen == 0:
            problems.append(
                f"{key}: {quoted(cidr)} lets every address reach the control plane's public IP "
                f"endpoint: name the ranges you run from, or remove {key} to reach the cluster "
                "through its DNS endpoint only (IAM-authorised)"
            )
    if len(config.control_plane_cidrs) > MAX_CONTROL_PLANE_CIDRS:
        problems.append(
            f"{key} lists {len(config.control_plane_cidrs)} ranges; GKE takes at most "
            f"{MAX_CONTROL_PLANE_CIDRS}: merge some"
        )
    address = config.job.dashboard_address
    if address and urllib.parse.urlsplit(str(address)).username is not None:
        problems.append(
            f"{namespace()}:job.dashboardAddress carries credentials in the URL, which would be "
            "stored in plain text in the stack's state and plan: remove them; reach the "
            "dashboard through a tunnel or IAP that authenticates on its own"
        )
    return problems


def _capacity_problems(config: StackConfig) -> list[str]:
    """Where the GPU nodes come from: what GKE and Compute Engine accept per target and mode."""
    hw = config.hardware
    reservation_set = bool(config.reservation)
    if config.autopilot:
        # Each message names only the keys that are set (RE-11): provisioning's default is
        # reservation, so it is set when it is anything else.
        set_keys = [f"{namespace()}:reservation = {quoted(config.reservation)}"] if reservation_set else []
        if config.provisioning is not Capacity.RESERVATION:
            set_keys.append(f"{namespace()}:provisioning = {config.provisioning.value!r}")
        if set_keys:
            them = "them" if len(set_keys) > 1 else "it"
            return [
                f"{' and '.join(set_keys)} {'are' if len(set_keys) > 1 else 'is'} set, but "
                "Autopilot places GPU pods on Spot capacity it manages itself (the tutorial's "
                f"compute class) and would ignore {them}: remove {them}, or set "
                f"{namespace()}:clusterMode to standard to use {them}"
            ]
        return []
    problems = []
    if hw.reservation_only and config.provisioning is not Capacity.RESERVATION:
        problems.append(
            f"{namespace()}:provisioning = {config.provisioning.value!r} is not available for "
            f"{hw.machine_type}: Google offers it only through reservations (\"You must use the "
            "reservation-bound provisioning model\", A4X docs); set "
            f"{namespace()}:provisioning to reservation and {namespace()}:reservation to yours"
        )
    if config.provisioning is Capacity.RESERVATION and not reservation_set:
        problems.append(
            f"{namespace()}:reservation is not set but {namespace()}:provisioning is "
            "'reservation': set the reservation name "
            f"(`gcloud compute reservations list --zones {config.zone}`)"
            + ("" if hw.reservation_only else f", or choose {namespace()}:provisioning spot or flex-start")
        )
    if config.provisioning is not Capacity.RESERVATION and reservation_set:
        problems.append(
            f"{namespace()}:reservation is set but {namespace()}:provisioning is "
            f"{config.provisioning.value!r}, which consumes no reservation: remove "
            f"{namespace()}:reservation, or set {namespace()}:provisioning to reservation"
        )
    if reservation_set and not re.fullmatch(
        r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?(/reservationBlocks/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?",
        config.reservation,
    ):
        problems.append(
            f"{namespace()}:reservation = {quoted(config.reservation)} is not a reservation name: "
            "use `<name>` or `<name>/reservationBlocks/<block>` (each at most 63 characters)"
        )
    return problems


def name_problems(config: StackConfig) -> list[str]:
    """Every name derived from the config, against the rule of the API that receives it."""
    key = f"{namespace()}:clusterName"
    cluster_problem = names.cluster_name_problem(key, config.cluster)
    if cluster_problem:
        if config.cluster_name is None:
            cluster_problem = (
                f"the stack's name {quoted(config.stack)} makes the default cluster name "
                f"{quoted(config.cluster)}, which GKE refuses (at most "
                f"{names.CLUSTER_NAME_MAX} characters): set {key} to a shorter name"
            )
        return [cluster_problem]  # every other default name derives from it
    problems = names.bucket_name_problems(f"{namespace()}:bucketName", config.bucket)
    if config.bucket_name is None and problems:
        problems = [
            f"the default bucket name {quoted(config.bucket)} (<clusterName>-<project>) is "
            f"invalid: set {namespace()}:bucketName, or a shorter {key} ({p})"
            for p in problems
        ]
    if config.hardware.networking is NodeNetworking.RDMA_VPC:
        problems += _network_name_problems(config)
    if config.placement_policy:
        problem = names.gce_name_problem(key, config.placement_policy, "placement policy")
        problems += [problem] if problem else []
    return problems


def _network_name_problems(config: StackConfig) -> list[str]:
    gvnic_key = f"{namespace()}:" + ("gvnicNetworkPrefix" if config.gvnic_network_prefix else "clusterName")
    rdma_key = f"{namespace()}:" + ("rdmaNetworkPrefix" if config.rdma_network_prefix else "clusterName")
    last_nic = config.hardware.rdma_nics - 1
    derived = [
        (gvnic_key, names.network_name(config.gvnic_prefix), "gVNIC network"),
        (gvnic_key, names.subnet_name(config.gvnic_prefix), "gVNIC subnetwork"),
        (gvnic_key, names.firewall_name(config.gvnic_prefix), "gVNIC firewall"),
        (rdma_key, names.network_name(config.rdma_prefix), "RDMA network"),
        (rdma_key, names.rdma_subnet_name(config.rdma_prefix, last_nic), "RDMA subnetwork"),
    ]
    found = (names.gce_name_problem(key, name, what) for key, name, what in derived)
    return [problem for problem in found if problem]
