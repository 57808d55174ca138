"""VerlRayCluster: one RayCluster per target and mode, shaped by the hardware profile.

Rendered objects are checked against the real KubeRay CRD with unknown fields forbidden; the
component is run under Pulumi's mock runtime to check what it registers and exports.
"""

from __future__ import annotations

import json
import re

import pulumi
import pytest

from components.facts import pins
from components.schema.choices import ClusterMode
from components.facts.hardware import Arch, NodeNetworking, Target, profile
from components.facts.layout import DASHBOARD_PORT
from components.raycluster.ray_cluster_args import CLUSTER_NAMES, RayOperator, VerlRayClusterArgs
from components.raycluster.ray_cluster_spec import (
    HEAD_SHM_SIZE, POD_PACKAGES_TIMEOUT_SECONDS, WORKER_GROUP, render_pod_monitoring,
    render_ray_cluster,
)
from components.raycluster.verl_ray_cluster import VerlRayCluster
from components.run.export import quantity
from tests import k8s_schemas
from tools import mockrun

TARGET_MODES = [
    (Target.A4, ClusterMode.STANDARD),
    (Target.A4, ClusterMode.AUTOPILOT),
    (Target.A3_ULTRA, ClusterMode.STANDARD),
    (Target.A3_ULTRA, ClusterMode.AUTOPILOT),
    (Target.A4X, ClusterMode.STANDARD),
]
IDS = [f"{t.value}-{m.value}" for t, m in TARGET_MODES]
SYSTEM_POOL = {"cloud.google.com/gke-nodepool": "system-pool"}
RDMA_TEMPLATE = "verl-rdma-nic"
CHANNEL_TEMPLATE = "verl-compute-domain-channel"


def networks(nics: int) -> list[str]:
    return ["gvnic-1", *(f"rdma-{i}" for i in range(nics))]


def make_args(
    target: Target, mode: ClusterMode = ClusterMode.STANDARD, **changes
) -> VerlRayClusterArgs:
    """Valid args for a target and mode, as __main__ wires them; `changes` override fields."""
    hw = profile(target)
    values: dict = dict(
        profile=hw,
        mode=mode,
        nodes=hw.default_nodes,
        namespace="verl",
        service_account="verl-ray",
        pvc_name="training-bucket-pvc",
        bucket_name="verl-a4-example-project",
    )
    if hw.networking is NodeNetworking.DRANET:
        values.update(
            rdma_claim_template=RDMA_TEMPLATE, compute_domain_claim_template=CHANNEL_TEMPLATE
        )
    else:
        values["rdma_networks"] = networks(hw.rdma_nics)
        if mode is ClusterMode.STANDARD:
            values["head_node_selector"] = SYSTEM_POOL
    values.update(changes)
    return VerlRayClusterArgs(**values)


def rendered(target: Target, mode: ClusterMode = ClusterMode.STANDARD, **changes) -> dict:
    return render_ray_cluster(make_args(target, mode, **changes))


def head(obj: dict) -> dict:
    return obj["spec"]["headGroupSpec"]


def worker_group(obj: dict) -> dict:
    (group,) = obj["spec"]["workerGroupSpecs"]
    return group


def container(group: dict) -> dict:
    (only,) = group["template"]["spec"]["containers"]
    return only


# --- Rendered RayCluster ----------------------------------------------------------------------


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_raycluster_is_valid_against_the_kuberay_crd(target, mode):
    """Every target and mode renders a RayCluster the real CRD accepts, with no unknown field."""
    k8s_schemas.validate(rendered(target, mode))


def test_schema_check_rejects_the_tutorials_integer_accelerator_count():
    """The validator is live: the tutorial's `gke-accelerator-count: 8` (an int) is refused."""
    obj = rendered(Target.A4, ClusterMode.AUTOPILOT)
    selector = worker_group(obj)["template"]["spec"]["nodeSelector"]
    assert selector["cloud.google.com/gke-accelerator-count"] == "8"
    selector["cloud.google.com/gke-accelerator-count"] = 8
    with pytest.raises(AssertionError, match="RayCluster/b200-ray-cluster is invalid"):
        k8s_schemas.validate(obj)


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_workers_take_their_shape_from_the_profile_and_node_count(target, mode):
    """Replicas = GPU nodes (fixed, no autoscaling); GPUs, CPUs, memory, disk, shm per machine."""
    hw = profile(target)
    nodes = 3
    group = worker_group(rendered(target, mode, nodes=nodes))
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, nodes, nodes)
    assert group["groupName"] == WORKER_GROUP
    assert group["rayStartParams"]["num-cpus"] == str(hw.worker_ray_cpus)
    expected = {
        "cpu": hw.worker.cpu,
        "memory": hw.worker.memory,
        "ephemeral-storage": hw.worker.ephemeral_storage,
        "nvidia.com/gpu": str(hw.gpus_per_node),
    }
    resources = container(group)["resources"]
    assert resources["limits"] == expected and resources["requests"] == expected
    shm = next(v for v in group["template"]["spec"]["volumes"] if v["name"] == "shared-memory")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": hw.shm_size}


