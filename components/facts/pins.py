"""Every external artifact the program deploys, pinned in one place.

Each pin says what it is and why that version. Bumping one is a deliberate change reviewed in
one diff; nothing else in the program names a version, a tag or a commit.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.facts.hardware import Arch


@dataclass(frozen=True)
class HelmChart:
    chart: str
    repo: str
    version: str  # an exact release, never a range

# verl container images, per CPU architecture. The tutorial uses the floating tag
# `vllm011.latest` on amd64 (tutorial defect 4). `vllm011.dev7` is the last vllm 0.11 build
# verl's own CI pinned (volcengine/verl acc12076b, "update workflow images vllm011->012") before
# moving to vllm 0.12, so it is the newest tested image of the line the tutorial targets.
# `vllm023.aarch64.dev1` is the tutorial's own A4X image (GB200 is arm64 only: verl #3468).
# Tags, not digests: the registry is not reachable from where this is written; replace them with
# `@sha256:` digests once pulled (`crane digest verlai/verl:<tag>`), the program accepts both.
VERL_IMAGES: dict[Arch, str] = {
    Arch.AMD64: "verlai/verl:vllm011.dev7",
    Arch.ARM64: "verlai/verl:vllm023.aarch64.dev1",
}

# verl source staged into the bucket (PYTHONPATH=/data/verl). The tutorial's VERL_REF.
VERL_REPO = "https://github.com/volcengine/verl.git"
VERL_REF = "ddbcdb7"

# GoogleCloudPlatform/container-engine-accelerators at the newest commit that touched the three
# gpudirect-rdma installers (2026-05-06, "Removed --install-nccl from default and a4x
# installers"), instead of the tutorial's `refs/heads/master`, which changes under a running
# cluster. The a4x installer at this commit ships nccl-plugin-gib-arm64:v1.1.0, the version
# Cluster Toolkit pins.
NCCL_INSTALLER_COMMIT = "2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae"
_INSTALLER_BASE = (
    "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/"
    f"{NCCL_INSTALLER_COMMIT}/gpudirect-rdma"
)
NCCL_INSTALLER_STANDARD = f"{_INSTALLER_BASE}/nccl-rdma-installer.yaml"
NCCL_INSTALLER_AUTOPILOT = f"{_INSTALLER_BASE}/nccl-rdma-installer-autopilot.yaml"
NCCL_INSTALLER_A4X = f"{_INSTALLER_BASE}/nccl-rdma-installer-a4x.yaml"

# NVIDIA DRA driver (ComputeDomain / IMEX channels on A4X). 25.3.1 is the tutorial's version and
# inside the 25.3.x line Cluster Toolkit's gke-a4x blueprint pins.
NVIDIA_DRA_DRIVER = HelmChart(
    chart="nvidia-dra-driver-gpu", repo="https://helm.ngc.nvidia.com/nvidia", version="25.3.1"
)

# --- VerlRayCluster (components/ray/verl_ray_cluster.py) ---
# KubeRay operator for A4X, where the GKE Ray add-on is not used (the tutorial installs the
# namespace-scoped Helm chart with no version, i.e. whatever is newest on the day). 1.7.0 is the
# newest stable release (tag v1.7.0, 2026-08-20; the Ray docs install exactly
# `kuberay/kuberay-operator --version 1.7.0`), and its RayCluster CRD is byte-identical to the
# one the tests validate against (../shared/schemas/crds/, kuberay feeaf72), so what the tests
# accept is what this operator serves. The chart's default operator image is v1.7.0 too.
KUBERAY_OPERATOR = HelmChart(
    chart="kuberay-operator", repo="https://ray-project.github.io/kuberay-helm/", version="1.7.0"
)

# TransferQueue, installed in the A4X Ray pods by the tutorial's postStart hook.
TRANSFER_QUEUE_VERSION = "0.1.8"

# --- ModelStaging (components/storage/model_staging.py) ---
# The model the tutorial trains, at the commit that public Hugging Face caches of it name
# (`models--Qwen--Qwen2.5-32B-Instruct/snapshots/5ede1c97...` in several unrelated public
# repositories, 2025-2026). Not checked against huggingface.co from where this is written; confirm
# with `curl -s https://huggingface.co/api/models/Qwen/Qwen2.5-32B-Instruct/revision/main`
# (its "sha") before relying on it. A commit, not `main`, so a re-run stages the same weights.
STAGING_MODEL_ID = "Qwen/Qwen2.5-32B-Instruct"
STAGING_MODEL_REVISION = "5ede1c97bbab6ce5cda5812749b4c0bdf79b18dd"

# Image of the staging Job, which runs on the amd64 CPU system pool on every target (A4X's GPU
# nodes are arm64, its system pool is not). Not the ~25 GB training image: staging needs Python,
# git (verl's source) and a few wheels. Docker Hub's official Python image, the full Debian
# variant because it ships git (its Dockerfile builds on buildpack-deps:bookworm, whose `scm`
# layer installs git); ~0.4 GB compressed, pulled through the stack's mirror. A tag, not a
# digest (the registry is not reachable from where this is written): pin the digest with
# `crane digest python:3.12.12-bookworm` and write `python@sha256:...`, the program accepts both.
# There is no Docker here to build an image, so the wheels below are installed when the Job
# starts (`pip install --no-deps` of exact versions: ~25 s, components/storage/model_staging.py).
STAGING_IMAGE = "python:3.12.12-bookworm"

# What stage.py imports, exact versions, installed with --no-deps so nothing floats (pip's
# resolver is not run). The list is pip's own resolution of `datasets==4.4.1
# huggingface_hub==0.36.0 hf_transfer==0.1.9` for CPython 3.12 on manylinux x86_64 (`pip install
# --dry-run --report`, 2026-12-01). huggingface_hub 0.36.0 is the last release that still uses
# hf_transfer (1.0.0 constants.py:219: "hf_transfer is not used anymore"), which opens
# HF_TRANSFER_CONCURRENCY = 100 connections per file (0.36.0 constants.py:38, file_download.py:470).
# hf_xet is kept, not only because 0.36.0 requires it on x86_64: for a Xet-backed file without it,
# 0.36.0 hands hf_transfer the /resolve/ URL itself (file_download.py:1592, the CDN location is
# taken only when there is no Xet metadata), so every 10 MB range request would count against the
# Hub's resolver rate limit (3000 per 5 min anonymous, 5000 with a free account's token,
# huggingface.co/docs/hub/rate-limits): 66 GB is about 6300 of them. With hf_xet such a file
# comes from Xet storage instead, with its per-file streams pinned by
# HF_XET_FIXED_DOWNLOAD_CONCURRENCY (model_staging.staging_env). datasets and its imports serve
# verl's examples/data_preprocess/gsm8k.py (it imports `datasets` and verl.utils.hdfs_io only).
STAGING_WHEELS = (
    "datasets==4.4.1",
    "huggingface-hub==0.36.0",
    "hf_transfer==0.1.9",
    "hf-xet==1.8.0",
    "dill==0.4.0",
    "fsspec==2025.10.0",
    "httpx==0.28.1",
    "httpcore==1.0.9",
    "multiprocess==0.70.18",
    "numpy==2.4.6",
    "packaging==26.4",
    "pyarrow==26.0.1",
    "PyYAML==6.0.4",
    "requests==2.34.2",
    "tqdm==4.70.1",
    "typing_extensions==4.16.0",
    "filelock==4.3.1",
    "pandas==3.1.1",
    "xxhash==4.1.0",
    "aiohttp==3.14.5",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "idna==3.20",
    "python-dateutil==4.0.0",
    "urllib3==2.8.0",
    "anyio==4.16.0",
    "aiohappyeyeballs==2.7.1",
    "aiosignal==1.4.0",
    "attrs==26.1.0",
    "frozenlist==1.8.0",
    "h11==0.16.0",
    "multidict==7.2.1",
    "propcache==0.5.4",
    "yarl==1.25.1",
    "tzdata==2026.6",
)

# --- RunSupervisor (components/ray/supervision.py) ---
# The supervisor's image: the Docker official Python image. Its script uses the standard library
# only (urllib, json, ssl), so nothing beyond the interpreter is needed, and a ~50 MB slim image
# starts in seconds on the system pool every tick instead of the ~25 GB verl image. An exact
# patch release on a fixed Debian release (3.12.8, bookworm), not `3` or `slim`, so a tick runs
# the same interpreter every time; multi-arch (amd64 and arm64). Pulled through the stack's
# Docker Hub mirror (components/registry/image_mirror.py). Tag, not digest, for the reason given
# at VERL_IMAGES.
SUPERVISOR_IMAGE = "python:3.12.8-slim-bookworm"
