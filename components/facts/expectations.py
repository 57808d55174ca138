"""What a healthy cluster of each target measures, for the ClusterCheck before training.

Derived from the hardware and a published healthy measurement, per target; every figure says
where it comes from. A floor, not a benchmark target: it separates a working fabric from a broken
one (RDMA not used, a NIC dead or mis-mapped, a GPU missing) without failing a healthy cluster on
a slow day.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.facts.hardware import PROFILES, HardwareProfile, NodeNetworking, Target


@dataclass(frozen=True)
class Expectations:
    gpu_name: str  # a substring of torch.cuda.get_device_name() on every GPU
    nic_gbps_per_gpu: int  # GPU-to-GPU network line rate per GPU (one RDMA NIC per GPU)
    nics_per_node: int
    # What a healthy cluster measures: the all-reduce bus bandwidth across nodes, GB/s (see
    # HEALTHY_FRACTION for where it comes from).
    healthy_busbw_gbs: float
    min_busbw_gbs: float  # all-reduce bus bandwidth floor across all nodes, GB/s
    # The network NCCL must report ("NCCL INFO Using network <name>"); None: not judged.
    nccl_network: str | None
    # Every rank must report multi-node NVLink on ("NCCL INFO MNNVL 1 ...").
    mnnvl: bool

    @property
    def network_busbw_gbs(self) -> float:
        """The bus bandwidth a node's RDMA NICs allow, GB/s: network_busbw_bound_gbs."""
        return network_busbw_bound_gbs(self.nics_per_node, self.nic_gbps_per_gpu)


def network_busbw_bound_gbs(nics_per_node: int, nic_gbps: int) -> float:
    """The ring bound of a cluster's all-reduce (or all-gather) bus bandwidth across nodes, GB/s:
    every NIC of a node at line rate, nics_per_node x nic_gbps / 8.

    Bus bandwidth is nccl-tests' per-rank figure (NVIDIA/nccl-tests doc/PERFORMANCE.md:
    all-reduce busbw = algbw x 2(n-1)/n, all-gather algbw x (n-1)/n), that is the bytes one
    rank sends per second. A ring sends each rank's 2(n-1)/n share through every hop, and what
    leaves a node leaves through its NICs together, however many channels NCCL's topology search
    spreads over them (commonly several per NIC, NCCL_NCHANNELS_PER_NET_PEER): busbw is bounded
    by nics x the NIC rate, not one NIC's rate (NVLink inside the node, 900 GB/s per B200, H200 or
    GB200, is not the limit). It is the bound of a ring, not of every algorithm: an NVLS-tree
    all-reduce sends each node's reduced buffer once and can exceed it, so a floor derived from
    it is safe, not tight. Measured: 366 GB/s on two A4 nodes (HEALTHY_FRACTION), far above one
    NIC's 50 GB/s."""
    return nics_per_node * nic_gbps / 8


# Line rates: Google Cloud's accelerator-optimized machine families
# (cloud.google.com/compute/docs/accelerator-optimized-machines): A4 (a4-highgpu-8g) and
# A3 Ultra (a3-ultragpu-8g) have eight NVIDIA ConnectX-7 400 Gbps NICs for GPU-to-GPU traffic,
# one per GPU (3,200 Gbps per VM); A4X (a4x-highgpu-4g) has four, one per GB200 (1,600 Gbps).
_NIC_GBPS = 400
# A healthy cluster's share of that bound: Cluster Toolkit's published NCCL result for its
# gke-a4 blueprint (GoogleCloudPlatform/cluster-toolkit examples/gke-a4/README.md, "Deploy and
# run NCCL test", commit 2c54caab): two a4-highgpu-8g nodes, 16 ranks, all-gather, out-of-place
# busbw 358.32 GB/s at 1 GiB, the check's message size (components/check/
# cluster_check_script.py runs 1024 MiB), and 366.29 GB/s at 8 GiB: 358.32 / 400 = 0.896.
# Bus bandwidth makes all-gather and all-reduce comparable (both are bounded by the same NICs);
# the all-reduce figure at that size is taken to be the same (an assumption). A3 Ultra has the
# same NICs and rail layout and A4X the same NICs, four per node: the same share is assumed for
# them (no published figure read). Across an A4X NVL72 domain NCCL uses NVLink (MNNVL) and
# measures far more; the network figure keeps a cluster that spans domains judged fairly.
HEALTHY_FRACTION = 358.32 / 400
# The floor, as a share of the healthy figure. A healthy cluster on a slow day measures within
# ~10% of it. What the check must catch falls below 0.6 of it:
# - NCCL on TCP over the gVNIC (plugin not loaded, RDMA networks not attached): a few GB/s;
# - a dead NIC: NCCL sends that GPU's channel through a neighbour's NIC (PXN), which then
#   carries two channels while the others carry one; the collective, split evenly over the
#   channels, finishes at the slowest: about half (an inference from the even split);
# - a mis-mapped rail (a GPU using a NIC behind another PCIe switch): its traffic crosses the
#   host's CPU interconnect, far slower than the NIC.
# One NIC running slow is not caught by a floor this low; the check reports the measured figure
# against the healthy one (the clusterCheck output) so that a shortfall of any size is visible.
FLOOR_FRACTION = 0.6


