"""The RayCluster that runs verl, and the PodMonitoring that scrapes it, as plain data.

Built from VerlRayClusterArgs (components/raycluster/ray_cluster_args.py) for every target and cluster
mode; components/raycluster/verl_ray_cluster.py creates them. Pulumi inputs in the args pass through
unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from components.facts import pins
from components.facts.hardware import Arch, HardwareProfile, NodeNetworking, PodShape
from components.facts.layout import CHECKPOINT_MOUNT, DASHBOARD_PORT, DATA_MOUNT
from components.observability import log_shipper
from components.raycluster.ray_cluster_args import VerlRayClusterArgs
from components.schema.choices import Capacity, ClusterMode
from components.storage.gcs_fuse_storage import CSI_DRIVER, MountUse, inline_attributes

HEAD_PORTS = {"gcs-server": 6379, "dashboard": DASHBOARD_PORT, "client": 10001}
# Ray's Prometheus endpoint on every Ray pod (KubeRay's default `metrics-export-port`).
METRICS_PORT = 8080
WORKER_GROUP = "gpu-group"

# KubeRay sets `.status.state` to "ready" once the head and every worker pod run. Upstream
# marks the field deprecated in favour of conditions, but it is the one readiness signal that
# both the GKE Ray add-on's KubeRay and the pinned chart set.
WAIT_FOR_READY = "jsonpath={.status.state}=ready"
# Pulling the 20+ GB verl image and scaling GPU nodes up takes longer than the provider's
# 10-minute default. With a reservation or spot the nodes exist once the GPU pool's create has
# returned (its own bound: gpu_node_pool.CREATE_TIMEOUTS), so this is the image and Ray.
READY_TIMEOUT_SECONDS = 3600
# Flex-start: the pool starts empty and its VMs come "when available" (GKE, "About flex-start
# provisioning mode", kubernetes-engine/docs/concepts/dws), requested by the cluster autoscaler
# once these pods are pending: the wait for capacity happens inside this wait. Two hours of it,
# then `up` fails, naming the RayCluster; its pods keep asking, so the next `up` waits again.
# A budget chosen here (GKE publishes no wait time for flex-start capacity), not a measurement.
FLEX_START_CAPACITY_SECONDS = 7200


def ready_timeout_seconds(capacity: Capacity) -> int:
    """How long `pulumi up` waits for the RayCluster to be ready, by where its nodes come from."""
    if capacity is Capacity.FLEX_START:
        return FLEX_START_CAPACITY_SECONDS + READY_TIMEOUT_SECONDS
    return READY_TIMEOUT_SECONDS


# Host paths GKE installs the GPU driver and the gIB NCCL plugin into.
NVIDIA_HOST_PATH = "/home/kubernetes/bin/nvidia"
GIB_HOST_PATH = "/home/kubernetes/bin/gib"
NVIDIA_LIB64 = "/usr/local/nvidia/lib64"

# The gIB NCCL plugin as a worker sees it (GIB_HOST_PATH mounted at /usr/local/gib): the file
# NCCL_NET_PLUGIN names on A4 / A3 Ultra (components/runspec/run_env.py). The installer's init
# container copies it there once the node has joined (`cp -r /var/lib/gib/.
# /usr/local/home/kubernetes/bin/gib`, container-engine-accelerators
# gpudirect-rdma/nccl-rdma-installer.yaml), beside the worker's pull of the verl image. Once the
# image is pre-pulled (components/cluster/image_prepull.py) a worker can start before that copy
# is done; NCCL opens the plugin only at the first collective, but nothing ordered the two.
GIB_PLUGIN = "/usr/local/gib/lib64/libnccl-net_internal.so"
# The worker waits for it this long, then starts anyway: the ClusterCheck fails `up`, naming the
# gIB plugin, if NCCL then cannot load it. The installer pulls two small images and copies a few
# files; ten minutes is a bound, not an estimate.
GIB_WAIT_SECONDS = 600
GIB_WAIT_RESOURCES = {"cpu": "100m", "memory": "64Mi"}
# One attempt of the pods' start-time install (pins.POD_PACKAGES, `_with_pod_packages`): one
# wheel, no dependencies; five minutes is a bound on a stuck download, not an estimate.
POD_PACKAGES_TIMEOUT_SECONDS = 300

# The head's /dev/shm: Ray sizes a node's object store at 30% of its memory
# (ray/_private/ray_constants.py DEFAULT_OBJECT_STORE_MEMORY_PROPORTION), 9.6 GB of the head's
# 32 GB; a Memory emptyDir counts against the pod's memory limit, so it is bounded there too.
HEAD_SHM_SIZE = "10Gi"

# The cluster autoscaler never removes a node to move this pod (the head holds the run's driver
# and Ray's GCS; moving it is a head loss, a failed attempt). With the head's
# PodDisruptionBudget (verl_ray_cluster.py) it also keeps the system pool from consolidating
# the head's node away. What still evicts the head: docs/operations.md, "Node upgrades and
# repairs".
HEAD_ANNOTATIONS = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}

BUCKET_VOLUME = "training-bucket-vol"
CHECKPOINT_VOLUME = "checkpoint-bucket-vol"
COMPUTE_DOMAIN_CLAIM = "compute-domain-channel"


def render_ray_cluster(args: VerlRayClusterArgs) -> dict[str, Any]:
    """The RayCluster object (a dict; Pulumi inputs pass through unchanged)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": args.cluster_name,
            "namespace": args.namespace,
            "annotations": {
                "pulumi.com/waitFor": WAIT_FOR_READY,
                "pulumi.com/timeoutSeconds": str(ready_timeout_seconds(args.capacity)),
            },
        },
        "spec": {
            "rayVersion": pins.RAY_VERSION,
            **_upgrade_strategy(args),
            "headGroupSpec": _head_group(args),
            "workerGroupSpecs": [_worker_group(args)],
        },
    }


