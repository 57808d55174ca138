"""The whole program under the mock runtime, per stack and cluster mode, against the tutorial.

Each test runs the real __main__.py with the stack's file and the plan's example site facts (see
conftest.rendered) and checks what would be sent to the providers.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
import yaml

from components.facts import pins
from components.facts.layout import CHECKPOINT_MOUNT
from components.storage.gcs_fuse_storage import MountUse, mount_options
from components.facts.expectations import EXPECTATIONS
from components.facts.hardware import Arch, Target, profile
from tests import k8s_schemas
from tests.conftest import STACK_MODES, rendered
from tools import mockrun, plan

STANDARD_RDMA = [("a4", "standard"), ("a3u", "standard")]
RDMA_STACKS = STANDARD_RDMA + [("a4", "autopilot"), ("a3u", "autopilot")]
EXAMPLE_TOKEN = plan.EXAMPLE_SECRETS["hfToken"]


def inputs_of(recording, type_, name):
    return recording.one(type_, name).plain_inputs


def test_every_resource_belongs_to_a_component_and_is_named_after_it(program):
    """Children are parented to their component and carry its name as prefix (STYLE 4)."""
    _, _, _, recording = program
    components = {r.urn: r for r in recording.resources if r.type.startswith("verl-gke:index:")}
    assert components, "no components registered"
    for r in recording.resources:
        parent = plan.parent_urn(r.parent)
        if parent is None:
            continue
        owner = recording.by_urn(parent)
        assert r.name.startswith(f"{owner.name}-"), (r.name, owner.name)


def test_every_core_kubernetes_object_validates_strictly(program):
    """Core kinds pass kubernetes-validate in strict mode (unknown fields are errors)."""
    _, _, _, recording = program
    core = [o for o in recording.kubernetes_objects() if not k8s_schemas.is_custom(o)]
    assert core
    for obj in core:
        k8s_schemas.validate(obj)


def test_every_custom_resource_validates_against_its_real_crd(program):
    """RayCluster, ComputeDomain, GKE network objects and PodMonitoring pass their upstream CRD
    schemas (kept in tests/schemas/crds/), with unknown fields forbidden."""
    _, _, _, recording = program
    custom = [o for o in recording.kubernetes_objects() if k8s_schemas.is_custom(o)]
    assert custom
    for obj in custom:
        k8s_schemas.validate(obj)


def test_no_secret_value_appears_in_plain_text(program, tmp_path):
    """The token and kubeconfig never appear in the plan, the manifests or the outputs."""
    stack, mode, inputs, recording = program
    assert plan.write_plan(stack, mode, tmp_path, quiet=True) == 0
    out = tmp_path / f"{stack}-{mode}"
    rendered_text = (out / "plan.json").read_text() + (out / "manifests.yaml").read_text()
    assert EXAMPLE_TOKEN not in rendered_text
    assert base64.b64encode(EXAMPLE_TOKEN.encode()).decode() not in rendered_text
    kubeconfig = recording.outputs["kubeconfig"]
    assert "gke-gcloud-auth-plugin" in kubeconfig  # the real value exists...
    assert "gke-gcloud-auth-plugin" not in rendered_text  # ...and is never written
    assert recording.plain_outputs()["kubeconfig"] == "[secret]"
    secret = recording.one("kubernetes:core/v1:Secret", "storage-hf-secret")
    assert secret.plain_inputs["data"] == {"hf_api_token": "[secret]"}
    assert base64.b64decode(mockrun.unwrap(secret.inputs["data"])["hf_api_token"]).decode() == EXAMPLE_TOKEN


def test_the_token_secret_is_written_as_data_not_string_data(program):
    """The Hugging Face token Secret sends `data` (base64), never `stringData`: the API server
    folds stringData into data, so under server-side apply a second field manager conflicted on
    `stringData.hf_api_token`, and pulumi-kubernetes normalises stringData only when no input is
    unknown (components/secrets.py secret_data)."""
    _, _, _, recording = program
    secret = recording.one("kubernetes:core/v1:Secret", "storage-hf-secret")
    assert "stringData" not in secret.inputs and set(secret.plain_inputs["data"]) == {"hf_api_token"}


def test_everything_that_reaches_the_cluster_goes_through_its_dns_endpoint(program):
    """The Kubernetes provider, the run's and the cluster check's `kubectl port-forward`
    (`access.kubeconfig`) and the `kubeconfig` output (`make logs`, `make curve`, the preview)
    hold one kubeconfig, and it names the DNS endpoint, which is the `clusterEndpoint` output;
    the cluster has no IP endpoint."""
    _, _, _, recording = program
    endpoint = recording.outputs["clusterEndpoint"]
    assert endpoint.endswith(".gke.goog")
    kubeconfig = recording.outputs["kubeconfig"]
    assert yaml.safe_load(kubeconfig)["clusters"][0]["cluster"] == {"server": f"https://{endpoint}"}
    held = [mockrun.unwrap(recording.one("pulumi:providers:kubernetes").inputs["kubeconfig"])]
    for type_ in ("pulumi-python:dynamic/verl-gke:GrpoRun", "pulumi-python:dynamic/verl-gke:ClusterCheckRun"):
        held.append(mockrun.unwrap(recording.one(type_).inputs["access"])["kubeconfig"])
    assert held == [kubeconfig] * 3
    cluster = recording.one("gcp:container/cluster:Cluster").plain_inputs
    assert cluster["controlPlaneEndpointsConfig"]["ipEndpointsConfig"] == {"enabled": False}


@pytest.mark.parametrize("stack_mode", RDMA_STACKS, ids=lambda s: "-".join(s))
def test_rdma_networks_match_the_tutorial(stack_mode):
    """gVNIC VPC + firewall and one RoCE subnet per NIC, as the tutorial's gcloud commands."""
    _, recording = rendered(*stack_mode)
    nics = profile(stack_mode[0]).rdma_nics
    cluster = f"verl-{stack_mode[0]}"  # default names carry the stack
    gvnic = inputs_of(recording, "gcp:compute/network:Network", "networks-gvnic")
    assert gvnic["name"] == f"{cluster}-gvnic-net" and gvnic["autoCreateSubnetworks"] is False
    sub = inputs_of(recording, "gcp:compute/subnetwork:Subnetwork", "networks-gvnic-sub")
    assert (sub["name"], sub["region"], sub["ipCidrRange"]) == (
        f"{cluster}-gvnic-sub", "us-central1", "192.168.0.0/24",
    )
    fw = inputs_of(recording, "gcp:compute/firewall:Firewall", "networks-gvnic-internal")
    assert fw["sourceRanges"] == ["192.168.0.0/16"]
    assert sorted(a["protocol"] for a in fw["allows"]) == ["icmp", "tcp", "udp"]
    rdma = inputs_of(recording, "gcp:compute/network:Network", "networks-rdma")
    assert rdma["networkProfile"] == (
        "https://www.googleapis.com/compute/beta/projects/example-project/global/"
        "networkProfiles/us-central1-b-vpc-roce"
    )
    assert rdma["mtu"] == 8896 and gvnic["mtu"] == 8896
    for n in range(nics):
        s = inputs_of(recording, "gcp:compute/subnetwork:Subnetwork", f"networks-rdma-sub-{n}")
        assert (s["name"], s["ipCidrRange"]) == (f"{cluster}-rdma-sub-{n}", f"192.168.{n + 1}.0/24")
    rdma_component = [r for r in recording.of_type("gcp:compute/subnetwork:Subnetwork") if r.name.startswith("networks-")]
    assert len(rdma_component) == nics + 1


