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
# `vllm011.latest` on amd64 (ANCHORS defect 4). `vllm011.dev7` is the last vllm 0.11 build
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
# nodes are arm64, its system pool is not). verl's gsm8k.py imports `verl`, whose package imports
# torch, tensordict and datasets, so a slim Python image would have to install verl's whole
# dependency set at run time; the amd64 training image already has them, plus git and hf_transfer
# (its base, vllm/vllm-openai, installs both), and it is the image a4 / a3u training pulls anyway.
STAGING_IMAGE = VERL_IMAGES[Arch.AMD64]

# --- RunSupervisor (components/ray/supervision.py) ---
# The supervisor's image: the Docker official Python image. Its script uses the standard library
# only (urllib, json, ssl), so nothing beyond the interpreter is needed, and a ~50 MB slim image
# starts in seconds on the system pool every tick instead of the ~25 GB verl image. An exact
# patch release on a fixed Debian release (3.12.8, bookworm), not `3` or `slim`, so a tick runs
# the same interpreter every time; multi-arch (amd64 and arm64). Pulled through the stack's
# Docker Hub mirror (components/registry/image_mirror.py). Tag, not digest, for the reason given
# at VERL_IMAGES.
SUPERVISOR_IMAGE = "python:3.12.8-slim-bookworm"