def _upgrade_strategy(args: VerlRayClusterArgs) -> dict[str, Any]:
    """Where the operator is the pinned chart (KubeRay v1.7.0, A4X): `Recreate`, so that a
    changed spec (image, pod shape) deletes every Ray pod and KubeRay creates them from the new
    template; unset, KubeRay keeps the running pods (ray-operator/controllers/ray/
    raycluster_controller.go:968-983, shouldRecreatePodsForUpgrade :1462-1505: it compares the
    head pod's spec hash, which excludes replicas and the strategy itself, utils/util.go:645-668;
    the field exists from v1.6.0, apis/ray/v1/raycluster_types.go:15-17, :84-99, all at tag
    v1.7.0). The GKE Ray add-on's KubeRay version is unknown: there the RayCluster is replaced
    instead (components/raycluster/verl_ray_cluster.py)."""
    if not args.without_addon:
        return {}
    return {"upgradeStrategy": {"type": "Recreate"}}


def _env_from(args: VerlRayClusterArgs) -> dict[str, Any]:
    """The trackers' Secret as env vars: the raylet, and every Ray worker it starts (the
    trainer's TaskRunner included), inherit the container's env."""
    if args.tracker_secret is None:
        return {}
    return {"envFrom": [{"secretRef": {"name": args.tracker_secret, "optional": True}}]}


