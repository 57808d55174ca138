"""Issue 9: preflight at preview, the security baseline, and cost attribution, offline.

The preflight's invokes are answered through the mock runtime's `call` with what a real project
would answer (tools/mockrun.py, tools/plan.py example_invokes): each check once passing, once
failing. Nothing may be registered when a check fails: the failure comes before any resource.
"""

from __future__ import annotations

import inspect
import json

import pulumi_gcp as gcp
import pytest

from components.cluster.node_identity import NODE_ROLES
from components.preflight import apis, capacity
from components.schema.config import ConfigError
from tests.conftest import STACK_MODES, rendered
from tools import mockrun, plan
from tools.mockrun import GET_RESERVATION, GET_RESERVATION_BLOCK, PROJECT_SERVICE, QUOTA_INFOS

POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
ACCOUNT = "gcp:serviceaccount/account:Account"


def _run(stack, overrides=None, invokes=None, mode="standard"):
    return plan.run_program(stack, mode, overrides, invokes)[1]


def _problems(stack, overrides=None, invokes=None, mode="standard"):
    recording = mockrun.Recording()
    with pytest.raises(ConfigError) as error:
        plan.run_program(stack, mode, overrides, invokes, recording=recording)
    assert recording.resources == [], "a preflight failure must come before any resource"
    return error.value.problems


# --- 1. Preflight -----------------------------------------------------------------------------


def test_disabled_apis_are_listed_with_the_command_that_enables_them():
    """Two APIs off: one message naming both, what needs them, and one `gcloud services enable`."""
    off = {"containerfilesystem.googleapis.com", "cloudquotas.googleapis.com"}

    def service(args):
        return {} if args["service"] in off else mockrun.enabled_service(args)

    [message] = _problems("a4", invokes={PROJECT_SERVICE: service})
    assert "has 2 API(s) this stack needs turned off" in message
    assert "image streaming" in message
    assert (
        "gcloud services enable containerfilesystem.googleapis.com cloudquotas.googleapis.com "
        "--project example-project" in message
    )


def test_every_api_the_stack_uses_is_checked():
    """Container, Compute, Storage, Logging, Monitoring, Artifact Registry, Container File
    System (image streaming), IAM and Resource Manager (the node account), Cloud Quotas."""
    assert {
        "container.googleapis.com", "compute.googleapis.com", "storage.googleapis.com",
        "logging.googleapis.com", "monitoring.googleapis.com", "artifactregistry.googleapis.com",
        "containerfilesystem.googleapis.com", "iam.googleapis.com",
        "cloudresourcemanager.googleapis.com", "cloudquotas.googleapis.com",
    } <= set(apis.REQUIRED_APIS)


def _reservation(machine="a4-highgpu-8g", count=2, in_use=0, status="READY"):
    return {
        "status": status,
        "specificReservations": [
            {"count": count, "inUseCount": in_use, "instanceProperties": [{"machineType": machine}]}
        ],
    }


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({}, "verl-gke:reservation = 'example-reservation' does not exist in verl-gke:zone"),
        (_reservation(machine="a3-ultragpu-8g"), "reserves a3-ultragpu-8g, but target a4 runs a4-highgpu-8g"),
        (_reservation(count=1), "holds 1 VMs, fewer than verl-gke:gpuNodes = 2"),
    ],
)
def test_a_reservation_that_cannot_hold_the_nodes_is_refused(answer, expected):
    """Missing, of another machine type, or too small: refused at preview with the fix."""
    problems = _problems("a4", invokes={GET_RESERVATION: answer})
    assert any(expected in p for p in problems), problems


def test_a_fitting_reservation_passes_even_when_its_vms_are_in_use():
    """All VMs in use may be this stack's own nodes on a later `up`: a warning, not an error."""
    recording = _run("a4", invokes={GET_RESERVATION: _reservation(in_use=2)})
    assert recording.one(POOL, "gpu-pool").plain_inputs["nodeConfig"]["reservationAffinity"]["values"] == [
        "example-reservation"
    ]


