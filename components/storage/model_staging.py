"""ModelStaging: a Kubernetes Job that fills the training bucket before training may start.

The tutorial stages the model (about 66 GB), GSM8K and verl's source from a workstation by hand.
This Job does it in the cluster, through the same bucket (mounted as an inline GCS FUSE volume,
so it never waits for the Ray pods' claim) and workload identity the Ray pods use: verl at
`pins.VERL_REF` to /data/verl, GSM8K preprocessed by verl's own script to /data/gsm8k, the model
at a pinned revision to /data/<name>. The work is components/storage/staging/stage.py, shipped in
a ConfigMap with its pinned wheels, so a stock Python image runs it and nothing is built; it is
idempotent (a marker in the bucket), so a re-run with unchanged values finishes in seconds.

It runs on the CPU system pool, so it starts once that pool exists (about as soon as the control
plane does) and never waits for GPU nodes; docs/staging.md says why here and not on Cloud Run.

`pulumi up` waits for the Job with the provider's built-in Job await (done when the Job is
Complete, failed as soon as it is Failed) and the program makes the GrpoJob depend on this
component, so training never starts on a half-filled bucket. The Job's name is derived from what
it stages, so a changed model, revision, verl ref or script is a new Job, and an unchanged one is
no change at all.

It does not create the bucket, service account or Hugging Face Secret (GcsFuseStorage does),
never builds a Kubernetes provider (it comes through `opts`), and never runs on a GPU node.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.facts import pins
from components.facts.hardware import Arch
from components.facts.layout import (
    DATA_MOUNT,
    GSM8K_DIR,
    HF_SECRET_KEY,
    HF_SECRET_NAME,
    TRAIN_FILES,
    VAL_FILES,
    VERL_DIR,
)
from components.options import child_options
from components.schema.staging import StagingConfig, model_path
from components.storage.gcs_fuse_storage import inline_volume

TYPE_TOKEN = "verl-gke:index:ModelStaging"

SCRIPT = Path(__file__).parent / "staging" / "stage.py"
SCRIPT_MOUNT = "/opt/verl-gke-staging"
REQUIREMENTS = "requirements.txt"  # pins.STAGING_WHEELS, next to the script in its ConfigMap

# The bucket layout the RayCluster and GrpoJob read (TUTORIAL.md "Model and data staging").
MARKER_PATH = f"{DATA_MOUNT}/.verl-gke-staging.json"
WORK_PATH = f"{DATA_MOUNT}/.verl-gke-staging"  # scratch space; on the mount so renames are moves


# Model files downloaded at once, each over CONNECTIONS_PER_FILE connections. Sized for the
# machine the Job runs on: hf_transfer writes a file out of order, so gcsfuse stages the whole
# file on the sidecar's disk until close and uploads it then; four shards of about 4 GB in flight
# (Qwen2.5-32B) is 16 GB, under half of SIDECAR_ANNOTATIONS' 40 GiB, and four uploads at once is
# what the sidecar's 4-CPU limit drives (bench/staging_bench.py measures the script's side).
DOWNLOAD_WORKERS = 4
# Connections per file, whichever way a file comes: hf_transfer's is huggingface_hub's
# HF_TRANSFER_CONCURRENCY, a constant, not a setting (0.36.0, the pinned version: constants.py:38,
# passed as `max_files` at file_download.py:470); a Xet-backed file goes through hf_xet instead,
# whose streams per file this pins to the same figure (HF_XET_FIXED_DOWNLOAD_CONCURRENCY, which
# "pins concurrency to a fixed value, bypassing the adaptive controller", huggingface_hub docs).
CONNECTIONS_PER_FILE = 100
# What the staging pod opens at its busiest, all to the Hugging Face CDN through the node's Cloud
# NAT: the figure the NAT's ports per VM are sized from (components/network/primary_network.py).
PEAK_CONNECTIONS = DOWNLOAD_WORKERS * CONNECTIONS_PER_FILE

# Failed pods before the Job is Failed. A retry resumes (the model download keeps its partial
# files), so two retries ride out a preempted node or a dropped connection without looping on a
# real error such as a bad token.
BACKOFF_LIMIT = 2
# Pulumi waits this much longer than the Job's activeDeadlineSeconds, so that a Job that runs too
# long is reported by Kubernetes as DeadlineExceeded rather than by Pulumi as a bare timeout.
AWAIT_MARGIN_MINUTES = 5

# The staging container: pip's wheels, the verl clone and the GSM8K download on its own disk;
# the model goes straight to the mount.
CONTAINER_RESOURCES = {
    "requests": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi"},
    "limits": {"memory": "8Gi", "ephemeral-storage": "10Gi"},
}
# The gcsfuse sidecar. The defaults suit light reads; this Job writes 66 GB. hf_transfer writes
# each file out of order, so gcsfuse stages the whole file on the sidecar's disk until close
# (streaming writes need sequential ones): DOWNLOAD_WORKERS files at once, shards of ~4 GB, so
# 16 GB in flight, doubled for headroom. CPU and memory: uploading four files at once at line
# rate (TLS, checksums) needs more than the sidecar's defaults.
SIDECAR_ANNOTATIONS = {
    "gke-gcsfuse/volumes": "true",
    "gke-gcsfuse/cpu-request": "1",
    "gke-gcsfuse/cpu-limit": "4",
    "gke-gcsfuse/memory-request": "2Gi",
    "gke-gcsfuse/memory-limit": "8Gi",
    "gke-gcsfuse/ephemeral-storage-request": "40Gi",
    "gke-gcsfuse/ephemeral-storage-limit": "40Gi",
}
LABELS = {"app.kubernetes.io/name": "verl-gke-staging", "app.kubernetes.io/part-of": "verl-gke"}

_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Job names become the `job-name` label of its pods (63 characters at most); the digest takes 11.
_MAX_NAME = 63 - 11
_GPU_RESOURCE = "nvidia.com/gpu"
_GPU_NODE_LABEL = "cloud.google.com/gke-accelerator"


@dataclass(frozen=True)
class ModelStagingArgs:
    staging: StagingConfig  # what to stage (the `verl-gke:staging` config)
    namespace: pulumi.Input[str]  # namespace of the service account and Secret
    # Kubernetes service account with read-write access to the bucket (workload identity).
    service_account: pulumi.Input[str]
    # The bucket, mounted at /data as a CSI ephemeral volume (gcs_fuse_storage.inline_volume).
    bucket_name: pulumi.Input[str]
    arch: Arch = Arch.AMD64  # of the nodes the Job runs on: picks gcsfuse's mount options
    # Where the Job may run: the CPU system pool (Standard) or a general-purpose compute class
    # (Autopilot); default: none. Never a GPU node: GPU selectors and tolerations are refused.
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Kubernetes tolerations as plain data, camelCase keys (`key`, `operator`, `value`,
    # `effect`, `tolerationSeconds`); default: none.
    tolerations: Sequence[Mapping[str, Any]] = ()
    hf_secret_name: pulumi.Input[str] = HF_SECRET_NAME  # Secret holding the Hugging Face token
    hf_secret_key: pulumi.Input[str] = HF_SECRET_KEY  # its key
    # Needs python3 (3.12, which pins.STAGING_WHEELS are resolved for), pip and git; default:
    # pins.STAGING_IMAGE, which __main__ passes through the stack's Docker Hub mirror.
    image: str = pins.STAGING_IMAGE
    # Steps the run does not need (stage.SKIPPABLE: "gsm8k", "model"), from `skipped_steps`;
    # default: none, every default is staged.
    skip_steps: tuple[str, ...] = ()


class ModelStaging(pulumi.ComponentResource):
    """The staging Job, or nothing when `staging.skip`; the bucket paths it fills either way."""

    job: k8s.batch.v1.Job | None
    job_name: pulumi.Output[str | None]  # None when staging is skipped
    model_path: str
    verl_path: str
    train_files: str
    val_files: str
    marker_path: str

    def __init__(
        self, name: str, args: ModelStagingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """`opts` must carry the cluster's Kubernetes provider (`providers=` or `provider=`).

        Pass the storage's outputs (namespace, service account, bucket name) so the Job waits
        for them, or list the storage component in `opts.depends_on`.
        """
        problems = _args_problems(name, args)
        if problems:
            raise ValueError(f"ModelStaging {name!r}: " + "; ".join(problems))
        super().__init__(TYPE_TOKEN, name, None, opts)
        self.model_path = model_path(args.staging.model_id)
        self.verl_path = VERL_DIR
        self.train_files = TRAIN_FILES
        self.val_files = VAL_FILES
        self.marker_path = MARKER_PATH
        self.job = None if args.staging.skip else self._job(name, args, opts)
        self.job_name = self.job.metadata.name if self.job else pulumi.Output.from_input(None)
        self.register_outputs(
            {
                "jobName": self.job_name,
                "modelPath": self.model_path,
                "verlPath": self.verl_path,
                "trainFiles": self.train_files,
                "valFiles": self.val_files,
                "markerPath": self.marker_path,
            }
        )

    def _job(
        self, name: str, args: ModelStagingArgs, opts: pulumi.ResourceOptions | None
    ) -> k8s.batch.v1.Job:
        files = {SCRIPT.name: SCRIPT.read_text(), REQUIREMENTS: requirements()}
        env = staging_env(args.staging, args.skip_steps)
        digest = _digest(env, files)
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-script",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{name}-script-{digest}", namespace=args.namespace, labels=LABELS
            ),
            data=files,
            immutable=True,
            opts=child_options(self, opts),
        )
        timeout = args.staging.timeout_minutes
        return k8s.batch.v1.Job(
            f"{name}-job",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{name}-{digest}",
                namespace=args.namespace,
                labels=LABELS,
                # A Job that failed is never ready; without this the next `pulumi up` would
                # wait on it again instead of running a new one.
                annotations={"pulumi.com/replaceUnready": "true"},
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=BACKOFF_LIMIT,
                active_deadline_seconds=timeout * 60,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=LABELS, annotations=SIDECAR_ANNOTATIONS
                    ),
                    spec=_pod_spec(args, env, config_map.metadata.name),
                ),
            ),
            opts=child_options(
                self,
                opts,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{timeout + AWAIT_MARGIN_MINUTES}m",
                    update=f"{timeout + AWAIT_MARGIN_MINUTES}m",
                ),
                # Jobs are immutable, so any change replaces this one. Delete first: two staging
                # pods must never write the same paths at once (an old one may still be running
                # if an earlier `pulumi up` was interrupted).
                delete_before_replace=True,
            ),
        )


def staging_env(cfg: StagingConfig, skip_steps: Sequence[str] = ()) -> dict[str, str]:
    """stage.py's settings (its ENV), all but the token, which comes from the Secret. The skip
    list only when there is one: a stack that stages everything keeps its Job's name."""
    skip = {"STAGING_SKIP_STEPS": ",".join(sorted(skip_steps))} if skip_steps else {}
    return {
        **skip,
        "STAGING_VERL_REPO": pins.VERL_REPO,
        "STAGING_VERL_REF": pins.VERL_REF,
        "STAGING_VERL_DIR": VERL_DIR,
        "STAGING_GSM8K_DIR": GSM8K_DIR,
        "STAGING_MODEL_ID": cfg.model_id,
        "STAGING_MODEL_REVISION": cfg.model_revision,
        "STAGING_MODEL_DIR": model_path(cfg.model_id),
        "STAGING_MARKER": MARKER_PATH,
        "STAGING_WORK_DIR": WORK_PATH,
        "STAGING_DOWNLOAD_WORKERS": str(DOWNLOAD_WORKERS),
        "HF_HUB_ENABLE_HF_TRANSFER": "1",
        "HF_XET_FIXED_DOWNLOAD_CONCURRENCY": str(CONNECTIONS_PER_FILE),
    }