def _expect(hw: HardwareProfile) -> Expectations:
    """A target's expectations from its row: the GPU's name, one RDMA NIC per GPU NIC of the row,
    and what NCCL must report for its kind of networking (_NCCL_PROOF)."""
    healthy = round(network_busbw_bound_gbs(hw.rdma_nics, _NIC_GBPS) * HEALTHY_FRACTION, 1)
    nccl_network, mnnvl = _NCCL_PROOF[hw.networking]
    return Expectations(
        hw.gpu.name, _NIC_GBPS, hw.rdma_nics, healthy, round(healthy * FLOOR_FRACTION, 1),
        nccl_network=nccl_network, mnnvl=mnnvl,
    )


# What NCCL itself must say it used. Google's NCCL/gIB page: "To verify NCCL/gIB is enabled
# check that the following NCCL INFO level log entries are present: NCCL INFO Using network gIB"
# (Compute Engine, "Enable NCCL/gIB"). A bandwidth floor alone cannot tell RDMA from a lucky
# TCP path, and on A4X cannot tell multi-node NVLink from RDMA at all (both clear the floor), so
# A4X is judged by NCCL's MNNVL line, which it prints only with cuMem on (NVIDIA/nccl
# src/mnnvl.cc:15-16, :96 at 5067397c). Inside its NVL72 domain A4X's ranks talk over NVLink,
# so its network name is not judged. Per kind of node networking: (network NCCL must name,
# every rank reports MNNVL).
_NCCL_PROOF: dict[NodeNetworking, tuple[str | None, bool]] = {
    NodeNetworking.RDMA_VPC: ("gIB", False),  # A4, A3 Ultra: the gIB plugin over the RDMA VPC
    NodeNetworking.DRANET: (None, True),  # A4X: multi-node NVLink inside the NVL72 domain
}
EXPECTATIONS: dict[Target, Expectations] = {target: _expect(hw) for target, hw in PROFILES.items()}

# Reading the model from /data (GCS FUSE) on a GPU node, one stream, MiB/s: what verl's one
# checkpoint reader gets (rank 0 reads the 66 GB of Qwen2.5-32B and broadcasts it; vLLM loads
# dummy weights). Sourced figures, none measured here: GCS FUSE without a file cache read a
# 25 GB model at ~150 MB/s, and with a file cache on pd-ssd at ~310 MB/s (Gemma 7B, 165 s and
# ~80 s; GoogleCloudPlatform/ai-on-gke @b1bccad715 best-practices/startup-latency.md, "Use
# Persistent Disk to accelerate model weight loading"), both before parallel downloads existed;
# parallel downloads into the file cache, which the model mount has on the nodes' local SSDs
# (components/storage/gcs_fuse_storage.py), give "up to 9x faster model load times" for such
# single-threaded reads of large files (GoogleCloudPlatform/gcsfuse @7b3929278 README.md:26-31).
# The floor: 400, above what a mount that lost its parallel downloads or its file cache reads
# (~150-310), with a margin of 3x under the 9x claim (~1350 on the 150 base). At 400 the actor's
# read takes under three minutes; at the old floor of 200 a 5.5-minute read passed the check.
# Below it: a throttled gcsfuse sidecar, a mount without its cache, or a bucket in another
# region. Replace it with a measured figure once a real check has run (its `readMbps` output).
MIN_READ_MBPS = 400.0