def test_a_reservation_block_must_be_one_the_reservation_lists():
    """A block the reservation does not list is refused (with the blocks it has), and the block
    data source, which fails on a missing block, is never asked."""
    overrides = {"verl-gke:reservation": "res/reservationBlocks/b1"}
    invokes = {
        GET_RESERVATION: {**_reservation(), "blockNames": ["b2", "b3"]},
        GET_RESERVATION_BLOCK: lambda args: pytest.fail("asked for a block that is not listed"),
    }
    problems = _problems("a4", overrides, invokes)
    assert any("block 'b1' of reservation 'res' does not exist" in p and "b2, b3" in p for p in problems)


def test_a_reservation_block_must_hold_the_nodes():
    """A listed block with fewer VMs than gpuNodes is refused; with enough it passes."""
    overrides = {"verl-gke:reservation": "res/reservationBlocks/b1"}
    listed = {GET_RESERVATION: {**_reservation(), "blockNames": ["b1"]}}
    problems = _problems("a4", overrides, {**listed, GET_RESERVATION_BLOCK: {"blockCount": 1}})
    assert any("block 'b1' holds 1 VMs, fewer than verl-gke:gpuNodes = 2" in p for p in problems)
    _run("a4", overrides, {**listed, GET_RESERVATION_BLOCK: {"blockCount": 2, "inUseCount": 0}})


def _quota(value, region="us-central1", quota_id="PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region"):
    """getSQuotaInfos listing the quota with one regional value, among another quota."""
    return {"quotaInfos": [
        {"quotaId": "CPUS-per-project-region", "dimensionsInfos": []},
        {"quotaId": quota_id, "dimensionsInfos": [
            {"dimensions": {"region": region}, "details": [{"value": str(value)}]}
        ]},
    ]}


@pytest.mark.parametrize("provisioning", ["spot", "flex-start"])
def test_spot_and_flex_start_need_preemptible_gpu_quota(provisioning):
    """2 nodes of 8 B200 need 16 preemptible GPUs in the region: 8 is refused, 16 passes."""
    overrides = {"verl-gke:provisioning": provisioning}
    problems = _problems("a4", overrides, {QUOTA_INFOS: _quota(8)})
    assert any(
        "needs 16 nvidia-b200 GPUs of preemptible quota in us-central1, and "
        "PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region there is 8" in p for p in problems
    ), problems
    _run("a4", overrides, {QUOTA_INFOS: _quota(16)})


def test_the_regions_quota_wins_over_the_default():
    """A regional override is read before the quota's default for every region."""
    answer = {"quotaInfos": [{
        "quotaId": "PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region",
        "dimensionsInfos": [
            {"dimensions": {}, "details": [{"value": "64"}]},
            {"dimensions": {"region": "us-central1"}, "details": [{"value": "0"}]},
        ],
    }]}
    assert _problems("a3u", {"verl-gke:provisioning": "spot"}, {QUOTA_INFOS: answer})


def test_an_unlisted_quota_does_not_block():
    """The quota id is Google's to change: if it is not listed, the run goes on (warned)."""
    _run("a4", {"verl-gke:provisioning": "spot"}, {QUOTA_INFOS: _quota(0, quota_id="RENAMED")})


def _c2_quota(value, region="us-central1"):
    """getSQuotaInfos listing the regional C2 CPU quota (components/preflight/capacity.py)."""
    return {"quotaInfos": [
        {"quotaId": "CPUS-per-project-region", "dimensionsInfos": []},
        {"quotaId": "C2-CPUS-per-project-region", "dimensionsInfos": [
            {"dimensions": {"region": region}, "details": [{"value": str(value)}]}
        ]},
    ]}


def test_the_system_pool_needs_the_regions_c2_cpu_quota(monkeypatch):
    """A Standard cluster's system pool is c2-standard-16, 1 to 5 nodes, surge 1: a C2 quota
    below its first node and surge (32 vCPUs) is refused before anything is created, whatever
    the GPUs come from; below the autoscaler's maximum and surge (96) it only warns."""
    warned = []
    monkeypatch.setattr("pulumi.log.warn", lambda message, *a, **k: warned.append(message))
    [message] = _problems("a4", None, {QUOTA_INFOS: _c2_quota(16)})
    assert "needs 32 C2 vCPUs for its first node and its upgrade surge" in message
    assert "C2-CPUS-per-project-region there is 16" in message and "request at least 96" in message
    _run("a4", None, {QUOTA_INFOS: _c2_quota(32)})
    assert any("C2-CPUS-per-project-region in us-central1 is 32" in w for w in warned), warned
    warned.clear()
    _run("a4x", None, {QUOTA_INFOS: _c2_quota(96)})
    assert not [w for w in warned if "C2" in w]