def skipped_steps(run_paths: Sequence[str], staged_model: str) -> tuple[str, ...]:
    """The default downloads the run does not read: GSM8K unless a data path is under
    /data/gsm8k, the staged model unless the run's model path is it."""
    skip = []
    if not any(path.startswith(f"{GSM8K_DIR}/") for path in run_paths):
        skip.append("gsm8k")
    if staged_model not in run_paths:
        skip.append("model")
    return tuple(skip)


def requirements() -> str:
    """The staging wheels as a pip requirements file, one exact version a line."""
    return "".join(f"{wheel}\n" for wheel in pins.STAGING_WHEELS)


def start_command() -> list[str]:
    """Install the pinned wheels (exact versions, no resolver), then run the script.

    pip reaches PyPI through the node's Cloud NAT with a handful of connections; a failed
    install fails the pod, which the Job retries like any other failure.
    """
    install = (
        "python3 -m pip install --quiet --no-cache-dir --no-deps --disable-pip-version-check "
        f"--root-user-action=ignore --requirement {SCRIPT_MOUNT}/{REQUIREMENTS}"
    )
    return ["sh", "-c", f"{install} && exec python3 {SCRIPT_MOUNT}/{SCRIPT.name}"]


def _digest(env: Mapping[str, str], files: Mapping[str, str]) -> str:
    payload = json.dumps({"env": dict(env), "files": dict(files)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:10]


def _pod_spec(
    args: ModelStagingArgs, env: Mapping[str, str], script_config_map: pulumi.Input[str]
) -> k8s.core.v1.PodSpecArgs:
    token = k8s.core.v1.EnvVarArgs(
        name="HF_TOKEN",
        value_from=k8s.core.v1.EnvVarSourceArgs(
            secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(
                name=args.hf_secret_name, key=args.hf_secret_key
            )
        ),
    )
    container = k8s.core.v1.ContainerArgs(
        name="stage",
        image=args.image,
        command=start_command(),
        env=[
            *(k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()),
            k8s.core.v1.EnvVarArgs(name="PYTHONUNBUFFERED", value="1"),
            # Only the model download reads it; without it there may be no Secret to read
            # (hfToken is not required then, components/schema/config_checks.py), and a
            # secretKeyRef to a missing Secret keeps the pod from starting.
            *([] if "model" in args.skip_steps else [token]),
        ],
        resources=k8s.core.v1.ResourceRequirementsArgs(**CONTAINER_RESOURCES),
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name="bucket", mount_path=DATA_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="script", mount_path=SCRIPT_MOUNT, read_only=True),
        ],
    )
    return k8s.core.v1.PodSpecArgs(
        service_account_name=args.service_account,
        # Never, not OnFailure: a failed pod is replaced (the Job counts it against
        # backoffLimit) and the gcsfuse sidecar ends with the pod.
        restart_policy="Never",
        node_selector=dict(args.node_selector) or None,
        tolerations=[_toleration(t) for t in args.tolerations] or None,
        containers=[container],
        volumes=[
            inline_volume("bucket", args.bucket_name, args.arch),
            k8s.core.v1.VolumeArgs(
                name="script",
                config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=script_config_map),
            ),
        ],
    )