@pytest.mark.parametrize("stack_mode", RDMA_STACKS, ids=lambda s: "-".join(s))
def test_network_objects_map_every_nic(stack_mode):
    """One GKENetworkParamSet + Network per interface: gvnic-1 NetDevice, rdma-N RDMA."""
    _, recording = rendered(*stack_mode)
    objects = recording.kubernetes_objects()
    params = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "GKENetworkParamSet"}
    networks = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Network"}
    expected = ["gvnic-1"] + [f"rdma-{n}" for n in range(8)]
    assert sorted(params) == sorted(expected) == sorted(networks)
    cluster = f"verl-{stack_mode[0]}"
    assert params["gvnic-1"] == {
        "vpc": f"{cluster}-gvnic-net", "vpcSubnet": f"{cluster}-gvnic-sub", "deviceMode": "NetDevice",
    }
    assert params["rdma-3"] == {
        "vpc": f"{cluster}-rdma-net", "vpcSubnet": f"{cluster}-rdma-sub-3", "deviceMode": "RDMA",
    }
    for name, spec in networks.items():
        assert spec == {
            "type": "Device",
            "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": name},
        }


def test_a4x_creates_no_rdma_vpcs():
    """A4X's DRANET profile makes GKE create the networks: no GPU VPC or network objects here
    (only the stack's primary network)."""
    _, recording = rendered("a4x", "standard")
    assert [r.name for r in recording.of_type("gcp:compute/network:Network")] == ["primary-network-vpc"]
    assert not [o for o in recording.kubernetes_objects() if o["kind"] in ("Network", "GKENetworkParamSet")]


