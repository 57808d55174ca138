"""Infrastructure components on their own, under the mock runtime, for inputs the stacks don't use."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pulumi
import pytest

from components.cluster.gke_cluster import GkeCluster, GkeClusterArgs
from components.cluster.kubeconfig import cluster_identifier, dns_endpoint
from components.cluster.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.schema.choices import Capacity
from components.facts.hardware import profile
from components.network.rdma_networks import RdmaNetworks, RdmaNetworksArgs
from tools import mockrun

POOL = "gcp:container/nodePool:NodePool"
ROOT = Path(__file__).resolve().parent.parent


def test_rdma_networks_follow_the_nic_count():
    """Nothing assumes 8 NICs (tutorial defect 3): 4 NICs give 4 subnets and 4 rdma networks."""
    seen = {}

    def program():
        networks = RdmaNetworks(
            "net",
            RdmaNetworksArgs(
                project="p", region="r1", zone="r1-a", gvnic_prefix="g", rdma_prefix="d", nic_count=4
            ),
        )
        seen["pod_networks"] = networks.pod_networks
        seen["node_networks"] = len(networks.node_networks)

    recording = mockrun.run(program)
    subnets = sorted(r.plain_inputs["name"] for r in recording.of_type("gcp:compute/subnetwork:Subnetwork"))
    assert subnets == ["d-sub-0", "d-sub-1", "d-sub-2", "d-sub-3", "g-sub"]
    assert seen == {"pod_networks": ["gvnic-1", "rdma-0", "rdma-1", "rdma-2", "rdma-3"], "node_networks": 5}
    component = recording.one("verl-gke:index:RdmaNetworks", "net")
    assert all(r.parent == component.urn for r in recording.resources if r is not component)


def _pool(capacity: Capacity, reservation: str | None = None, target: str = "a4") -> dict:
    def program():
        GpuNodePool(
            "gpu",
            GpuNodePoolArgs(
                project="p", region="us-central1", zone="us-central1-b", cluster="c",
                hardware=profile(target), nodes=2, capacity=capacity, reservation=reservation,
                placement_policy="c-1x72-placement" if target == "a4x" else None,
            ),
        )

    return mockrun.run(program).one(POOL).plain_inputs


def test_spot_pool_consumes_no_reservation_and_may_scale_to_zero():
    """Spot capacity: spot VMs, explicitly no reservation; the nodes start with the pool, and the
    autoscaler may remove them all once the released RayCluster leaves them empty."""
    pool = _pool(Capacity.SPOT)
    assert pool["nodeConfig"]["spot"] is True
    assert pool["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert pool["initialNodeCount"] == 2
    assert pool["autoscaling"]["totalMinNodeCount"] == 0
    assert pool["autoscaling"]["totalMaxNodeCount"] == 2


def _documented_minimums() -> dict[str, str]:
    """docs/cost.md's "What releasing the GPUs saves": each bullet names its provisioning modes
    and the pool minimum in parentheses, e.g. `- flex-start / spot pools (min 0): ...`."""
    text = (ROOT / "docs" / "cost.md").read_text()
    section = text.split("## What releasing the GPUs saves", 1)[1].split("\n## ", 1)[0]
    claims = {}
    for modes, minimum in re.findall(r"^- ([a-z /-]+) pools \((min [^)]*)\)", section, re.M):
        for mode in modes.split(" / "):
            claims[mode.strip()] = minimum
    return claims


def test_each_provisioning_modes_pool_minimum_is_what_the_docs_say():
    """What the docs promise after a release (the GPU nodes go, or stay and bill) is what the
    pool's autoscaler allows: docs/cost.md's minimum per mode, and the README's list of modes
    whose GPU nodes go, match each mode's rendered `totalMinNodeCount`."""
    claims = _documented_minimums()
    assert set(claims) == {c.value for c in Capacity}, claims
    readme = " ".join((ROOT / "README.md").read_text().split())
    going = re.search(r"on ([a-z -]+), the GPU nodes go once", readme)
    assert going, "README.md no longer says which pools' GPU nodes go after a release"
    for capacity in Capacity:
        pool = _pool(capacity, "res" if capacity is Capacity.RESERVATION else None)
        minimum = pool["autoscaling"]["totalMinNodeCount"]
        assert claims[capacity.value] == ("min 0" if minimum == 0 else "min = max nodes"), capacity
        assert (capacity.value in going.group(1).replace(" or ", " ")) == (minimum == 0), capacity