_TOLERATION_FIELDS = {
    "key": "key",
    "operator": "operator",
    "value": "value",
    "effect": "effect",
    "tolerationSeconds": "toleration_seconds",
}


def _toleration(raw: Mapping[str, Any]) -> k8s.core.v1.TolerationArgs:
    return k8s.core.v1.TolerationArgs(**{_TOLERATION_FIELDS[k]: v for k, v in raw.items()})


def _args_problems(name: str, args: ModelStagingArgs) -> list[str]:
    problems = []
    if not _K8S_NAME.fullmatch(name) or len(name) > _MAX_NAME:
        problems.append(
            f"name {name!r} must be a Kubernetes name of at most {_MAX_NAME} characters "
            "(lowercase letters, digits, '-'): the Job is named `<name>-<digest>`"
        )
    if _GPU_NODE_LABEL in args.node_selector:
        problems.append(
            f"node_selector selects GPU nodes ({_GPU_NODE_LABEL}): staging runs on CPU nodes"
        )
    for raw in args.tolerations:
        unknown = sorted(set(raw) - set(_TOLERATION_FIELDS))
        if unknown:
            problems.append(f"toleration {dict(raw)} has unknown fields {unknown}")
        tolerates_everything = not raw.get("key") and raw.get("operator") == "Exists"
        if raw.get("key") == _GPU_RESOURCE or tolerates_everything:
            problems.append(
                f"toleration {dict(raw)} would let the Job onto GPU nodes: staging runs on CPU "
                "nodes; pass the system pool's tolerations only"
            )
    return problems