def _head_group(args: VerlRayClusterArgs) -> dict[str, Any]:
    # No Ray task or actor on the head, on every target: KubeRay would otherwise give the head
    # its CPU limit as Ray CPUs, and verl's TaskRunner (a `@ray.remote` actor, which Ray places
    # with 1 CPU by default, verl/trainer/main_ppo.py:98 at the pinned ref), its
    # dataloader and its agent-loop and reward workers (agent_loop.py:932-945) would land in the
    # head's 32 GB (TRAINING-REVIEW.md finding 9). KubeRay: "setting num-cpus:"0" for the Ray
    # head pod will prevent Ray workloads with non-zero CPU requirements from being scheduled
    # on the head". The job's driver still runs there: an entrypoint with no resources does.
    start_params = {"dashboard-host": "0.0.0.0", "num-cpus": "0"}
    container = {
        "name": "ray-head",
        "image": args.image_ref,
        "ports": [{"containerPort": port, "name": name} for name, port in HEAD_PORTS.items()],
        "resources": _resources(args.profile.head),
        "volumeMounts": [
            {"name": "ray-logs", "mountPath": "/tmp/ray"},
            {"name": "shared-memory", "mountPath": "/dev/shm"},
            {"name": BUCKET_VOLUME, "mountPath": DATA_MOUNT},
            {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT},
        ],
        **_env_from(args),
    }
    patterns = log_shipper.JOB_LOG_PATTERNS
    if args.without_addon:
        patterns += log_shipper.SYSTEM_LOG_PATTERNS
    pod_spec = {
        "serviceAccountName": args.service_account,
        "nodeSelector": _head_node_selector(args),
        "initContainers": [
            log_shipper.shipper_container(args.image_ref, "ray-logs", "/tmp/ray", patterns)
        ],
        "containers": [_with_pod_packages(container)],
        "volumes": [
            {"name": "ray-logs", "emptyDir": {}},
            # Ray's object store: without it Ray falls back to /tmp ("The object store is using
            # /tmp instead of /dev/shm"), inside the container's ephemeral-storage limit.
            {"name": "shared-memory",
             "emptyDir": {"medium": "Memory", "sizeLimit": HEAD_SHM_SIZE}},
            _bucket_volume(args),
            _checkpoint_volume(args),
        ],
    }
    tolerations = _tolerations(args.profile) if args.head_on_gpu_node else []
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        # ClusterIP is KubeRay's default; stated so that nobody exposes the dashboard by accident.
        "serviceType": "ClusterIP",
        "rayStartParams": start_params,
        "template": {
            "metadata": {"annotations": {**_gcsfuse_annotations(args, "head"), **HEAD_ANNOTATIONS}},
            "spec": pod_spec,
        },
    }