@pytest.mark.parametrize("target", [Target.A4, Target.A3_ULTRA])
def test_rdma_targets_list_eth0_then_every_network_in_nic_order(target):
    """A4 / A3 Ultra workers: eth0 on the default network, eth1.. on the given networks in order."""
    given = ["gvnic-x", *(f"rail-{i}" for i in range(8))]
    annotations = worker_group(rendered(target, rdma_networks=given))["template"]["metadata"][
        "annotations"
    ]
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    assert interfaces == [
        {"interfaceName": f"eth{i}", "network": network}
        for i, network in enumerate(["default", *given])
    ]
    assert annotations["networking.gke.io/default-interface"] == "eth0"


@pytest.mark.parametrize("target", [Target.A4, Target.A3_ULTRA])
def test_rdma_targets_make_no_dra_claims(target):
    """Where NICs come from networks, pods claim no DRA devices."""
    group = worker_group(rendered(target))
    assert "resourceClaims" not in group["template"]["spec"]
    assert "claims" not in container(group)["resources"]


def test_a4x_workers_claim_every_rdma_nic_and_the_compute_domain_channel():
    """A4X: one claim per RDMA NIC of the node from the NIC template, plus the IMEX channel."""
    group = worker_group(rendered(Target.A4X))
    spec = group["template"]["spec"]
    nics = profile(Target.A4X).rdma_nics
    expected = [
        {"name": f"rdma-nic-{i}", "resourceClaimTemplateName": RDMA_TEMPLATE} for i in range(nics)
    ] + [{"name": "compute-domain-channel", "resourceClaimTemplateName": CHANNEL_TEMPLATE}]
    assert spec["resourceClaims"] == expected
    assert container(group)["resources"]["claims"] == [{"name": c["name"]} for c in expected]
    annotations = group["template"]["metadata"]["annotations"]
    assert not any(key.startswith("networking.gke.io/") for key in annotations)


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_each_worker_gets_a_node_of_its_own(target, mode):
    """Required anti-affinity on the hostname keeps two workers of this cluster off one node."""
    obj = rendered(target, mode)
    (term,) = worker_group(obj)["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "ray.io/cluster": obj["metadata"]["name"],
        "ray.io/group": WORKER_GROUP,
    }


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_image_is_the_pinned_one_for_the_profiles_architecture(target, mode):
    """Head and workers run the pinned image of the node's CPU architecture, never `latest`."""
    hw = profile(target)
    obj = rendered(target, mode)
    images = {container(head(obj))["image"], container(worker_group(obj))["image"]}
    assert images == {pins.VERL_IMAGES[hw.arch]}
    (image,) = images
    assert ("aarch64" in image) == (hw.arch is Arch.ARM64)
    assert "latest" not in image


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_every_volume_is_mounted(target, mode):
    """No declared-but-unused volumes (the tutorial's lib64, sys and proc-sys are gone); the
    one exception is gke-gcsfuse-cache, which GKE's injected GCS FUSE sidecar mounts."""
    obj = rendered(target, mode)
    for group in (head(obj), worker_group(obj)):
        spec = group["template"]["spec"]
        declared = {v["name"] for v in spec["volumes"]} - {"gke-gcsfuse-cache"}
        mounted = {m["name"] for c in spec["containers"] for m in c["volumeMounts"]}
        assert declared == mounted
        assert not declared & {"lib64", "sys", "proc-sys"}
        bucket = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
        assert bucket["persistentVolumeClaim"] == {"claimName": "training-bucket-pvc"}
        assert spec["serviceAccountName"] == "verl-ray"


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_pods_carry_the_gcsfuse_sidecar_resource_annotations(target, mode):
    """Both pods ask for the sidecar and size it: unbounded on Standard, explicit on Autopilot."""
    obj = rendered(target, mode)
    for group in (head(obj), worker_group(obj)):
        annotations = group["template"]["metadata"]["annotations"]
        assert annotations["gke-gcsfuse/volumes"] == "true"
        limits = [
            annotations[f"gke-gcsfuse/{k}-limit"] for k in ("cpu", "memory", "ephemeral-storage")
        ]
        if mode is ClusterMode.AUTOPILOT:
            assert "0" not in limits  # Autopilot refuses "0" (unbounded)
        else:
            assert limits == ["0", "0", "0"]


