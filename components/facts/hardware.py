"""The hardware targets: one row per GPU machine family, the only place their facts live.

Stack files never repeat these facts; they name a target (`verl-gke:target`) and the program
derives node pools, RayCluster shapes, NCCL settings and trainer defaults from the row.
Sources: the tutorial (../shared/reference/TUTORIAL.md, "Hardware targets", "VerlRayCluster",
"GrpoJob") and Cluster Toolkit's gke-a4 / gke-a3-ultragpu / gke-a4x blueprints.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from components.facts.addressing import MAX_RDMA_VPC_NODES


class Target(str, enum.Enum):
    A4 = "a4"
    A3_ULTRA = "a3u"
    A4X = "a4x"


class Arch(str, enum.Enum):
    AMD64 = "amd64"
    ARM64 = "arm64"


class NodeNetworking(str, enum.Enum):
    """How the GPU nodes get their RDMA NICs."""

    # A4 / A3 Ultra: a gVNIC VPC plus an RDMA VPC with one subnet per NIC, attached to the pool
    # as additional node networks and mapped into pods by GKENetworkParamSet / Network objects.
    RDMA_VPC = "rdma-vpc"
    # A4X: accelerator network profile `auto`; GKE creates the networks and DRANET exposes each
    # NIC as a DRA device of class mrdma.google.com, claimed by pods.
    DRANET = "dranet"


@dataclass(frozen=True)
class PodShape:
    """Kubernetes resources of one Ray pod (strings, as the API takes them)."""

    cpu: str
    memory: str
    ephemeral_storage: str


@dataclass(frozen=True)
class GpuFacts:
    """One GPU's memory and speeds, for the memory check and the step model (estimates).

    Datasheet peaks, not measurements; the step model (tools/step_model.py) applies stated
    efficiency factors to them. Each figure's source is beside the row that uses it.
    """

    name: str
    memory_gib: float  # what torch.cuda reports as total memory, GiB
    bf16_dense_tflops: float  # dense (no sparsity) BF16 tensor-core peak
    hbm_tbps: float  # HBM bandwidth, TB/s
    nvlink_gbs: float  # NVLink bandwidth per GPU and direction, GB/s
    nvlink_domain_gpus: int  # GPUs one NVLink fabric joins (a node, or an NVL72 rack)


@dataclass(frozen=True)
class TutorialJob:
    """The tutorial's GRPO job for a target, as it gives it for its own cluster (2 x 8 or 4 x 4
    GPUs; TUTORIAL.md, "GrpoJob"): what the derived defaults keep (the optimizer steps per RL step,
    `val_before_train`; components/runspec/run_sizing.py) and the step model's comparison row
    (tools/step_model.py `tutorial`)."""

    train_batch_size: int
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int
    tensor_model_parallel_size: int
    rollout_log_prob_micro_batch_size_per_gpu: int
    ref_log_prob_micro_batch_size_per_gpu: int
    use_kl_loss: bool
    # None: the tutorial leaves `trainer.val_before_train` out, so verl's own default applies.
    val_before_train: bool | None

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps per RL step: train batch / mini batch."""
        return self.train_batch_size // self.ppo_mini_batch_size


