"""What the components agree on: the bucket's layout under the /data mount, and the names of the
objects that carry it. Staging writes where the RayCluster mounts and the job reads, so these
live in one place (TUTORIAL.md, "Model and data staging" and "GrpoJob").
"""

# Every Ray pod and the staging Job mount the bucket (GcsFuseStorage's PVC) here.
DATA_MOUNT = "/data"
VERL_DIR = f"{DATA_MOUNT}/verl"  # verl's source; the job's PYTHONPATH
GSM8K_DIR = f"{DATA_MOUNT}/gsm8k"
TRAIN_FILES = f"{GSM8K_DIR}/train.parquet"
VAL_FILES = f"{GSM8K_DIR}/test.parquet"
HF_HOME = f"{DATA_MOUNT}/huggingface_cache"
# Every run's checkpoints, one directory per run (`<runName>-<N>gpu-<digest>`, see
# components/runspec/run.py). Outside VERL_DIR, so re-staging verl's source never touches them;
# `gs://<bucket>/checkpoints/<run>` holds one run.
# The Ray pods mount the bucket a second time here, with GCS FUSE options for checkpoint writes
# (components/storage/gcs_fuse_storage.py MountUse.CHECKPOINTS); /data keeps the options for
# reading the model. The same objects either way: gs://<bucket>/checkpoints/<run>.
CHECKPOINT_MOUNT = "/checkpoint-bucket"
CHECKPOINT_SUBPATH = "checkpoints"
CHECKPOINT_ROOT = f"{CHECKPOINT_MOUNT}/{CHECKPOINT_SUBPATH}"
# verl's checkpoint layout in a run's directory (verl/utils/checkpoint/checkpoint_manager.py
# get_checkpoint_tracker_filename, find_latest_ckpt_path): the tracker names the last step saved.
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
CHECKPOINT_STEP_DIR = "global_step_{}"

PVC_NAME = "training-bucket-pvc"
HF_SECRET_NAME = "hf-secret"
HF_SECRET_KEY = "hf_api_token"

# The Ray head's dashboard and Jobs API port (KubeRay's default).
DASHBOARD_PORT = 8265