def test_autopilot_sidecar_stays_within_the_gpu_node_cap():
    """On Autopilot GPU nodes the sidecar may have at most 2 CPU and 14 GiB (driver known issue)."""
    annotations = worker_group(rendered(Target.A4, ClusterMode.AUTOPILOT))["template"]["metadata"][
        "annotations"
    ]
    assert float(annotations["gke-gcsfuse/cpu-limit"]) <= 2
    assert annotations["gke-gcsfuse/memory-limit"] == "14Gi"


def test_standard_head_runs_on_the_given_system_pool():
    """On Standard A4 / A3 Ultra the head goes where it is told, and takes no Ray work there
    (num-cpus 0, issue 19 item 1)."""
    group = head(rendered(Target.A3_ULTRA))
    assert group["template"]["spec"]["nodeSelector"] == SYSTEM_POOL
    assert "tolerations" not in group["template"]["spec"]
    assert group["rayStartParams"] == {"dashboard-host": "0.0.0.0", "num-cpus": "0"}


def test_autopilot_head_is_on_demand_c2_performance():
    """The Autopilot head asks for a c2 Performance node and not for Spot."""
    selector = head(rendered(Target.A4, ClusterMode.AUTOPILOT))["template"]["spec"]["nodeSelector"]
    assert selector == {
        "cloud.google.com/machine-family": "c2",
        "cloud.google.com/compute-class": "Performance",
    }


def test_autopilot_workers_select_gpu_count_spot_and_performance():
    """Autopilot workers pick GPU type and count (as a string), Spot, and the Performance class."""
    hw = profile(Target.A3_ULTRA)
    selector = worker_group(rendered(Target.A3_ULTRA, ClusterMode.AUTOPILOT))["template"]["spec"][
        "nodeSelector"
    ]
    assert selector == {
        "cloud.google.com/gke-accelerator": hw.gpu_type,
        "cloud.google.com/gke-accelerator-count": "8",
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/compute-class": "Performance",
    }


