"""What a healthy cluster of each target measures, for the ClusterCheck before training.

Derived from the hardware, per target; every figure says where it comes from. A floor, not a
benchmark target: it separates a working fabric from a broken one (RDMA not used, a NIC or GPU
missing), which are an order of magnitude apart, without failing a healthy cluster on a slow day.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.facts.hardware import Target


@dataclass(frozen=True)
class Expectations:
    gpu_name: str  # a substring of torch.cuda.get_device_name() on every GPU
    nic_gbps_per_gpu: int  # GPU-to-GPU network line rate per GPU (one RDMA NIC per GPU)
    min_busbw_gbs: float  # all-reduce bus bandwidth floor across all nodes, GB/s
    # The network NCCL must report ("NCCL INFO Using network <name>"); None: not judged.
    nccl_network: str | None
    # Every rank must report multi-node NVLink on ("NCCL INFO MNNVL 1 ...").
    mnnvl: bool


# Line rates: Google Cloud's accelerator-optimized machine families
# (cloud.google.com/compute/docs/accelerator-optimized-machines): A4 (a4-highgpu-8g) and
# A3 Ultra (a3-ultragpu-8g) have eight NVIDIA ConnectX-7 400 Gbps NICs for GPU-to-GPU traffic,
# one per GPU (3,200 Gbps per VM); A4X (a4x-highgpu-4g) has four, one per GB200 (1,600 Gbps).
# Bus bandwidth is nccl-tests' measure (NVIDIA/nccl-tests doc/PERFORMANCE.md: for all-reduce
# busbw = algbw x 2(n-1)/n), which for a multi-node all-reduce is bounded by the per-GPU
# network rate: 400 Gbps = 50 GB/s. The floor is half of that, 25 GB/s; NCCL falling back to TCP
# over the gVNIC (the usual failure: plugin not loaded, RDMA networks not attached) measures a
# few GB/s. A4X can all-reduce over multi-node NVLink inside its NVL72 domain, far above this;
# the same network floor is kept so that a cluster outside one domain is judged fairly too.
_NIC_GBPS = 400
_FLOOR = _NIC_GBPS / 8 / 2

# What NCCL itself must say it used. Google's NCCL/gIB page: "To verify NCCL/gIB is enabled
# check that the following NCCL INFO level log entries are present: NCCL INFO Using network gIB"
# (Compute Engine, "Enable NCCL/gIB"). A bandwidth floor alone cannot tell RDMA from a lucky
# TCP path, and on A4X cannot tell multi-node NVLink from RDMA at all (both clear 25 GB/s), so
# A4X is judged by NCCL's MNNVL line, which it prints only with cuMem on (NVIDIA/nccl
# src/mnnvl.cc:15-16, :96 at 5067397c). Inside its NVL72 domain A4X's ranks talk over NVLink,
# so its network name is not judged.
EXPECTATIONS: dict[Target, Expectations] = {
    Target.A4: Expectations("B200", _NIC_GBPS, _FLOOR, nccl_network="gIB", mnnvl=False),
    Target.A3_ULTRA: Expectations("H200", _NIC_GBPS, _FLOOR, nccl_network="gIB", mnnvl=False),
    Target.A4X: Expectations("GB200", _NIC_GBPS, _FLOOR, nccl_network=None, mnnvl=True),
}

# Reading the model from /data (GCS FUSE) on the head, one stream, MB/s. At this rate the 66 GB
# of Qwen2.5-32B load in under six minutes per reader; below it model loading dominates every
# (re)start, which points at a throttled gcsfuse sidecar or a bucket in another region.
MIN_READ_MBPS = 200.0
