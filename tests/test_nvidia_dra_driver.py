"""NvidiaDraDriver: the DRA driver release, its quota, the ComputeDomain and the RDMA NIC claim.

Every object it creates is validated (core kinds against Kubernetes 1.34's schemas, the
ComputeDomain against the driver's CRD); the Helm release is checked for chart, pin and values.
"""

from __future__ import annotations

import pulumi
import pytest

from components.facts import pins
from components.schema.choices import ClusterMode
from components.facts.hardware import Target, profile
from components.cluster.nvidia_dra_driver import (
    NvidiaDraDriver,
    NvidiaDraDriverArgs,
    driver_values,
    quota_pods,
    render_compute_domain,
)
from components.raycluster.ray_cluster_args import RayOperator, VerlRayClusterArgs
from components.raycluster.verl_ray_cluster import VerlRayCluster
from tests import k8s_schemas
from tools import mockrun

A4X = profile(Target.A4X)
COMPONENT = "verl-gke:index:NvidiaDraDriver"
RELEASE = "kubernetes:helm.sh/v3:Release"
COMPUTE_DOMAIN = "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"
CLAIM_TEMPLATE = "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"
QUOTA = "kubernetes:core/v1:ResourceQuota"
NAMESPACE = "kubernetes:core/v1:Namespace"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"


def run_driver(nodes: int = 4, namespace: str = "verl") -> mockrun.Recording:
    def program():
        driver = NvidiaDraDriver(
            "dra", NvidiaDraDriverArgs(profile=A4X, nodes=nodes, workload_namespace=namespace)
        )
        pulumi.export("namespace", driver.namespace_name)
        pulumi.export("release_name", driver.release_name)
        pulumi.export("release_version", driver.release_version)
        pulumi.export("rdma_claim_template", driver.rdma_claim_template)
        pulumi.export("compute_domain_claim_template", driver.compute_domain_claim_template)

    return mockrun.run(program)


@pytest.fixture(scope="module")
def recording() -> mockrun.Recording:
    return run_driver()


def test_every_object_is_valid_and_a_child_of_the_component(recording):
    """Namespace, quota, ComputeDomain and claim template pass their schemas; all are children."""
    component = recording.one(COMPONENT, "dra")
    objects = {
        (NAMESPACE, "dra-namespace"),
        (QUOTA, "dra-quota"),
        (COMPUTE_DOMAIN, "dra-compute-domain"),
        (CLAIM_TEMPLATE, "dra-rdma-nic"),
        (RELEASE, "dra-release"),
    }
    assert {(r.type, r.name) for r in recording.children_of(component.urn)} == objects
    kinds = []
    for obj in recording.kubernetes_objects():
        k8s_schemas.validate(obj)
        kinds.append(obj["kind"])
    assert sorted(kinds) == ["ComputeDomain", "Namespace", "ResourceClaimTemplate", "ResourceQuota"]


@pytest.mark.parametrize("nodes", [1, 4, 18])
def test_compute_domain_spans_the_gpu_nodes_and_names_its_channel(nodes):
    """numNodes = GPU nodes; the channel template is verl-compute-domain-channel; CRD-valid."""
    obj = render_compute_domain("verl", nodes)
    k8s_schemas.validate(obj)
    assert obj["metadata"] == {"name": "verl-compute-domain", "namespace": "verl"}
    assert obj["spec"] == {
        "numNodes": nodes,
        "channel": {"resourceClaimTemplate": {"name": "verl-compute-domain-channel"}},
    }


def test_component_creates_the_rendered_compute_domain(recording):
    """What is registered is exactly the rendered ComputeDomain."""
    registered = mockrun.k8s_object(recording.one(COMPUTE_DOMAIN, "dra-compute-domain"))
    assert registered == render_compute_domain("verl", 4)


def test_compute_domain_schema_check_is_live():
    """The CRD check refuses an unknown field, so a typo in the spec cannot slip through."""
    obj = render_compute_domain("verl", 4)
    obj["spec"]["numNode"] = obj["spec"].pop("numNodes")
    with pytest.raises(AssertionError, match="ComputeDomain/verl-compute-domain is invalid"):
        k8s_schemas.validate(obj)


def test_rdma_claim_template_requests_one_dranet_nic(recording):
    """verl-rdma-nic (resource.k8s.io/v1) asks for exactly one mrdma.google.com device."""
    obj = mockrun.k8s_object(recording.one(CLAIM_TEMPLATE, "dra-rdma-nic"))
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    assert obj["metadata"] == {"name": "verl-rdma-nic", "namespace": "verl"}
    assert obj["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "nic",
            "exactly": {
                "deviceClassName": "mrdma.google.com",
                "allocationMode": "ExactCount",
                "count": 1,
            },
        }
    ]


@pytest.mark.parametrize("nodes,pods", [(1, "3"), (4, "9"), (18, "37")])
def test_quota_admits_two_critical_pods_per_node_plus_the_controller(nodes, pods):
    """pods = 2·N+1, counted only for the two system priority classes, in the driver namespace."""
    assert str(quota_pods(nodes)) == pods
    obj = mockrun.k8s_object(run_driver(nodes).one(QUOTA, "dra-quota"))
    assert obj["metadata"] == {
        "name": "nvidia-dra-driver-gpu-quota",
        "namespace": "nvidia-dra-driver-gpu",
    }
    assert obj["spec"]["hard"] == {"pods": pods}
    assert obj["spec"]["scopeSelector"]["matchExpressions"] == [
        {
            "operator": "In",
            "scopeName": "PriorityClass",
            "values": ["system-node-critical", "system-cluster-critical"],
        }
    ]


