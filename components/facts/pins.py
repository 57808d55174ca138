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

# --- The training stack: verl's source, the image it runs in, and what the pods add -------------
# One pairing on every target, the one verl's own CI ran at the pinned ref: verl-project/verl
# ddbcdb7's GPU workflows run on `verlai/verl:vllm023.dev1` (.github/workflows/vllm.yml:75 and
# ten others) and install verl's requirements.txt on top (vllm.yml:109-111). Both tags below are
# built from one Dockerfile (docker/Dockerfile.stable.vllm at ddbcdb7): CUDA 13.0.2, Python 3.12,
# torch 2.11.0, vLLM 0.23.0, transformers 5.3.0 (its lines 3-17), so a4, a3u and a4x run one
# vLLM/torch line. `vllm023.aarch64.dev1` is also the tutorial's A4X image (GB200 is arm64 only,
# verl #3468). Until this pairing, a4/a3u ran `vllm011.dev7` (vLLM 0.11, torch 2.8, verl v0.6.0's
# packages), a line verl's CI never ran at this ref and whose image lacks TransferQueue, so the
# default run died a minute after submission (docs/training.md, "The training stack").
# What the image lets verl import is recorded, with the source of each module, in
# third_party/images/verl-vllm023.yaml (an inference: the image was not pulled here); the offline
# check (tools/training_stack.py) walks the code path the run's config selects against it.
# Tags, not digests: the registry is not reachable from where this is written; replace them with
# `@sha256:` digests once pulled (`crane digest verlai/verl:<tag>`), the program accepts both.
VERL_IMAGES: dict[Arch, str] = {
    Arch.AMD64: "verlai/verl:vllm023.dev1",
    Arch.ARM64: "verlai/verl:vllm023.aarch64.dev1",
}

# verl source staged into the bucket (PYTHONPATH=/data/verl): verl-project/verl ddbcdb79f5f0
# (2026-07-09, between v0.8.0 and v0.9.0), the tutorial's VERL_REF. What verl does at this ref
# is in components/facts/verl.py, whose AT_REF a test holds to this pin. The URL is the
# project's old name, which GitHub redirects to verl-project/verl; it stays, because the staging
# Job's env carries it and a new URL would run an existing stack's staging again for nothing.
VERL_REPO = "https://github.com/volcengine/verl.git"
VERL_REF = "ddbcdb7"

# The Ray release of the images, as the RayCluster's `rayVersion` states it: the tutorial's value
# for this image line (its A4X RayCluster). The Dockerfile does not pin Ray (verl v0.7.1's
# `ray[default]>=2.41.0`, resolved on the day the image was built), so this is the tutorial's
# claim, not a reading of the image; the ClusterCheck prints the release each node runs. The
# tests run their Ray heads at this release (requirements-dev.txt, tests/test_project_files.py).
RAY_VERSION = "2.49.0"

# The lowest NVIDIA driver the images' CUDA runs on: CUDA 13.0 needs a 580 driver (NVIDIA's CUDA
# toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions": 13.0 GA >= 580.65.06).
# The GPU pools take GKE's DEFAULT driver (components/cluster/gpu_node_pool.py), as Google's own
# gke-a4, gke-a3-ultragpu and gke-a4x blueprints do; which version that is depends on the GKE
# version and is not published where it could be read here, so the ClusterCheck reads each
# node's driver and fails, naming this floor, before a training attempt is spent on it.
MIN_GPU_DRIVER = "580.65.06"


@dataclass(frozen=True)
class PodPackage:
    """A package every Ray pod installs when it starts, because the image lacks it."""

    requirement: str  # an exact pip requirement, installed with --no-deps: nothing else moves
    module: str  # the name it gives to `import`
    # The modules its own requirements name, each of which the image must already provide
    # (held to third_party/images/ by tests/test_training_stack.py).
    needs: tuple[str, ...]


# TransferQueue: verl's V1 trainer (trainer.use_v1, verl's default at the ref and what the program
# selects, components/facts/verl.py) imports it, verl's requirements.txt pins it
# (requirements.txt:28 at ddbcdb7), and no verl image ships it. The tutorial installs it in A4X's
# pods with a postStart hook and its dependencies; here every pod installs it with --no-deps, so
# that pip resolves nothing and changes none of the image's packages. Its requirements at 0.1.8
# (requirements.txt at TransferQueue 35bcf19, the "0.1.8" version bump, as mirrored by
# github.com/Ascend/TransferQueue): ray[default], tensordict>=0.10.0, pyzmq, hydra-core, numpy,
# msgspec, psutil, omegaconf, prometheus_client>=0.20.0.
POD_PACKAGES = (
    PodPackage(
        requirement="TransferQueue==0.1.8",
        module="transfer_queue",
        needs=("ray", "tensordict", "zmq", "hydra", "numpy", "msgspec", "psutil", "omegaconf",
               "prometheus_client"),
    ),
)

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

# --- VerlRayCluster (components/raycluster/verl_ray_cluster.py) ---
# KubeRay operator for A4X, where the GKE Ray add-on is not used (the tutorial installs the
# namespace-scoped Helm chart with no version, i.e. whatever is newest on the day). 1.7.0 is the
# newest stable release (tag v1.7.0, 2026-08-20; the Ray docs install exactly
# `kuberay/kuberay-operator --version 1.7.0`), and its RayCluster CRD is byte-identical to the
# one the tests validate against (tests/schemas/crds/, kuberay feeaf72), so what the tests
# accept is what this operator serves. The chart's default operator image is v1.7.0 too.
KUBERAY_OPERATOR = HelmChart(
    chart="kuberay-operator", repo="https://ray-project.github.io/kuberay-helm/", version="1.7.0"
)

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

# --- RunSupervisor (components/run/supervision.py) ---
# The supervisor's image: the Docker official Python image. Its script uses the standard library
# only (urllib, json, ssl), so nothing beyond the interpreter is needed, and a ~50 MB slim image
# starts in seconds on the system pool every tick instead of the ~25 GB verl image. An exact
# patch release on a fixed Debian release (3.12.8, bookworm), not `3` or `slim`, so a tick runs
# the same interpreter every time; multi-arch (amd64 and arm64). Pulled through the stack's
# Docker Hub mirror (components/registry/image_mirror.py). Tag, not digest, for the reason given
# at VERL_IMAGES.
SUPERVISOR_IMAGE = "python:3.12.8-slim-bookworm"