@pytest.mark.parametrize("stack", ["a4", "a3u", "a4x"])
def test_standard_cluster_matches_the_tutorial_and_cluster_toolkit(stack):
    """Dataplane V2, workload identity, VPC-native, multi-networking, add-ons, monitoring; the
    tutorial's 1..5 c2-standard-16 system nodes, as totals in the GPU zone (a regional pool
    without node locations would count them per zone: 3..15 in a three-zone region)."""
    _, recording = rendered(stack, "standard")
    cluster = inputs_of(recording, "gcp:container/cluster:Cluster", "gke-cluster")
    assert cluster["name"] == f"verl-{stack}" and cluster["location"] == "us-central1"
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "example-project.svc.id.goog"}
    assert cluster["networkingMode"] == "VPC_NATIVE"
    assert cluster["enableMultiNetworking"] is True
    assert cluster["addonsConfig"]["gcsFuseCsiDriverConfig"] == {"enabled": True}
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["deletionProtection"] is True
    assert cluster["monitoringConfig"]["enableComponents"] == ["SYSTEM_COMPONENTS", "DCGM"]
    assert cluster["monitoringConfig"]["managedPrometheus"] == {"enabled": True}
    [exclusion] = cluster["maintenancePolicy"]["maintenanceExclusions"]
    assert exclusion["exclusionOptions"] == {
        "scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT",
    }
    assert cluster["minMasterVersion"] == "1.34"  # the minor of REGULAR's default today
    system = inputs_of(recording, "gcp:container/nodePool:NodePool", "gke-system-pool")
    assert system["nodeConfig"]["machineType"] == "c2-standard-16"
    assert system["nodeLocations"] == ["us-central1-b"]  # the stack's GPU zone
    assert system["autoscaling"] == {"totalMinNodeCount": 1, "totalMaxNodeCount": 5}
    assert system["initialNodeCount"] == 1
    ray_addon = cluster["addonsConfig"].get("rayOperatorConfigs")
    if stack == "a4x":
        # KubeRay comes from the namespace-scoped Helm chart; two operators would fight.
        assert not ray_addon
        assert "resource.k8s.io/v1beta1/resourceclaims" in cluster["enableK8sBetaApis"]["enabledApis"]
    else:
        assert ray_addon[0]["enabled"] is True
        assert ray_addon[0]["rayClusterLoggingConfig"] == {"enabled": True}
        assert ray_addon[0]["rayClusterMonitoringConfig"] == {"enabled": True}
        assert "enableK8sBetaApis" not in cluster


@pytest.mark.parametrize("stack", ["a4", "a3u"])
def test_autopilot_cluster_has_no_node_pools(stack):
    """Autopilot: create-auto with multi-networking and the Ray operator; GKE owns the nodes."""
    _, recording = rendered(stack, "autopilot")
    cluster = inputs_of(recording, "gcp:container/cluster:Cluster", "gke-cluster")
    assert cluster["enableAutopilot"] is True and cluster["enableMultiNetworking"] is True
    assert cluster["addonsConfig"]["rayOperatorConfigs"][0]["enabled"] is True
    assert not recording.of_type("gcp:container/nodePool:NodePool")
    assert "workloadIdentityConfig" not in cluster  # implicit in Autopilot; setting it fails