def _worker_group(args: VerlRayClusterArgs) -> dict[str, Any]:
    hw = args.profile
    container = {
        "name": "ray-worker",
        "image": args.image_ref,
        "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB64}],
        "resources": _resources(hw.worker, gpus=hw.gpus_per_node),
        "volumeMounts": [
            {"name": "nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True},
            {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True},
            {"name": "shared-memory", "mountPath": "/dev/shm"},
            {"name": "ray-tmp-storage", "mountPath": "/tmp"},
            {"name": BUCKET_VOLUME, "mountPath": DATA_MOUNT},
            {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT},
        ],
        **_env_from(args),
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": args.service_account,
        "nodeSelector": _worker_node_selector(args),
        "affinity": _one_worker_per_node(args.cluster_name),
        "tolerations": _tolerations(hw),
        "containers": [_with_pod_packages(container)],
        "volumes": [
            {"name": "nvidia", "hostPath": {"path": NVIDIA_HOST_PATH}},
            {"name": "gib", "hostPath": {"path": GIB_HOST_PATH}},
            {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": hw.shm_size}},
            {"name": "ray-tmp-storage", "emptyDir": {}},
            _bucket_volume(args),
            _checkpoint_volume(args),
            # GCS FUSE's file cache, on the node's ephemeral storage: the local SSDs of these
            # machines (GKE: a volume named gke-gcsfuse-cache holds the sidecar's file cache).
            {"name": "gke-gcsfuse-cache", "emptyDir": {}},
        ],
    }
    init_containers = []
    if hw.networking is NodeNetworking.RDMA_VPC:
        init_containers.append(_gib_wait(args.image_ref))
    if args.without_addon:
        init_containers.append(
            log_shipper.shipper_container(
                args.image_ref, "ray-tmp-storage", "/tmp", log_shipper.SYSTEM_LOG_PATTERNS
            )
        )
    if init_containers:
        pod_spec["initContainers"] = init_containers
    annotations = _gcsfuse_annotations(args, "worker")
    if hw.networking is NodeNetworking.DRANET:
        claims = _resource_claims(args)
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
        pod_spec["resourceClaims"] = claims
    else:
        annotations.update(_network_annotations(args.rdma_networks))
    return {
        "groupName": WORKER_GROUP,
        "replicas": args.nodes,
        "minReplicas": args.nodes,
        "maxReplicas": args.nodes,
        "rayStartParams": {"num-cpus": str(hw.worker_ray_cpus)},
        "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
    }


def _gib_wait(image: str) -> dict[str, Any]:
    """An init container that waits, at most GIB_WAIT_SECONDS, for the gIB plugin on the node,
    and always exits 0: a late installer delays the worker, it never fails the pod. The verl
    image (already on the node for the worker) runs the loop; limits equal to requests keep the
    worker pod's Guaranteed QoS (every container of a Guaranteed pod, init containers too,
    has limits equal to requests: Kubernetes, "Configure Quality of Service for Pods")."""
    attempts = GIB_WAIT_SECONDS // 2
    script = (
        f'i=0; while [ "$i" -lt {attempts} ]; do '
        f"if [ -s {GIB_PLUGIN} ]; then sleep 2; exit 0; fi; i=$((i+1)); sleep 2; done; "
        f'echo "{GIB_PLUGIN} is not on this node after {GIB_WAIT_SECONDS} s (the NCCL '
        'installer DaemonSet has not run): starting without it; the cluster check fails if '
        'NCCL cannot load it" >&2; exit 0'
    )
    return {
        "name": "wait-for-gib",
        "image": image,
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [{"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True}],
        "resources": {"limits": dict(GIB_WAIT_RESOURCES), "requests": dict(GIB_WAIT_RESOURCES)},
    }


def _resources(shape: PodShape, gpus: int | None = None) -> dict[str, Any]:
    amounts = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "ephemeral-storage": shape.ephemeral_storage,
    }
    if gpus is not None:
        amounts["nvidia.com/gpu"] = str(gpus)
    return {"limits": dict(amounts), "requests": dict(amounts)}


def _bucket_volume(args: VerlRayClusterArgs) -> dict[str, Any]:
    return {"name": BUCKET_VOLUME, "persistentVolumeClaim": {"claimName": args.pvc_name}}


def _checkpoint_volume(args: VerlRayClusterArgs) -> dict[str, Any]:
    attributes = inline_attributes(args.bucket_name, args.profile.arch, MountUse.CHECKPOINTS)
    return {"name": CHECKPOINT_VOLUME, "csi": {"driver": CSI_DRIVER, "volumeAttributes": attributes}}


def _with_pod_packages(container: dict[str, Any]) -> dict[str, Any]:
    """Install what verl needs and the image lacks (pins.POD_PACKAGES), when the pod starts.

    The tutorial's postStart hook, on every architecture (it had it on A4X only, where the V1
    trainer's TransferQueue was needed as much as anywhere else), and with --no-deps: pip resolves
    nothing and moves none of the image's packages. Kubernetes runs the hook beside the
    container's command, in no set order, but reports the container Running (and the pod Ready)
    only once the hook has returned, and kills and restarts the container when it fails (the
    kubelet's FailedPostStartHook event says why). verl first imports transfer_queue in the
    training's TaskRunner, after the RayCluster is ready and the ClusterCheck has passed (which
    fails `up`, naming the module, on a node that cannot import it).

    Kept at start rather than moved into the image: an image of our own would need a build and a
    registry to push it to, per architecture, and none exists where this program is built
    (pins.py, the staging image's note); the pinned upstream tags are what verl's CI ran. It is
    one wheel with --no-deps, from PyPI through the NAT. Bounded: each attempt ends
    after POD_PACKAGES_TIMEOUT_SECONDS (pip's own socket timeout and retries bound a dead
    connection, not a trickling one), and a failed attempt restarts the container, within the
    RayCluster's wait (ready_timeout_seconds).
    """
    requirements = " ".join(package.requirement for package in pins.POD_PACKAGES)
    install = (
        f"timeout {POD_PACKAGES_TIMEOUT_SECONDS} python3 -m pip install --quiet --no-deps "
        f"--disable-pip-version-check --timeout 30 --retries 3 {requirements}"
    )
    container["lifecycle"] = {"postStart": {"exec": {"command": ["/bin/bash", "-c", install]}}}
    return container


def _tolerations(hw: HardwareProfile) -> list[dict[str, str]]:
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if hw.arch is Arch.ARM64:
        # GKE taints arm64 nodes so that amd64-only images never land there by accident.
        tolerations.append(
            {"key": "kubernetes.io/arch", "operator": "Exists", "effect": "NoSchedule"}
        )
    return tolerations


def _head_node_selector(args: VerlRayClusterArgs) -> Mapping[str, Any]:
    if args.head_on_gpu_node:
        return {"cloud.google.com/gke-accelerator": args.profile.gpu_type}
    if args.autopilot:
        # The tutorial also asks for Spot here; a preempted head takes the GRPO driver and the
        # run's progress since the last checkpoint with it, so the head stays on-demand.
        return {
            "cloud.google.com/machine-family": "c2",
            "cloud.google.com/compute-class": "Performance",
        }
    return dict(args.head_node_selector or {})


def _worker_node_selector(args: VerlRayClusterArgs) -> dict[str, str]:
    hw = args.profile
    selector = {"cloud.google.com/gke-accelerator": hw.gpu_type}
    if args.autopilot:
        selector.update(
            {
                # A string: node selector values are strings (the tutorial's bare 8 is rejected).
                "cloud.google.com/gke-accelerator-count": str(hw.gpus_per_node),
                "cloud.google.com/gke-spot": "true",
                "cloud.google.com/compute-class": "Performance",
            }
        )
    return selector


def _one_worker_per_node(cluster_name: str) -> dict[str, Any]:
    """Required anti-affinity: each worker owns a whole node's GPUs and NICs."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            "ray.io/cluster": cluster_name,
                            "ray.io/group": WORKER_GROUP,
                        }
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def _interfaces_annotation(networks: Sequence[str]) -> str:
    """`networking.gke.io/interfaces`: eth0 on the default network, then eth1.. in NIC order."""
    names = ["default", *networks]
    return json.dumps(
        [{"interfaceName": f"eth{i}", "network": network} for i, network in enumerate(names)]
    )


def _network_annotations(networks: Sequence[str]) -> dict[str, str]:
    return {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": _interfaces_annotation(networks),
    }


def _resource_claims(args: VerlRayClusterArgs) -> list[dict[str, Any]]:
    """One claim per RDMA NIC of the node, then the ComputeDomain's IMEX channel."""
    nics = [
        {"name": f"rdma-nic-{i}", "resourceClaimTemplateName": args.rdma_claim_template}
        for i in range(args.profile.rdma_nics)
    ]
    channel = {
        "name": COMPUTE_DOMAIN_CLAIM,
        "resourceClaimTemplateName": args.compute_domain_claim_template,
    }
    return [*nics, channel]


# gcsfuse sidecar limits, per cluster mode and Ray role. On Standard, "0" leaves the sidecar
# unbounded so it can use the node's local SSD for the unlimited file cache and never OOMs on
# a 66 GB model read (gcs-fuse-csi-driver #314, #372); Autopilot refuses "0", so there the
# limits are explicit: at most 2 CPU and 14 GiB on GPU nodes (the driver's documented Autopilot
# cap), and room for the model in the file cache on workers. The head reads no model.
_SIDECAR_LIMITS: dict[tuple[ClusterMode, str], tuple[str, str, str]] = {
    (ClusterMode.STANDARD, "head"): ("0", "0", "0"),
    (ClusterMode.STANDARD, "worker"): ("0", "0", "0"),
    (ClusterMode.AUTOPILOT, "head"): ("1", "4Gi", "10Gi"),
    (ClusterMode.AUTOPILOT, "worker"): ("2", "14Gi", "200Gi"),
}


def _gcsfuse_annotations(args: VerlRayClusterArgs, role: str) -> dict[str, str]:
    cpu, memory, storage = _SIDECAR_LIMITS[(args.mode, role)]
    return {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": cpu,
        "gke-gcsfuse/memory-limit": memory,
        "gke-gcsfuse/ephemeral-storage-limit": storage,
    }


def render_pod_monitoring(args: VerlRayClusterArgs) -> dict[str, Any]:
    """Managed Prometheus scrapes Ray's metrics port on every pod of the RayCluster.

    The add-on's `ray_cluster_monitoring_config` does this on A4 / A3 Ultra; A4X runs without
    the add-on. PodMonitoring v1 (GoogleCloudPlatform/prometheus-engine
    charts/operator/crds/monitoring.googleapis.com_podmonitorings.yaml): `endpoints[].port`
    takes a number; KubeRay starts every Ray node with `--metrics-export-port=8080`.
    """
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {"name": f"{args.cluster_name}-metrics", "namespace": args.namespace},
        "spec": {
            "selector": {"matchLabels": {"ray.io/cluster": args.cluster_name}},
            "endpoints": [{"port": METRICS_PORT, "interval": "30s"}],
        },
    }
