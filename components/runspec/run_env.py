"""The Ray runtime env of the training job, and the env its workers really get.

`runtime_env` is what the job is submitted with: env vars only (NCCL plugin and tuning per
target, verl's own defaults that the tutorial drops, where the bucket keeps the HF cache).
`effective_env` adds what verl's trainer puts into every worker's env on top of it (its
PPO_RAY_RUNTIME_ENV, for each key the job's env does not set; components/facts/verl.py
WORKER_ENV): the ClusterCheck measures the fabric under that env, so what it passes is what
training gets.

Google's gIB guidance is to `source /usr/local/gib/scripts/set_nccl_env.sh` and put
/usr/local/gib/lib64 on LD_LIBRARY_PATH. A Ray runtime env holds variables, not a script that
every worker process would source, and the script ships inside the gIB image (it is not in
GoogleCloudPlatform/container-engine-accelerators), so its values are written out here: the
tutorial's, which are that script's for A4/A3U, and on A4X the `gcp` env plugin that applies
them inside NCCL. The library path follows the guidance on every target.
"""

from __future__ import annotations

from components.facts import verl
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
# enabled", NVIDIA/nccl src/mnnvl.cc:15-16 at 5067397c). verl up to v0.7 set 0 for every worker
# unless the job's env had the key (review finding 3); at the pinned ref it sets 0 only for the
# vLLM server actors (components/facts/verl.py WORKER_ENV), so the training workers would get
# NCCL's default. The 1 stays explicit: the NVL72 domain's FSDP collectives depend on it, and a
# verl that sets 0 again would otherwise send them over RDMA, silently. The ClusterCheck, run
# under this env, fails unless NCCL reports `MNNVL 1`.
_DRANET_NCCL_ENV = {
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
    "NCCL_ENV_PLUGIN": "gcp",
    "NCCL_CUMEM_ENABLE": "1",
}
# From verl's own runtime_env.yaml, which the tutorial's file drops. Not its
# CUDA_DEVICE_MAX_CONNECTIONS=1: at the pinned ref verl sets that only for Megatron on Hopper
# and Ampere, since it serialises FSDP2's prefetch (components/facts/verl.py WORKER_ENV).
_VERL_ENV = {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1"}


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


def effective_env(profile: HardwareProfile, nodes: int) -> dict:
    """The runtime env a training worker ends up with: the job's, plus verl's for unset keys."""
    env = runtime_env(profile, nodes)["env_vars"]
    added = {key: value for key, value in verl.WORKER_ENV.items() if key not in env}
    forwarded = {key: env.get(key, "0") for key in verl.FORWARDED_ENV}
    return {"env_vars": {**added, **env, **forwarded}}