def test_a4x_head_shares_a_gb200_node_without_taking_ray_work():
    """A4X: the arm64 head runs on a GB200 node (tolerating its taints) with num-cpus 0."""
    obj = rendered(Target.A4X)
    spec = head(obj)["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-gb200"}
    assert {t["key"] for t in spec["tolerations"]} == {"nvidia.com/gpu", "kubernetes.io/arch"}
    assert head(obj)["rayStartParams"]["num-cpus"] == "0"
    assert "nvidia.com/gpu" not in container(head(obj))["resources"]["limits"]
    worker_tolerations = worker_group(obj)["template"]["spec"]["tolerations"]
    assert {t["key"] for t in worker_tolerations} == {"nvidia.com/gpu", "kubernetes.io/arch"}


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_no_head_takes_ray_work_and_every_head_has_a_dev_shm(target, mode):
    """num-cpus 0 on every head, so verl's TaskRunner, dataloader and reward workers go to the
    GPU workers (TRAINING-REVIEW.md finding 9), and a Memory /dev/shm for Ray's object store,
    bounded below the head's memory limit."""
    obj = rendered(target, mode)
    assert head(obj)["rayStartParams"]["num-cpus"] == "0"
    spec = head(obj)["template"]["spec"]
    shm = next(v for v in spec["volumes"] if v["name"] == "shared-memory")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": HEAD_SHM_SIZE}
    mounts = {m["mountPath"]: m["name"] for m in container(head(obj))["volumeMounts"]}
    assert mounts["/dev/shm"] == "shared-memory"
    limit = container(head(obj))["resources"]["limits"]["memory"]
    assert quantity(HEAD_SHM_SIZE) < quantity(limit)


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_every_pod_installs_what_the_image_lacks_without_moving_its_packages(target, mode):
    """Every Ray pod, on every architecture, installs pins.POD_PACKAGES (TransferQueue, which
    verl's V1 trainer imports and no verl image ships) at container start, exactly pinned and
    with --no-deps, so that pip resolves nothing and changes none of the image's packages; the
    tutorial's hook was A4X's only, and a4/a3u's default run died importing transfer_queue."""
    obj = rendered(target, mode)
    for group in (head(obj), worker_group(obj)):
        command = container(group)["lifecycle"]["postStart"]["exec"]["command"]
        words = command[-1].split()
        # Each attempt bounded (ray_cluster_spec.POD_PACKAGES_TIMEOUT_SECONDS), then pip.
        assert words[:2] == ["timeout", str(POD_PACKAGES_TIMEOUT_SECONDS)]
        words = words[2:]
        assert words[:4] == ["python3", "-m", "pip", "install"] and "--no-deps" in words
        assert "TransferQueue==0.1.8" in words
        assert [w for w in words if "==" in w] == [p.requirement for p in pins.POD_PACKAGES]


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_head_exposes_its_ports_through_a_clusterip_service_only(target, mode):
    """The head's service is ClusterIP, and its container names the three Ray ports."""
    group = head(rendered(target, mode))
    assert group["serviceType"] == "ClusterIP"
    ports = {p["name"]: p["containerPort"] for p in container(group)["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": DASHBOARD_PORT, "client": 10001}


@pytest.mark.parametrize("target", list(Target))
def test_raycluster_is_named_after_its_gpu_and_waited_for(target):
    """Names follow the GPU (h200 for A3 Ultra); `pulumi up` waits for state ready."""
    metadata = rendered(target)["metadata"]
    assert metadata["name"] == CLUSTER_NAMES[target]
    assert metadata["name"].startswith(profile(target).gpu_type.split("-")[1])
    assert metadata["namespace"] == "verl"
    assert metadata["annotations"]["pulumi.com/waitFor"] == "jsonpath={.status.state}=ready"
    assert int(metadata["annotations"]["pulumi.com/timeoutSeconds"]) >= 1800


@pytest.mark.parametrize("target", list(Target))
def test_every_worker_finds_the_gpu_libraries(target):
    """Workers mount the host's driver and gIB read-only and put the driver on LD_LIBRARY_PATH."""
    group = worker_group(rendered(target))
    mounts = {m["mountPath"]: m for m in container(group)["volumeMounts"]}
    assert mounts["/usr/local/nvidia"]["readOnly"] and mounts["/usr/local/gib"]["readOnly"]
    env = container(group)["env"]
    assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in env


# --- Bad input --------------------------------------------------------------------------------


def problems_of(target: Target, mode=ClusterMode.STANDARD, **changes) -> str:
    with pytest.raises(ValueError) as error:
        make_args(target, mode, **changes)
    return str(error.value)


BAD_INPUT = [
    (Target.A4, {"nodes": 0}, r"nodes = 0 is out of range for a4-highgpu-8g: use 1 to 252"),
    (Target.A4X, {"nodes": 19}, r"nodes = 19 .* use 1 to 18"),
    (Target.A4, {"mode": "serverless"}, r"mode = 'serverless' .* 'standard' or 'autopilot'"),
    (Target.A4X, {"mode": "autopilot"}, r"mode = 'autopilot' is not available for target a4x"),
    (Target.A4, {"rdma_networks": ["gvnic-1"]}, r"lists 1 networks.*needs 9.*pod_networks"),
    (Target.A4X, {"rdma_networks": ["gvnic-1"]}, r"rdma_networks = \['gvnic-1'\] is set.*empty"),
    (Target.A4X, {"rdma_claim_template": None}, r"rdma_claim_template and .* are required"),
    (Target.A4, {"rdma_claim_template": "x"}, r"rdma_claim_template / .* are set"),
    (Target.A4, {"head_node_selector": None}, r"head_node_selector is required .*gke-nodepool"),
    (Target.A4X, {"head_node_selector": SYSTEM_POOL}, r"GB200 node\): leave it unset"),
    (Target.A4, {"image": "verlai/verl:vllm011.latest"}, r"'verlai/verl:vllm011.latest' has a floating"),
    (Target.A4, {"image": "verlai/verl"}, r"image = 'verlai/verl' has a floating tag"),
    (Target.A4, {"namespace": "Verl_NS"}, r"'Verl_NS' is not a Kubernetes namespace name"),
]


@pytest.mark.parametrize("target,changes,expected", BAD_INPUT)
def test_bad_input_is_rejected_naming_field_value_and_fix(target, changes, expected):
    """Each inconsistency stops construction with the field, the bad value and what to do."""
    assert re.search(expected, problems_of(target, **changes))


def test_autopilot_rejects_a_head_node_selector():
    """Autopilot has no pools to name: a head selector there is an error, not silently used."""
    message = problems_of(Target.A4, ClusterMode.AUTOPILOT, head_node_selector=SYSTEM_POOL)
    assert "Autopilot places it by compute class" in message


def test_all_problems_are_reported_together():
    """Several mistakes come back in one error, counted."""
    message = problems_of(Target.A4, nodes=999, image="verlai/verl:latest", head_node_selector=None)
    assert "3 problem(s)" in message
    assert "nodes = 99" in message and "floating tag" in message and "head_node_selector" in message


def test_a_pinned_tag_or_digest_is_accepted_and_used():
    """A tag naming one build, or a digest, replaces the default image everywhere."""
    digest = "registry.example/verl@sha256:" + "0" * 64
    for image in ("verlai/verl:vllm011.dev7", digest, "localhost:5000/verl:v1"):
        obj = rendered(Target.A4, image=image)
        assert container(worker_group(obj))["image"] == image == container(head(obj))["image"]


def test_mode_may_be_given_as_its_value():
    """The cluster mode's string value is taken as the mode itself."""
    args = make_args(Target.A4, "autopilot", head_node_selector=None)
    assert args.mode is ClusterMode.AUTOPILOT


# --- The component under mocks ----------------------------------------------------------------

RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RELEASE = "kubernetes:helm.sh/v3:Release"
COMPONENT = "verl-gke:index:VerlRayCluster"


def run_component(args: VerlRayClusterArgs) -> mockrun.Recording:
    def program():
        cluster = VerlRayCluster("ray", args)
        pulumi.export("name", cluster.name)
        pulumi.export("head_service", cluster.head_service)
        pulumi.export("dashboard_port", cluster.dashboard_port)
        pulumi.export("worker_replicas", cluster.worker_replicas)
        pulumi.export("worker_group", cluster.worker_group)

    return mockrun.run(program)


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_component_creates_exactly_the_rendered_raycluster(target, mode):
    """The registered RayCluster is the rendered object, a child named `<name>-ray-cluster`."""
    args = make_args(target, mode)
    recording = run_component(args)
    component = recording.one(COMPONENT, "ray")
    cluster = recording.one(RAY_CLUSTER, "ray-ray-cluster")
    assert cluster.parent == component.urn
    assert mockrun.k8s_object(cluster) == render_ray_cluster(args)


def test_component_exports_names_port_and_replicas():
    """Outputs: RayCluster name, `<name>-head-svc`, the dashboard port, replicas, worker group."""
    recording = run_component(make_args(Target.A3_ULTRA, nodes=5))
    assert recording.plain_outputs() == {
        "name": "h200-ray-cluster",
        "head_service": "h200-ray-cluster-head-svc",
        "dashboard_port": 8265,
        "worker_replicas": 5,
        "worker_group": WORKER_GROUP,
    }


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_head_policy_admits_the_head_ports_from_the_namespace_only(target, mode):
    """The NetworkPolicy selects the head; 6379/8265/10001 are open to this namespace's pods only,
    all ports to the cluster's own pods (Ray's dynamic ports), 8080 to Managed Prometheus."""
    args = make_args(target, mode)
    recording = run_component(args)
    policy = recording.one(POLICY, "ray-head-policy")
    assert policy.parent == recording.one(COMPONENT, "ray").urn
    obj = mockrun.k8s_object(policy)
    k8s_schemas.validate(obj)
    name = args.cluster_name
    assert obj["metadata"]["namespace"] == "verl"
    spec = obj["spec"]
    head_labels = {"ray.io/cluster": name, "ray.io/node-type": "head"}
    assert spec["podSelector"] == {"matchLabels": head_labels}
    assert spec["policyTypes"] == ["Ingress"]
    own, namespace, metrics = spec["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": {"ray.io/cluster": name}}}]}
    # A bare podSelector (no namespaceSelector, no ipBlock) means: pods of this namespace.
    assert namespace["from"] == [{"podSelector": {}}]
    assert sorted(p["port"] for p in namespace["ports"]) == [6379, 8265, 10001]
    assert {p["protocol"] for p in namespace["ports"]} == {"TCP"}
    assert metrics == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gmp-system"}}}
        ],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }


def test_gke_addon_clusters_install_no_operator():
    """By default the GKE Ray add-on reconciles the RayCluster: no Helm release is created."""
    assert run_component(make_args(Target.A4)).of_type(RELEASE) == []


def test_helm_operator_is_pinned_and_scoped_to_the_namespace():
    """operator=HELM installs the pinned kuberay-operator chart watching only this namespace."""
    recording = run_component(make_args(Target.A4X, operator=RayOperator.HELM))
    release = recording.one(RELEASE, "ray-kuberay-operator")
    assert release.parent == recording.one(COMPONENT, "ray").urn
    inputs = release.plain_inputs
    assert inputs["name"] == "kuberay-operator"
    assert inputs["chart"] == pins.KUBERAY_OPERATOR.chart == "kuberay-operator"
    assert inputs["repositoryOpts"] == {"repo": "https://ray-project.github.io/kuberay-helm/"}
    assert inputs["version"] == pins.KUBERAY_OPERATOR.version
    assert re.fullmatch(r"\d+\.\d+\.\d+", inputs["version"])  # an exact release, not a range
    assert inputs["namespace"] == "verl"
    assert inputs["values"] == {"singleNamespaceInstall": True, "watchNamespace": ["verl"]}


# --- Ray logs and metrics for Cloud Logging / Managed Prometheus ------------------------------


