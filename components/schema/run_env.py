"""The Ray runtime env of the training job, and the env its workers really get.

`runtime_env` is what the job is submitted with: env vars only (NCCL plugin and tuning per
target, verl's own defaults that the tutorial drops, where the bucket keeps the HF cache).
`effective_env` adds what verl's trainer puts into every worker's env on top of it (its
PPO_RAY_RUNTIME_ENV, for each key the job's env does not set): the ClusterCheck measures the
fabric under that env, so what it passes is what training gets.

Google's gIB guidance is to `source /usr/local/gib/scripts/set_nccl_env.sh` and put
/usr/local/gib/lib64 on LD_LIBRARY_PATH. A Ray runtime env holds variables, not a script that
every worker process would source, and the script ships inside the gIB image (it is not in
GoogleCloudPlatform/container-engine-accelerators), so its values are written out here: the
tutorial's, which are that script's for A4/A3U, and on A4X the `gcp` env plugin that applies
them inside NCCL. The library path follows the guidance on every target.
"""

from __future__ import annotations

from components.facts.hardware import HardwareProfile, NodeNetworking
from components.facts.layout import HF_HOME, VERL_DIR

# NCCL over the gIB plugin on the RDMA VPC targets (the tutorial's runtime-env.yaml, A4/A3U);
# the tuner file differs per machine and comes from the profile (tutorial defect 2).
_RDMA_VPC_NCCL_ENV = {
    # Google's NCCL/gIB guidance: "The /usr/local/gib/lib64 directory is in your
    # LD_LIBRARY_PATH" (Compute Engine, "Enable NCCL/gIB"); the tutorial has only the driver's.
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
    "NCCL_NET_PLUGIN": "/usr/local/gib/lib64/libnccl-net_internal.so",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_NET_CHUNKSIZE": "131072",
    "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "52",
    "NCCL_IB_FIFO_TC": "84",
}
# A4X: the gIB arm64 plugin sits next to the driver libraries and tunes itself through the
# `gcp` env plugin (the tutorial's A4X runtime env).
# NCCL_CUMEM_ENABLE=1: NCCL uses multi-node NVLink only with cuMem ("MNNVL requires cuMem to be
# enabled", NVIDIA/nccl src/mnnvl.cc:15-16 at 5067397c), and verl turns cuMem off for every
# worker unless the key is already in the job's env (verl/trainer/constants_ppo.py:31 and
# :56-58 at b178a3cd5; since b86cd96eb, in v0.6.0 to v0.7.0). Without it the NVL72 domain's
# FSDP collectives go over RDMA (review finding 3; vllm-project/vllm#16992 measured the same on
# GB200). verl's reason for 0 is weight sync in *disaggregated* mode; this run is colocated
# (hybrid engine). vLLM keeps an explicit 1 (vllm-project/vllm#19105) and no longer sets 0 at all
# (#24141). The ClusterCheck, run under this env, fails unless NCCL reports `MNNVL 1`.
_DRANET_NCCL_ENV = {
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
    "NCCL_ENV_PLUGIN": "gcp",
    "NCCL_CUMEM_ENABLE": "1",
}
# verl's own defaults (verl/trainer/runtime_env.yaml), which the tutorial's file drops. Its
# HCCL_* entries are for Ascend NPUs and are left out.
_VERL_ENV = {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def runtime_env(
    profile: HardwareProfile, nodes: int, tensorboard_dir: str | None = None
) -> dict:
    """The Ray runtime env of the job: env vars only.

    No `working_dir`, `py_modules` or `pip`: verl is already on the bucket (PYTHONPATH) and in
    the image, and an upload from the machine running Pulumi is slow and size-capped (ray
    #45602, verl #696). No `setup_hook`: it is not a runtime_env field; the tutorial's file sets
    it by mistake (tutorial defect 1).
    """
    env = {
        "PYTHONPATH": VERL_DIR,
        "NCCL_DEBUG": "INFO",
        **_VERL_ENV,
        "HF_HOME": HF_HOME,
        # Gloo (CPU collectives) and NCCL's bootstrap sockets use the pod network, not an
        # RDMA NIC (NCCL otherwise takes the first interface it finds; review finding 14).
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_SOCKET_IFNAME": "eth0",
    }
    if profile.networking is NodeNetworking.RDMA_VPC:
        env.update(_RDMA_VPC_NCCL_ENV)
        env["NCCL_TUNER_CONFIG_PATH"] = profile.nccl_tuner_config
        # The tutorial's sizing hints, derived instead of hard-coded for two nodes of eight.
        env["NUM_WORKERS"] = str(nodes)
        env["GPUS_PER_WORKER"] = str(profile.gpus_per_node)
    else:
        env.update(_DRANET_NCCL_ENV)
    if tensorboard_dir:
        # verl's TensorBoard adapter writes where this says (verl/utils/tracking.py
        # _TensorboardAdapter); default: a relative path under the working dir, /data/verl.
        env["TENSORBOARD_DIR"] = tensorboard_dir
    return {"env_vars": env}


# What verl's trainer sets for every worker unless the job's env has the key
# (verl/trainer/constants_ppo.py:20-40 and get_ppo_ray_runtime_env :43-59 at b178a3cd5). The
# HCCL_* entries are for Ascend NPUs and change nothing here; they are kept so the dict is verl's.
VERL_PPO_ENV = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "NCCL_CUMEM_ENABLE": "0",
    "VLLM_DISABLE_COMPILE_CACHE": "1",
    "HCCL_HOST_SOCKET_PORT_RANGE": "auto",
    "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
}


def effective_env(profile: HardwareProfile, nodes: int) -> dict:
    """The runtime env a training worker ends up with: the job's, plus verl's for unset keys."""
    env = runtime_env(profile, nodes)["env_vars"]
    verl = {key: value for key, value in VERL_PPO_ENV.items() if key not in env}
    return {"env_vars": {**verl, **env}}