def test_driver_release_is_the_pinned_chart_in_its_namespace(recording):
    """nvidia/nvidia-dra-driver-gpu at the pinned 25.3.x version, released into its namespace."""
    inputs = recording.one(RELEASE, "dra-release").plain_inputs
    assert inputs["name"] == "nvidia-dra-driver-gpu"
    assert inputs["chart"] == "nvidia-dra-driver-gpu"
    assert inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert inputs["version"] == pins.NVIDIA_DRA_DRIVER.version
    assert inputs["version"].startswith("25.3.")
    assert inputs["namespace"] == "nvidia-dra-driver-gpu"
    assert inputs["values"] == driver_values(A4X)


def test_driver_values_keep_the_tutorials_settings():
    """Driver root, GPU allocation off, kubelet plugin tolerating the GPU and arm64 taints."""
    values = driver_values(A4X)
    assert values["nvidiaDriverRoot"] == "/home/kubernetes/bin/nvidia"
    assert values["resources"] == {"gpus": {"enabled": False}}
    assert values["kubeletPlugin"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "kubernetes.io/arch", "operator": "Exists"},
    ]


def _terms(affinity: dict) -> list[dict]:
    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return required["nodeSelectorTerms"]


def test_driver_pods_are_placed_on_nodes_gke_has():
    """Controller off the GPU nodes, kubelet plugin on GB200 arm64 nodes: no control-plane or
    NFD label (the chart's defaults), which no GKE node carries."""
    values = driver_values(A4X)
    assert _terms(values["controller"]["affinity"]) == [
        {"matchExpressions": [{"key": "nvidia.com/gpu", "operator": "DoesNotExist"}]}
    ]
    (plugin,) = _terms(values["kubeletPlugin"]["affinity"])
    assert {e["key"]: e["values"] for e in plugin["matchExpressions"]} == {
        "cloud.google.com/gke-accelerator": ["nvidia-gb200"],
        "kubernetes.io/arch": ["arm64"],
    }


def test_outputs_name_the_namespace_release_and_claim_templates(recording):
    """Outputs: driver namespace, release name and version, and the two claim template names."""
    assert recording.plain_outputs() == {
        "namespace": "nvidia-dra-driver-gpu",
        "release_name": "nvidia-dra-driver-gpu",
        "release_version": pins.NVIDIA_DRA_DRIVER.version,
        "rdma_claim_template": "verl-rdma-nic",
        "compute_domain_claim_template": "verl-compute-domain-channel",
    }


def test_raycluster_wired_from_the_driver_claims_what_the_driver_creates():
    """Wired as __main__ does, A4X workers claim the template this component creates and the
    channel its ComputeDomain names, and the whole set of objects is schema-valid."""

    def program():
        driver = NvidiaDraDriver(
            "dra", NvidiaDraDriverArgs(profile=A4X, nodes=4, workload_namespace="verl")
        )
        VerlRayCluster(
            "ray",
            VerlRayClusterArgs(
                profile=A4X,
                mode=ClusterMode.STANDARD,
                nodes=4,
                namespace="verl",
                service_account="verl-ray",
                pvc_name="training-bucket-pvc",
                bucket_name="verl-a4-example-project",
                rdma_claim_template=driver.rdma_claim_template,
                compute_domain_claim_template=driver.compute_domain_claim_template,
                operator=RayOperator.HELM,
            ),
        )

    recording = mockrun.run(program)
    for obj in recording.kubernetes_objects():
        k8s_schemas.validate(obj)
    template = mockrun.k8s_object(recording.one(CLAIM_TEMPLATE, "dra-rdma-nic"))["metadata"]["name"]
    domain = mockrun.k8s_object(recording.one(COMPUTE_DOMAIN, "dra-compute-domain"))
    channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    cluster = mockrun.k8s_object(recording.one(RAY_CLUSTER, "ray-ray-cluster"))
    claims = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["resourceClaims"]
    assert [c["resourceClaimTemplateName"] for c in claims] == [template] * 4 + [channel]


@pytest.mark.parametrize(
    "target,nodes,expected",
    [
        (Target.A4, 2, "profile = a4 has no DRA NICs or multi-node NVLink: create NvidiaDraDriver"),
        (Target.A4X, 0, "nodes = 0 is out of range for a4x-highgpu-4g: use 1 to 18"),
        (Target.A4X, 19, "nodes = 19 is out of range for a4x-highgpu-4g: use 1 to 18"),
    ],
)
def test_bad_input_is_rejected_with_the_fix(target, nodes, expected):
    """Non-A4X profiles and node counts outside the NVL72 domain are refused with the fix."""
    with pytest.raises(ValueError) as error:
        NvidiaDraDriverArgs(profile=profile(target), nodes=nodes, workload_namespace="verl")
    assert expected in str(error.value)