def _shipper(spec: dict) -> dict:
    (sidecar,) = [c for c in spec.get("initContainers", []) if c["name"] == "ray-log-shipper"]
    return sidecar


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_every_head_ships_the_job_logs_through_a_native_sidecar(target, mode):
    """The head runs the log shipper as a native sidecar (restartPolicy Always) on the Ray
    image, reading the Ray logs volume read-only; Ray stays the only (first) container."""
    obj = rendered(target, mode)
    spec = head(obj)["template"]["spec"]
    sidecar = _shipper(spec)
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == container(head(obj))["image"]
    assert sidecar["volumeMounts"] == [{"name": "ray-logs", "mountPath": "/tmp/ray", "readOnly": True}]
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["RAY_LOGS_DIR"] == "/tmp/ray/session_latest/logs"
    assert {"job-driver-*.log", "jobs/supervisor-*.log"} <= set(env["SHIP_PATTERNS"].split())
    assert [c["name"] for c in spec["containers"]] == ["ray-head"]


@pytest.mark.parametrize("target,mode", TARGET_MODES, ids=IDS)
def test_without_the_ray_addon_ray_logs_and_metrics_are_shipped_by_the_component(target, mode):
    """A4X (Helm operator, no GKE Ray add-on): system logs from head and workers, and a
    PodMonitoring on the metrics port; with the add-on, neither (the add-on does it)."""
    # As __main__ wires it: A4X is the one target without the add-on.
    operator = RayOperator.HELM if target is Target.A4X else RayOperator.GKE_ADDON
    args = make_args(target, mode, operator=operator)
    obj = render_ray_cluster(args)
    head_patterns = dict((e["name"], e["value"]) for e in _shipper(head(obj)["template"]["spec"])["env"])
    worker_spec = worker_group(obj)["template"]["spec"]
    if args.operator is RayOperator.HELM:
        assert "raylet.out" in head_patterns["SHIP_PATTERNS"]
        worker_sidecar = _shipper(worker_spec)
        assert worker_sidecar["volumeMounts"][0]["name"] == "ray-tmp-storage"
        monitoring = render_pod_monitoring(args)
        k8s_schemas.validate(monitoring)
        assert monitoring["spec"]["selector"]["matchLabels"] == {"ray.io/cluster": args.cluster_name}
        assert monitoring["spec"]["endpoints"] == [{"port": 8080, "interval": "30s"}]
    else:
        assert "raylet.out" not in head_patterns["SHIP_PATTERNS"]
        # No log shipper on the workers; a4/a3u's one init container waits for the gIB plugin.
        names = [c["name"] for c in worker_spec.get("initContainers", [])]
        assert names == ["wait-for-gib"]


def test_pod_monitoring_schema_check_is_live():
    """The PodMonitoring CRD check rejects a misspelled field (the schema is really applied)."""
    bad = render_pod_monitoring(make_args(Target.A4X, operator=RayOperator.HELM))
    bad["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(AssertionError, match="PodMonitoring"):
        k8s_schemas.validate(bad)