def test_autopilot_checks_no_c2_quota():
    """Autopilot has no system pool: a zero C2 quota does not stop it."""
    gpu = _quota(16)["quotaInfos"]
    _run("a4", None, {QUOTA_INFOS: {"quotaInfos": gpu + _c2_quota(0)["quotaInfos"]}}, mode="autopilot")


def test_preflight_counts_the_system_pool_the_program_creates():
    """The C2 figures preflight checks are the plan's system pool: its machine type's vCPUs
    times (1 + maxSurge) and (totalMaxNodeCount + maxSurge)."""
    pool = _run("a4").one(POOL, "gke-system-pool").plain_inputs
    vcpus = int(pool["nodeConfig"]["machineType"].removeprefix("c2-standard-"))
    surge = pool["upgradeSettings"]["maxSurge"]
    assert capacity.system_pool_cpus() == {
        "first": (pool["initialNodeCount"] + surge) * vcpus,
        "most": (pool["autoscaling"]["totalMaxNodeCount"] + surge) * vcpus,
    }


# --- 2. Security baseline ---------------------------------------------------------------------


def _account_email(recording):
    account = recording.one(ACCOUNT)
    return f"{account.plain_inputs['accountId']}@example-project.iam.gserviceaccount.com"


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_every_node_runs_as_the_stacks_own_least_privilege_account(stack, mode):
    """No node, not even the Standard default pool's moment of life or Autopilot's nodes, runs
    as the Compute Engine default account; the account holds exactly GKE's node roles."""
    _, recording = rendered(stack, mode)
    email = _account_email(recording)
    cluster = recording.one(CLUSTER).plain_inputs
    if mode == "autopilot":
        defaults = cluster["clusterAutoscaling"]["autoProvisioningDefaults"]
        assert defaults["serviceAccount"] == email
    else:
        assert cluster["nodeConfig"]["serviceAccount"] == email
        pools = recording.of_type(POOL)
        assert pools and all(p.plain_inputs["nodeConfig"]["serviceAccount"] == email for p in pools)
    grants = recording.of_type("gcp:projects/iAMMember:IAMMember")
    assert sorted(g.plain_inputs["role"] for g in grants) == sorted(NODE_ROLES)
    assert {g.plain_inputs["member"] for g in grants} == {f"serviceAccount:{email}"}
    assert not any("owner" in r or "editor" in r for r in NODE_ROLES)


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_the_cluster_lives_in_the_stacks_private_network(stack, mode):
    """Own VPC and subnet (not `default`), Private Google Access, Cloud NAT, private nodes."""
    _, recording = rendered(stack, mode)
    cluster = recording.one(CLUSTER).plain_inputs
    subnet = recording.one("gcp:compute/subnetwork:Subnetwork", "primary-network-subnet").plain_inputs
    vpc = recording.one("gcp:compute/network:Network", "primary-network-vpc").plain_inputs
    assert (cluster["network"], cluster["subnetwork"]) == (vpc["name"], subnet["name"]) == (
        f"verl-{stack}-net", f"verl-{stack}-sub",
    )
    assert subnet["privateIpGoogleAccess"] is True
    assert cluster["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services",
    }
    nat = recording.one("gcp:compute/routerNat:RouterNat").plain_inputs
    assert nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True}  # no IP endpoint: tests/test_components.py


def test_a_named_network_is_used_as_it_is():
    """`network` + `subnetwork`: no network is created and GKE picks the secondary ranges."""
    recording = _run("a4", {"verl-gke:network": "corp-vpc", "verl-gke:subnetwork": "corp-gpu"})
    cluster = recording.one(CLUSTER).plain_inputs
    assert (cluster["network"], cluster["subnetwork"]) == ("corp-vpc", "corp-gpu")
    assert cluster["ipAllocationPolicy"] == {}
    assert not recording.of_type("verl-gke:index:PrimaryNetwork")