@dataclass(frozen=True)
class HardwareProfile:
    target: Target
    gpu_type: str  # the `cloud.google.com/gke-accelerator` value
    machine_type: str
    gpus_per_node: int
    rdma_nics: int
    arch: Arch
    networking: NodeNetworking
    default_nodes: int
    # The most GPU nodes one stack can have, and the constraint it comes from (said in errors).
    max_nodes: int
    max_nodes_reason: str
    autopilot_supported: bool
    # Capacity only a reservation can give (no spot, no flex-start).
    reservation_only: bool
    # Local NVMe SSDs that back ephemeral storage (GKE's ephemeral_storage_local_ssd_config).
    # None: not configured, ephemeral storage lives on the boot disk. 0: the machine's bundled
    # count; the API says "for Gen3 machines which dictate a specific number of local ssds, zero
    # (or unset) means to use the default number of local ssds that goes with that machine type"
    # (container.v1 EphemeralStorageLocalSsdConfig.localSsdCount).
    ephemeral_local_ssds: int | None
    boot_disk_type: str
    # The oldest GKE version the target runs on; None: any version GKE offers.
    min_gke_version: str | None
    # Cloud Quotas id of the regional GPU quota that spot and flex-start VMs consume ("Spot:
    # Preemptible quota is charged", "Flex-start: Preemptible quota is charged", Google's AI
    # Hypercomputer consumption-models table); None where neither is offered.
    preemptible_gpu_quota: str | None
    # NCCL tuner shipped by the gIB installer; A3 Ultra needs its own (tutorial defect 2).
    nccl_tuner_config: str | None
    worker: PodShape
    worker_ray_cpus: int  # rayStartParams num-cpus: leaves room for system daemons
    shm_size: str  # /dev/shm (Memory emptyDir) of a worker
    head: PodShape
    gpu: GpuFacts
    tutorial_job: TutorialJob

    def nodes_problem(self, key: str, nodes: int) -> str | None:
        """Why `nodes` GPU nodes of this machine type cannot be, naming `key`; None if they can."""
        if 1 <= nodes <= self.max_nodes:
            return None
        return (
            f"{key} = {nodes} is out of range for {self.machine_type}: use 1 to "
            f"{self.max_nodes} ({self.max_nodes_reason})"
        )


_A4 = HardwareProfile(
    target=Target.A4,
    gpu_type="nvidia-b200",
    machine_type="a4-highgpu-8g",
    gpus_per_node=8,
    rdma_nics=8,
    arch=Arch.AMD64,
    networking=NodeNetworking.RDMA_VPC,
    default_nodes=2,
    max_nodes=MAX_RDMA_VPC_NODES,
    max_nodes_reason=(
        f"each node takes an address in every /24 node subnet, which holds {MAX_RDMA_VPC_NODES}"
    ),
    autopilot_supported=True,
    reservation_only=False,
    # Cluster Toolkit's gke-node-pool table (disk_definitions.tf): 32 on a3-ultragpu-8g and
    # a4-highgpu-8g, the machines' full set.
    ephemeral_local_ssds=32,
    boot_disk_type="hyperdisk-balanced",
    min_gke_version=None,
    preemptible_gpu_quota="PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region",
    nccl_tuner_config="/usr/local/gib/configs/tuner_config_a4.txtpb",
    worker=PodShape(cpu="220", memory="2800Gi", ephemeral_storage="1000Gi"),
    worker_ray_cpus=220,
    shm_size="250Gi",
    head=PodShape(cpu="12", memory="32G", ephemeral_storage="9Gi"),
    # NVIDIA DGX/HGX B200 datasheet: 8 GPUs, 1,440 GB HBM3e, 72 PFLOPS FP8 training and
    # 36 PFLOPS FP16/BF16 with sparsity (18 dense, 2.25 per GPU), 64 TB/s HBM (8 per GPU),
    # NVLink 5 at 1.8 TB/s per GPU (900 GB/s each way). Memory as torch reports it on a4:
    # ~179 GiB (the review's appendix, ../shared/reference/TRAINING-REVIEW.md).
    gpu=GpuFacts("B200", memory_gib=179, bf16_dense_tflops=2250, hbm_tbps=8.0,
                 nvlink_gbs=900, nvlink_domain_gpus=8),
    # The tutorial's A4 / A3 Ultra job: 256 prompts, one optimizer step per RL step.
    tutorial_job=TutorialJob(
        train_batch_size=256, ppo_mini_batch_size=256, ppo_micro_batch_size_per_gpu=64,
        tensor_model_parallel_size=8, rollout_log_prob_micro_batch_size_per_gpu=8,
        ref_log_prob_micro_batch_size_per_gpu=4, use_kl_loss=False, val_before_train=False,
    ),
)

