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
# The tutorial's checkpoint dir, so `gs://<bucket>/verl/checkpoints` holds the checkpoints.
CHECKPOINT_SUBPATH = "verl/checkpoints"
CHECKPOINT_DIR = f"{DATA_MOUNT}/{CHECKPOINT_SUBPATH}"

PVC_NAME = "training-bucket-pvc"
HF_SECRET_NAME = "hf-secret"
HF_SECRET_KEY = "hf_api_token"

# The Ray head's dashboard and Jobs API port (KubeRay's default).
DASHBOARD_PORT = 8265