def test_control_plane_access_can_be_limited():
    """Configured CIDR ranges become master authorized networks; none: not configured."""
    cidrs = '["203.0.113.0/24", "198.51.100.7/32"]'
    cluster = _run("a4", {"verl-gke:controlPlaneCidrs": cidrs}).one(CLUSTER).plain_inputs
    blocks = cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"]
    assert [b["cidrBlock"] for b in blocks] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert "masterAuthorizedNetworksConfig" not in rendered("a4", "standard")[1].one(CLUSTER).plain_inputs


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"verl-gke:controlPlaneCidrs": '["10.0.0.1/8"]'}, "is not an IPv4 CIDR range"),
        ({"verl-gke:controlPlaneCidrs": '["0.0.0.0/0"]'}, "lets every address reach the control plane"),
        ({"verl-gke:controlPlaneCidrs": json.dumps([f"10.{i}.0.0/16" for i in range(51)])}, "GKE takes at most 50"),
        ({"verl-gke:network": "corp-vpc"}, "verl-gke:network and verl-gke:subnetwork go together"),
        ({"verl-gke:labels": '{"Team": "x"}'}, "label key 'Team' is invalid"),
        ({"verl-gke:labels": '{"team": "Research Lab"}'}, "verl-gke:labels.team = 'Research Lab' is not a label value"),
        ({"verl-gke:labels": '{"verl-gke-stack": "x"}'}, "is the stack's own"),
        ({"verl-gke:labels": json.dumps({f"k{i}": "v" for i in range(62)})}, "more than the 64 a resource can carry"),
    ],
)
def test_bad_access_and_label_settings_are_refused(overrides, expected):
    """Each names the key, the value and the fix; nothing is registered."""
    problems = _problems("a4", overrides)
    assert any(expected in p for p in problems), problems


def test_credentials_in_the_dashboard_url_are_refused_and_never_echoed():
    """A URL with user:password would sit in plain text in state and plan: refused, unquoted."""
    job = json.dumps({"dashboardAddress": "https://admin:s3cr3t-pass@ray.example.com"})
    problems = _problems("a4", {"verl-gke:job": job})
    assert any("carries credentials in the URL" in p for p in problems), problems
    assert not any("s3cr3t-pass" in p for p in problems)


# --- 3. Cost attribution ----------------------------------------------------------------------


def _labels_of(resource) -> dict | None:
    """The Google Cloud labels a resource carries, or None if its type takes none."""
    module, name = resource.type.split(":")[1].split("/")[0], resource.type.split(":")[2]
    args = getattr(getattr(gcp, module), f"{name}Args")
    params = inspect.signature(args.__init__).parameters
    inputs = resource.plain_inputs
    if "labels" in params:
        return inputs.get("labels") or {}
    if "resource_labels" in params:
        return inputs.get("resourceLabels") or {}
    if resource.type == POOL:  # labels of the nodes' VMs live in the node config
        return inputs["nodeConfig"].get("resourceLabels") or {}
    return None


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_every_labelable_resource_carries_stack_target_cluster_and_user_labels(stack, mode):
    """Decided from pulumi-gcp's own Args classes: any resource type that takes labels has the
    stack's three and the user's, so billing splits by each."""
    recording = _run(stack, {"verl-gke:labels": '{"team": "rl", "cost-center": "4711"}'}, mode=mode)
    labelled = [(r, _labels_of(r)) for r in recording.resources if r.custom and r.type.startswith("gcp:")]
    labelled = [(r, labels) for r, labels in labelled if labels is not None]
    assert {r.type for r, _ in labelled} >= {CLUSTER, "gcp:storage/bucket:Bucket"}
    for resource, labels in labelled:
        assert labels == {
            "team": "rl", "cost-center": "4711", "verl-gke-stack": stack,
            "verl-gke-target": stack, "verl-gke-cluster": f"verl-{stack}",
        }, resource.name


def test_gke_cost_allocation_is_on():
    """The bill splits by namespace and label (GKE cost allocation)."""
    for stack, mode in STACK_MODES:
        cluster = rendered(stack, mode)[1].one(CLUSTER).plain_inputs
        assert cluster["costManagementConfig"] == {"enabled": True}