def test_flex_start_pool_starts_empty_and_scales_up():
    """Flex-start capacity arrives through the autoscaler: start at 0, allow 0..max."""
    pool = _pool(Capacity.FLEX_START)
    assert pool["nodeConfig"]["flexStart"] is True
    assert pool["initialNodeCount"] == 0
    assert pool["autoscaling"]["totalMinNodeCount"] == 0
    assert pool["autoscaling"]["totalMaxNodeCount"] == 2  # the RayCluster's workers, no more


@pytest.mark.parametrize(
    ("capacity", "reservation", "placement", "auto_repair"),
    [
        # Cluster Toolkit's gke-a4 / gke-a3-ultragpu reservation pools: no placement policy.
        (Capacity.RESERVATION, "res", None, True),
        (Capacity.SPOT, None, {"type": "COMPACT"}, True),
        # CT preconditions: flex-start needs auto_repair false; COMPACT with flex-start is
        # supported on A3 Ultra and A4.
        (Capacity.FLEX_START, None, {"type": "COMPACT"}, False),
    ],
)
@pytest.mark.parametrize("target", ["a4", "a3u"])
def test_placement_and_repair_follow_cluster_toolkits_preconditions(
    target, capacity, reservation, placement, auto_repair
):
    """Per capacity on A4 / A3 Ultra: which placement policy and whether GKE repairs nodes."""
    pool = _pool(capacity, reservation, target)
    assert pool.get("placementPolicy") == placement
    assert pool["management"] == {"autoRepair": auto_repair, "autoUpgrade": True}