@pytest.mark.parametrize("stack", ["a4", "a3u"])
def test_gpu_pool_matches_the_tutorial_plus_cluster_toolkit(stack):
    """The tutorial's gpu-pool, plus gVNIC, streaming, local SSDs, taint (no placement policy on
    a reservation, as Cluster Toolkit's gke-a4 / gke-a3-ultragpu)."""
    hw = profile(stack)
    _, recording = rendered(stack, "standard")
    pool = inputs_of(recording, "gcp:container/nodePool:NodePool", "gpu-pool")
    node = pool["nodeConfig"]
    assert pool["name"] == "gpu-pool" and pool["nodeLocations"] == ["us-central1-b"]
    assert node["machineType"] == hw.machine_type
    assert node["guestAccelerators"] == [
        {"type": hw.gpu_type, "count": 8, "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"}}
    ]
    assert node["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["example-reservation"],
    }
    assert pool["initialNodeCount"] == 2
    assert pool["autoscaling"]["totalMaxNodeCount"] == 2
    networks = pool["networkConfig"]["additionalNodeNetworkConfigs"]
    cluster = f"verl-{stack}"
    assert networks == [{"network": f"{cluster}-gvnic-net", "subnetwork": f"{cluster}-gvnic-sub"}] + [
        {"network": f"{cluster}-rdma-net", "subnetwork": f"{cluster}-rdma-sub-{n}"} for n in range(8)
    ]
    # Cluster Toolkit's reservation pools for these machines set no placement policy.
    assert "placementPolicy" not in pool
    assert node["gvnic"] == {"enabled": True} and node["gcfsConfig"] == {"enabled": True}
    assert node["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 32}
    assert node["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert "cloud.google.com/gke-networking-dra-driver" not in node["labels"]


def test_a4x_gpu_pool_uses_dranet_and_an_nvl72_workload_policy():
    """a4x-highgpu-4g: 4 GPUs, `auto` network profile, no extra networks, HIGH_THROUGHPUT 1x72."""
    _, recording = rendered("a4x", "standard")
    pool = inputs_of(recording, "gcp:container/nodePool:NodePool", "gpu-pool")
    node = pool["nodeConfig"]
    assert node["machineType"] == "a4x-highgpu-4g"
    assert node["guestAccelerators"][0]["type"] == "nvidia-gb200"
    assert node["guestAccelerators"][0]["count"] == 4
    assert pool["networkConfig"] == {"acceleratorNetworkProfile": "auto"}
    # The profile alone attaches networks; this label makes GKE run its DRANET driver there.
    assert node["labels"]["cloud.google.com/gke-networking-dra-driver"] == "true"
    assert node["diskType"] == "hyperdisk-balanced"
    assert node["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 0}  # the bundled SSDs
    assert pool["initialNodeCount"] == 4
    policy = inputs_of(recording, "gcp:compute/resourcePolicy:ResourcePolicy", "gpu-placement")
    assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "1x72"}
    assert policy["name"] == "verl-a4x-1x72-placement"  # per cluster: unique in the region
    assert pool["placementPolicy"] == {"type": "COMPACT", "policyName": policy["name"]}


@pytest.mark.parametrize("stack_mode", [("a4", "standard"), ("a4", "autopilot"), ("a4x", "standard")], ids="-".join)
def test_nccl_installer_is_pinned_per_cluster_kind(stack_mode):
    """The installer manifest comes from a pinned commit, matching the cluster's kind."""
    _, recording = rendered(*stack_mode)
    manifest = inputs_of(recording, "kubernetes:yaml/v2:ConfigFile", "nccl-manifest")
    expected = {
        ("a4", "standard"): pins.NCCL_INSTALLER_STANDARD,
        ("a4", "autopilot"): pins.NCCL_INSTALLER_AUTOPILOT,
        ("a4x", "standard"): pins.NCCL_INSTALLER_A4X,
    }[stack_mode]
    assert manifest["file"] == expected
    assert f"/{pins.NCCL_INSTALLER_COMMIT}/" in expected and "master" not in expected


@pytest.mark.parametrize("stack", ["a4", "a4x"])
def test_storage_matches_the_tutorial(stack):
    """Bucket, KSA, bucket-scoped IAM for the KSA's principal, PV/PVC with the tutorial's options."""
    _, recording = rendered(stack, "standard")
    bucket = inputs_of(recording, "gcp:storage/bucket:Bucket", "storage-bucket")
    assert bucket["name"] == f"verl-{stack}-example-project" and bucket["location"] == "US-CENTRAL1"
    assert bucket["labels"] == {
        "verl-gke-stack": stack, "verl-gke-target": stack, "verl-gke-cluster": f"verl-{stack}",
    }
    assert bucket["hierarchicalNamespace"] == {"enabled": True}
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    iam = inputs_of(recording, "gcp:storage/bucketIAMMember:BucketIAMMember", "storage-object-user")
    assert iam["role"] == "roles/storage.objectUser"
    assert iam["member"] == (
        "principal://iam.googleapis.com/projects/000000000000/locations/global/"
        "workloadIdentityPools/example-project.svc.id.goog/subject/ns/default/sa/verl-ray"
    )
    objects = {(o["kind"], o["metadata"]["name"]): o for o in recording.kubernetes_objects()}
    pv = objects[("PersistentVolume", "training-bucket-pv")]["spec"]
    pvc = objects[("PersistentVolumeClaim", "training-bucket-pvc")]["spec"]
    assert pv["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert pv["csi"]["volumeHandle"] == f"verl-{stack}-example-project"
    assert pv["csi"]["volumeAttributes"] == {
        "skipCSIBucketAccessCheck": "true", "gcsfuseMetadataPrefetchOnMount": "true",
    }
    assert pv["accessModes"] == pvc["accessModes"] == ["ReadWriteMany"]
    assert pv["capacity"] == pvc["resources"]["requests"] == {"storage": "768Gi"}
    assert pv["storageClassName"] == pvc["storageClassName"] == "gcsfuse-sc"
    assert pvc["volumeName"] == "training-bucket-pv"
    assert pv["mountOptions"] == mount_options(profile(stack).arch)
    assert ("ServiceAccount", "verl-ray") in objects


@pytest.mark.parametrize("use", list(MountUse))
def test_arm64_mounts_drop_kernel_read_ahead_only(use):
    """A4X (64 KiB pages) drops read_ahead_kb, gcsfuse's known issue, from every use's options."""
    amd64, arm64 = mount_options(Arch.AMD64, use), mount_options(Arch.ARM64, use)
    assert "read_ahead_kb=1024" in amd64
    assert [o for o in amd64 if o != "read_ahead_kb=1024"] == arm64


def test_each_use_of_the_bucket_gets_its_own_options():
    """Model reads: file cache, parallel downloads, no write tuning. Checkpoints: the same
    reads (a resume reads every shard once) plus streaming writes. Staging: the tutorial's set.
    Every use expires metadata at once (a re-staged model, checkpoints written by another node)
    and keeps no negative entries."""
    model = mount_options(Arch.AMD64, MountUse.MODEL)
    checkpoints = mount_options(Arch.AMD64, MountUse.CHECKPOINTS)
    assert "file-cache:enable-parallel-downloads:true" in model
    assert not any(o.startswith("write:") for o in model)
    assert "write:enable-streaming-writes:true" in checkpoints
    assert set(model) < set(checkpoints)
    for use in MountUse:
        options = mount_options(Arch.AMD64, use)
        assert "metadata-cache:ttl-secs:0" in options and "metadata-cache:negative-ttl-secs:0" in options
        assert not any(o.startswith("profile") for o in options)  # the CSI driver refuses it


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a4", "autopilot"), ("a4x", "standard")])
def test_ray_pods_write_checkpoints_through_their_own_mount(stack, mode):
    """Head and workers mount the bucket twice: /data with the model options (the PV), and the
    checkpoint mount with streaming writes, where the run's checkpoint directory is."""
    _, recording = rendered(stack, mode)
    ray = recording.one("kubernetes:ray.io/v1:RayCluster").plain_inputs["spec"]
    arch = profile(stack).arch
    groups = [ray["headGroupSpec"], *ray["workerGroupSpecs"]]
    for group in groups:
        pod = group["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        checkpoints = volumes[mounts[CHECKPOINT_MOUNT]]["csi"]["volumeAttributes"]
        assert checkpoints["bucketName"] == f"verl-{stack}-example-project"
        assert checkpoints["mountOptions"] == ",".join(mount_options(arch, MountUse.CHECKPOINTS))
        assert "persistentVolumeClaim" in volumes[mounts["/data"]]
    worker_volumes = {v["name"] for v in ray["workerGroupSpecs"][0]["template"]["spec"]["volumes"]}
    assert "gke-gcsfuse-cache" in worker_volumes  # the file cache on the node's local SSDs
    entrypoint = recording.one(GRPO_RUN).plain_inputs["entrypoint"]
    assert f"trainer.default_local_dir={CHECKPOINT_MOUNT}/checkpoints/" in entrypoint


def test_destroy_keeps_the_bucket_unless_asked():
    """By default the bucket is retained on destroy and never force-emptied; opting in flips both."""
    _, recording = rendered("a4", "standard")
    bucket = recording.one("gcp:storage/bucket:Bucket", "storage-bucket")
    assert bucket.retain_on_delete is True
    assert bucket.plain_inputs["forceDestroy"] is False
    opted_in = _run_with("a4", {"verl-gke:deleteBucketOnDestroy": "true"})
    bucket = opted_in.one("gcp:storage/bucket:Bucket", "storage-bucket")
    assert bucket.retain_on_delete is False
    assert bucket.plain_inputs["forceDestroy"] is True


def test_the_no_upgrade_window_does_not_move_every_day():
    """Unset, the exclusion starts on the creation day and later runs ignore it; set, it is used."""
    _, recording = rendered("a4", "standard")  # the plan sets an example start
    cluster = recording.one("gcp:container/cluster:Cluster")
    assert cluster.ignore_changes == ("minMasterVersion", "nodeConfig", "nodeLocations")
    defaulted = _run_with("a4", {"verl-gke:maintenanceExclusionStart": ""})
    cluster = defaulted.one("gcp:container/cluster:Cluster")
    assert cluster.ignore_changes == (
        "minMasterVersion", "nodeConfig", "nodeLocations",
        "maintenancePolicy.maintenanceExclusions[0].startTime",
    )
    [exclusion] = cluster.plain_inputs["maintenancePolicy"]["maintenanceExclusions"]
    assert exclusion["startTime"].endswith("T00:00:00Z")


def _run_with(stack: str, changes: dict[str, str]) -> mockrun.Recording:
    """The whole program for `stack` (Standard) with some config keys changed."""
    return plan.run_program(stack, "standard", changes)[1]


def test_outputs_are_the_documented_contract(program):
    """Stack outputs keep their names and shapes: dashboards depend on them."""
    stack, mode, _, recording = program
    out = recording.plain_outputs()
    hw = profile(stack)
    nodes = hw.default_nodes
    assert out["clusterName"] == f"verl-{stack}" and out["clusterLocation"] == "us-central1"
    assert out["bucketUrl"] == f"gs://verl-{stack}-example-project"
    # The root of every run's directory; the run's own is job.checkpointUri (added).
    bucket = f"gs://verl-{stack}-example-project"
    assert out["checkpointUri"] == f"{bucket}/checkpoints"
    run_dir = out["job"]["runDir"]
    assert re.fullmatch(rf"grpo-{hw.gpus_per_node * nodes}gpu-[0-9a-f]{{12}}", run_dir)
    assert out["job"]["checkpointUri"] == f"{bucket}/checkpoints/{run_dir}"
    # exportModel is on by default: the Hugging Face model's place in the run's directory.
    assert out["job"]["modelUri"] == f"{bucket}/checkpoints/{run_dir}/huggingface"
    assert out["hardware"] == {
        "target": stack, "gpuType": hw.gpu_type, "machineType": hw.machine_type,
        "gpusPerNode": hw.gpus_per_node, "nodes": nodes, "totalGpus": hw.gpus_per_node * nodes,
        "clusterMode": mode,
    }
    assert out["consoleUrls"]["cluster"].startswith("https://console.cloud.google.com/kubernetes/")
    assert out["kubeconfig"] == "[secret]"


def test_plan_files_have_the_documented_shape(tmp_path):
    """plan.json lists resources with urn/type/name/parent/inputs; manifests.yaml is plain YAML."""
    assert plan.write_plan("a3u", None, tmp_path, quiet=True) == 0
    document = json.loads((tmp_path / "a3u" / "plan.json").read_text())
    assert set(document) == {"stack", "project", "exampleValues", "resources", "outputs"}
    assert document["exampleValues"]["gcp:project"] == "example-project"
    assert document["exampleValues"]["verl-gke:hfToken"] == "[secret]"
    for resource in document["resources"]:
        assert set(resource) == {
            "urn", "type", "name", "parent", "custom", "inputs", "options", "dependsOn", "inputsFrom",
        }
        assert set(resource["options"]) == {
            "protect", "retainOnDelete", "deleteBeforeReplace", "ignoreChanges",
            "replaceOnChanges", "customTimeouts", "import", "provider", "aliases",
            "replacementTrigger",
        }
    manifests = list(yaml.safe_load_all((tmp_path / "a3u" / "manifests.yaml").read_text()))
    assert all({"apiVersion", "kind", "metadata"} <= set(m) for m in manifests)


def test_plan_records_options_and_dependencies_as_the_engine_gets_them(tmp_path):
    """plan.json carries each resource's engine options and the URNs it depends on, split into
    explicit depends_on and the resources behind each input, so destroy order and replacement
    behaviour can be read from the file alone."""
    assert plan.write_plan("a4", None, tmp_path, quiet=True) == 0
    document = json.loads((tmp_path / "a4" / "plan.json").read_text())
    by_name = {(r["type"], r["name"]): r for r in document["resources"]}
    urn = {key: r["urn"] for key, r in by_name.items()}
    bucket = by_name[("gcp:storage/bucket:Bucket", "storage-bucket")]
    assert bucket["options"]["retainOnDelete"] is True
    job = by_name[("kubernetes:batch/v1:Job", "staging-job")]
    assert job["options"]["deleteBeforeReplace"] is True
    assert job["options"]["customTimeouts"]["create"].endswith("m")
    provider = urn[("pulumi:providers:kubernetes", "gke-k8s")]
    assert job["options"]["provider"] == provider
    assert by_name[("gcp:container/cluster:Cluster", "gke-cluster")]["options"]["provider"] is None
    iam = by_name[("gcp:storage/bucketIAMMember:BucketIAMMember", "storage-object-user")]
    assert iam["inputsFrom"]["bucket"] == [bucket["urn"]]
    run = by_name[(GRPO_RUN, "grpo-run")]
    # The job reads what staging wrote, and its `staged` input comes from the staging Job's
    # name: when staging is replaced (delete before replace), the engine's dependent-replacement
    # pass (pulumi/pulumi pkg/resource/deploy/step_generator.go calculateDependentReplacements)
    # follows property dependencies only, sees this one and stops the training job first.
    assert run["inputsFrom"]["staged"] == [job["urn"]]
    assert urn[("kubernetes:ray.io/v1:RayCluster", "ray-ray-cluster")] in run["inputsFrom"]["access"]


GRPO_RUN = "pulumi-python:dynamic/verl-gke:GrpoRun"


def _overrides(entrypoint: str) -> dict[str, str]:
    command = entrypoint.split("verl.trainer.main_ppo", 1)[1]
    return dict(item.split("=", 1) for item in command.split())


def test_training_waits_for_staging_and_the_ray_cluster(program):
    """The job is registered after, and depends on, the staging Job and the ready RayCluster."""
    _, _, _, recording = program
    run = recording.one(GRPO_RUN)
    staging_job = recording.one("kubernetes:batch/v1:Job", "staging-job")
    ray_cluster = recording.one("kubernetes:ray.io/v1:RayCluster")
    assert {staging_job.urn, ray_cluster.urn} <= run.dependencies
    order = recording.resources.index
    assert order(run) > max(order(staging_job), order(ray_cluster))


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        ("a4", {"trainer.nnodes": "2", "trainer.n_gpus_per_node": "8",
                "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
                "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "64"}),
        ("a3u", {"trainer.nnodes": "2", "trainer.n_gpus_per_node": "8"}),
        ("a4x", {"trainer.nnodes": "4", "trainer.n_gpus_per_node": "4",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
                 "actor_rollout_ref.actor.ppo_mini_batch_size": "64",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "32",
                 "actor_rollout_ref.actor.use_kl_loss": "True"}),
    ],
)
def test_job_in_the_plan_runs_the_targets_overrides(stack, expected):
    """Each stack's plan submits the tutorial's run for its target, checkpointing to the bucket."""
    _, recording = rendered(stack, "standard")
    inputs = recording.one(GRPO_RUN).plain_inputs
    overrides = _overrides(inputs["entrypoint"])
    assert expected.items() <= overrides.items()
    assert overrides["actor_rollout_ref.model.path"] == "/data/Qwen2.5-32B-Instruct"
    # The run's own directory, outside the staged source tree (/data/verl).
    assert re.fullmatch(r"/checkpoint-bucket/checkpoints/grpo-\d+gpu-[0-9a-f]{12}",
                        overrides["trainer.default_local_dir"])
    assert overrides["trainer.resume_mode"] == "auto"
    assert int(overrides["trainer.save_freq"]) > 0
    env = inputs["runtime_env"]["env_vars"]
    assert env["PYTHONPATH"] == "/data/verl" and env["HF_HOME"] == "/data/huggingface_cache"
    tuner = profile(stack).nccl_tuner_config
    assert env.get("NCCL_TUNER_CONFIG_PATH") == tuner
    if stack == "a4x":
        assert env["NCCL_ENV_PLUGIN"] == "gcp"
    assert set(inputs["runtime_env"]) == {"env_vars"}  # no working_dir upload, pip or setup_hook


def test_job_model_path_follows_the_staged_model():
    """Staging another model moves the job's model path with it, unless the job sets its own."""
    staging = {"modelId": "Qwen/Qwen2.5-7B-Instruct", "modelRevision": "a" * 40}
    recording = _run_with("a4", {"verl-gke:staging": json.dumps(staging)})
    overrides = _overrides(recording.one(GRPO_RUN).plain_inputs["entrypoint"])
    assert overrides["actor_rollout_ref.model.path"] == "/data/Qwen2.5-7B-Instruct"


CHECK_RUN = "pulumi-python:dynamic/verl-gke:ClusterCheckRun"


def test_cluster_check_runs_before_the_job_and_a_recheck_stops_the_job_first():
    """The check waits for the RayCluster and staging; the job's `checked` input comes from the
    check, so a re-check (replace, delete first) stops training before it takes the GPUs. The
    check expects the target's GPUs and floors."""
    _, recording = rendered("a3u", "standard")
    check = recording.one(CHECK_RUN)
    run = recording.one(GRPO_RUN)
    ray_cluster = recording.one("kubernetes:ray.io/v1:RayCluster")
    assert ray_cluster.urn in check.dependencies
    assert run.input_dependencies["checked"] == {check.urn}
    want = check.plain_inputs["expected"]
    assert (want["gpus_per_node"], want["gpu_name"], want["nodes"]) == (8, "H200", 2)
    assert want["min_busbw_gbs"] == EXPECTATIONS[Target.A3_ULTRA].min_busbw_gbs == 215.0
    assert "--read-path /data/Qwen2.5-32B-Instruct" in check.plain_inputs["entrypoint"]


def test_skip_cluster_check_leaves_it_out():
    """job.skipClusterCheck: no check resource, the job does not wait for one, output says so."""
    recording = _run_with("a4", {"verl-gke:job": json.dumps({"skipClusterCheck": True})})
    assert recording.of_type(CHECK_RUN) == []
    assert recording.one(GRPO_RUN).plain_inputs.get("checked") is None
    assert recording.plain_outputs()["clusterCheck"] == {"status": "SKIPPED"}


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
def test_up_says_how_to_follow_staging_and_the_job_while_it_waits(preview, caplog):
    """`pulumi up` (not preview, which waits on nothing) logs the commands that follow staging
    and the job from another terminal, with the names this stack's config decides: the stack
    has no outputs until `up` ends, so `make logs` alone could not follow the first run."""
    import logging
    import runpy

    inputs = plan.stack_inputs("a4")
    with caplog.at_level(logging.INFO):
        mockrun.run(
            lambda: runpy.run_path(str(plan.ROOT / "__main__.py"), run_name="__pulumi_main__"),
            project="verl-gke", stack="a4", config=inputs.config, secret_keys=inputs.secret_keys,
            invokes=plan.example_invokes(inputs.config), preview=preview,
        )
    hints = [r.getMessage() for r in caplog.records if "While `pulumi up` waits" in r.getMessage()]
    if preview:
        assert hints == []
        return
    [hint] = hints
    for command in (
        "gcloud container clusters get-credentials verl-a4 --location us-central1 "
        "--project example-project",
        "kubectl --namespace default logs --follow --container stage --selector "
        "app.kubernetes.io/name=verl-gke-staging,app.kubernetes.io/part-of=verl-gke",
        "kubectl --namespace default port-forward svc/b200-ray-cluster-head-svc 8265:8265",
        "python -m tools.logs --address http://127.0.0.1:8265",
        "make logs STACK=a4",
    ):
        assert command in hint
    # The names in it are the ones the plan creates.
    _, recording = rendered("a4", "standard")
    assert recording.plain_outputs()["rayCluster"]["headService"] == "b200-ray-cluster-head-svc"
    staging = recording.one("kubernetes:batch/v1:Job", "staging-job").plain_inputs["spec"]["template"]
    assert staging["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "verl-gke", "app.kubernetes.io/name": "verl-gke-staging"}
    assert [c["name"] for c in staging["spec"]["containers"]] == ["stage"]


# --- One value per run (issue 38) --------------------------------------------------------------

def _resolutions(monkeypatch) -> list[str]:
    """The run names `run_sizing.resolve` is called for from now on (where it is defined and
    where components/runspec/run.py `resolve_run` reads it)."""
    from components.runspec import run as grpo_run
    from components.runspec import run_sizing

    calls: list[str] = []
    real = run_sizing.resolve

    def counted(run, *args, **kwargs):
        calls.append(run.run_name)
        return real(run, *args, **kwargs)

    monkeypatch.setattr(run_sizing, "resolve", counted)
    monkeypatch.setattr(grpo_run, "resolve", counted)
    return calls


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def test_the_run_is_resolved_once_per_program(monkeypatch, stack, mode):
    """One value per run (issue 38): a render resolves the stack's run once, when its config is
    loaded (StackConfig.runs, the default model's shape being shipped data), and the model check,
    the GrpoJob, the supervisor, the cluster check and the upload all take that value. Before
    it, one render resolved it 11 times (config load, model check, and nine times in GrpoJob)."""
    calls = _resolutions(monkeypatch)
    plan.run_program(stack, mode)
    assert calls == ["grpo"]


def test_a_model_the_config_cannot_give_is_resolved_again_only_for_its_shape(monkeypatch):
    """A staged model other than the default has a shape only the model check can read: the run
    is resolved at config load (sized for the default model, every problem but the shape's
    reported with the config's), then once more for the shape read, and that value is the one
    the components take."""
    from components.preflight import model_shape
    from tests.test_model_check import QWEN_7B, SEVEN_B

    model_shape.set_source(lambda model_id, revision, token: QWEN_7B)
    try:
        calls = _resolutions(monkeypatch)
        _, recording = plan.run_program("a4", "standard", SEVEN_B)
    finally:
        model_shape.set_source(None)
    assert calls == ["grpo", "grpo"]
    entrypoint = recording.plain_outputs()["job"]["entrypoint"]
    # Sized for Qwen2.5-7B (one GPU's vLLM holds it), not the default 32B's TP of 2.
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=1 " in entrypoint


def test_a_copy_of_the_config_resolves_its_own_runs():
    """StackConfig.runs is cached per config: a copy with other values (model_copy) does not
    carry the original's runs over, it resolves its own."""
    from components.schema import config

    inputs = plan.stack_inputs("a4")
    loaded = config.load(inputs.config, inputs.secret_keys, stack="a4")
    assert loaded.runs["grpo"].nodes == loaded.nodes == 2
    assert loaded.model_copy(update={"gpu_nodes": 4}).runs["grpo"].nodes == 4