PROFILES: dict[Target, HardwareProfile] = {
    Target.A4: _A4,
    # The tutorial runs A3 Ultra with A4's manifests: same shape, its own GPU and NCCL tuner.
    Target.A3_ULTRA: dataclasses.replace(
        _A4,
        target=Target.A3_ULTRA,
        gpu_type="nvidia-h200-141gb",
        machine_type="a3-ultragpu-8g",
        nccl_tuner_config="/usr/local/gib/configs/tuner_config_a3u.txtpb",
        preemptible_gpu_quota="PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region",
        # NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s, 1,979 TFLOPS BF16 with
        # sparsity (989 dense), NVLink 900 GB/s per GPU (450 each way). ~140 GiB in torch.
        gpu=GpuFacts("H200", memory_gib=140, bf16_dense_tflops=989, hbm_tbps=4.8,
                     nvlink_gbs=450, nvlink_domain_gpus=8),
    ),
    Target.A4X: HardwareProfile(
        target=Target.A4X,
        gpu_type="nvidia-gb200",
        machine_type="a4x-highgpu-4g",
        gpus_per_node=4,
        rdma_nics=4,
        arch=Arch.ARM64,
        networking=NodeNetworking.DRANET,
        default_nodes=4,
        # "A4X capacity is provisioned in fixed, non-shareable 18-node blocks called NVLink
        # domains" (Google Cloud, A4X docs); the pool's workload policy is one 1x72 domain.
        max_nodes=18,
        max_nodes_reason="one NVL72 domain (accelerator topology 1x72) is 18 nodes of 4 GPUs",
        autopilot_supported=False,
        # "You must use the reservation-bound provisioning model. Other provisioning models are
        # not supported." (Google Cloud, "Create an AI-optimized MIG with A4X").
        reservation_only=True,
        # a4x-highgpu-4g comes with 12,000 GiB of Local SSD that Compute Engine attaches itself
        # (Google Cloud, Arm VMs). Without this block GKE puts ephemeral storage on the 100 GB
        # boot disk ("If unspecified, ephemeral storage is backed by the boot disk",
        # terraform-provider-google node_config.go), and the head plus a worker on one node ask
        # for 520 Gi of it: they would stay Pending. 0 = all the machine's bundled SSDs.
        ephemeral_local_ssds=0,
        boot_disk_type="hyperdisk-balanced",
        # DRANET (the `auto` accelerator network profile with GKE's managed DRA driver) needs
        # this version (Cluster Toolkit gke-a4x precondition).
        min_gke_version="1.34.1-gke.1829001",
        preemptible_gpu_quota=None,  # reservation-bound only
        # A4X's gIB plugin picks its tuning through NCCL_ENV_PLUGIN=gcp instead of a tuner file.
        nccl_tuner_config=None,
        worker=PodShape(cpu="120", memory="600Gi", ephemeral_storage="500Gi"),
        worker_ray_cpus=120,
        shm_size="200Gi",
        head=PodShape(cpu="12", memory="32Gi", ephemeral_storage="20Gi"),
        # NVIDIA GB200 NVL72 datasheet: 72 GPUs, 360 PFLOPS FP16/BF16 with sparsity (2.5 dense
        # per GPU), 186 GB HBM3e at 8 TB/s per GPU, fifth-generation NVLink at 1.8 TB/s per
        # GPU (900 GB/s each way) across all 72 GPUs of the rack. ~185 GiB in torch.
        gpu=GpuFacts("GB200", memory_gib=185, bf16_dense_tflops=2500, hbm_tbps=8.0,
                     nvlink_gbs=900, nvlink_domain_gpus=72),
        # The tutorial's A4X job: four optimizer steps per RL step, the KL loss on, and no
        # `val_before_train` (verl's default).
        tutorial_job=TutorialJob(
            train_batch_size=256, ppo_mini_batch_size=64, ppo_micro_batch_size_per_gpu=8,
            tensor_model_parallel_size=4, rollout_log_prob_micro_batch_size_per_gpu=16,
            ref_log_prob_micro_batch_size_per_gpu=16, use_kl_loss=True, val_before_train=None,
        ),
    ),
}


def profile(target: Target | str) -> HardwareProfile:
    return PROFILES[Target(target)]