def test_a4x_pool_uses_its_workload_policy_and_its_bundled_local_ssds():
    """A4X: COMPACT with the named 1x72 policy; ephemeral storage on the machine's own local
    SSDs (count 0 = the bundled set), not on the 100 GB boot disk that cannot hold 520 Gi."""
    pool = _pool(Capacity.RESERVATION, "res", "a4x")
    assert pool["placementPolicy"] == {"type": "COMPACT", "policyName": "c-1x72-placement"}
    assert pool["nodeConfig"]["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 0}


@pytest.mark.parametrize("reservation", ["res", "res/reservationBlocks/block-7"])
def test_reservation_names_and_blocks_pass_through(reservation):
    """A reservation or one of its blocks is consumed SPECIFICally, as Cluster Toolkit does."""
    affinity = _pool(Capacity.RESERVATION, reservation)["nodeConfig"]["reservationAffinity"]
    assert affinity["consumeReservationType"] == "SPECIFIC_RESERVATION"
    assert affinity["values"] == [reservation]


CLUSTER = "gcp:container/cluster:Cluster"
K8S_PROVIDER = "pulumi:providers:kubernetes"
CIDRS = ("203.0.113.0/24", "198.51.100.7/32")
# What GkeCluster's kubeconfig was, for the mock's cluster, before the DNS endpoint
# (git show 7f47822:components/cluster/gke_cluster.py): a stack that keeps its IP endpoint must
# get it byte for byte, or pulumi-kubernetes would see a new active cluster.
IP_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: gke_c
  cluster:
    certificate-authority-data: RkFLRS1DQQ==
    server: https://203.0.113.10
contexts:
- name: gke_c
  context:
    cluster: gke_c
    user: gke_c
current-context: gke_c
users:
- name: gke_c
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      installHint: Install gke-gcloud-auth-plugin (gcloud components install gke-gcloud-auth-plugin)
      provideClusterInfo: true
"""


def _gke(cidrs: tuple[str, ...] = (), autopilot: bool = False) -> mockrun.Recording:
    def program():
        gke = GkeCluster(
            "gke",
            GkeClusterArgs(
                project="p", region="us-central1", zone="us-central1-b", cluster_name="c",
                autopilot=autopilot, version="1.34", deletion_protection=True,
                exclusion_start="2026-12-01T00:00:00Z", control_plane_cidrs=cidrs,
            ),
        )
        pulumi.export("kubeconfig", gke.kubeconfig)
        pulumi.export("endpoint", gke.endpoint)

    return mockrun.run(program)


@pytest.mark.parametrize("autopilot", [False, True], ids=["standard", "autopilot"])
def test_by_default_the_control_plane_has_no_ip_endpoint(autopilot):
    """Default (no controlPlaneCidrs), both modes: the DNS endpoint takes outside traffic, the IP
    endpoints are off, and nothing of the IP side is sent (no authorized networks, no
    enablePrivateEndpoint, which the provider would not send anyway)."""
    cluster = _gke(autopilot=autopilot).one(CLUSTER).plain_inputs
    assert cluster["controlPlaneEndpointsConfig"] == {
        "dnsEndpointConfig": {"allowExternalTraffic": True},
        "ipEndpointsConfig": {"enabled": False},
    }
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True}
    assert "masterAuthorizedNetworksConfig" not in cluster


def test_control_plane_cidrs_keep_a_public_ip_endpoint_limited_to_them():
    """controlPlaneCidrs: the IP endpoint stays, public, behind exactly those ranges; the DNS
    endpoint stays open to IAM-authorised callers too."""
    cluster = _gke(CIDRS).one(CLUSTER).plain_inputs
    assert cluster["controlPlaneEndpointsConfig"] == {
        "dnsEndpointConfig": {"allowExternalTraffic": True},
        "ipEndpointsConfig": {"enabled": True},
    }
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": False}
    blocks = cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"]
    assert [b["cidrBlock"] for b in blocks] == list(CIDRS)


def test_the_kubeconfig_reaches_the_dns_endpoint_and_trusts_the_public_roots():
    """Default: the provider, the job's kubectl and `make logs` (all through this kubeconfig)
    reach https://<DNS endpoint>, with no CA of the cluster's: the DNS endpoint's certificate is
    publicly trusted, as gcloud's own --dns-endpoint kubeconfig assumes."""
    recording = _gke()
    dns = recording.one(CLUSTER).inputs  # inputs only; the endpoint is the mock's answer
    assert "controlPlaneEndpointsConfig" in dns
    endpoint = recording.outputs["endpoint"]
    assert endpoint.endswith(".us-central1.gke.goog")
    kubeconfig = recording.outputs["kubeconfig"]
    assert f"    server: https://{endpoint}\n" in kubeconfig
    assert "certificate-authority" not in kubeconfig and "insecure-skip-tls-verify" not in kubeconfig
    assert kubeconfig.replace(f"https://{endpoint}", "https://203.0.113.10") == IP_KUBECONFIG.replace(
        "    certificate-authority-data: RkFLRS1DQQ==\n", ""
    )
    assert "kubeconfig" in recording.secret_outputs


def test_a_stack_keeping_its_ip_endpoint_keeps_its_kubeconfig():
    """controlPlaneCidrs: the kubeconfig is the one built before the DNS endpoint, byte for
    byte (IP server and CA), so such a stack's provider sees no new active cluster."""
    recording = _gke(CIDRS)
    assert recording.outputs["kubeconfig"] == IP_KUBECONFIG
    assert recording.outputs["endpoint"] == "203.0.113.10"


@pytest.mark.parametrize("cidrs", [(), CIDRS], ids=["dns", "ip"])
def test_the_kubernetes_provider_is_replaced_only_with_the_cluster(cidrs):
    """The provider carries a clusterIdentifier, a plain string naming the cluster and its CA
    (the mock's): a changed kubeconfig (IP endpoint to DNS endpoint) is then an update of the
    provider, not a replacement of every object in the cluster (pulumi-kubernetes
    DiffConfig), while a new cluster under the same name (a new CA) still replaces it."""
    provider = _gke(cidrs).one(K8S_PROVIDER).plain_inputs
    digest = hashlib.sha256(mockrun.FAKE_CA.encode()).hexdigest()[:16]
    assert provider["clusterIdentifier"] == f"projects/p/locations/us-central1/clusters/c@ca-sha256:{digest}"
    assert provider["kubeconfig"] == "[secret]"
    assert cluster_identifier("p", "us-central1", "c", "T1RIRVItQ0E=") != provider["clusterIdentifier"]


def test_a_cluster_without_its_dns_endpoint_is_named_with_the_fix():
    """The API always fills the DNS endpoint; a state without one says what to do."""
    with pytest.raises(ValueError, match="read back no controlPlaneEndpointsConfig.dnsEndpointConfig"):
        dns_endpoint(None)
