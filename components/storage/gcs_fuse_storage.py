"""GcsFuseStorage: the bucket that holds model, data and checkpoints, and its mount in the cluster.

Creates a hierarchical-namespace bucket (uniform access, public access prevented) that
`pulumi destroy` leaves in place unless the user opted in to deleting it, and that a later
`pulumi up` adopts again (`adopt`, from components/preflight.py); the bucket is never replaced
(components/guards.py BucketIdentity refuses a rename or a move); the Kubernetes service
account of the Ray pods with a bucket-scoped `roles/storage.objectUser` grant to its
workload-identity principal; the Hugging Face token Secret; and a static GCS FUSE PersistentVolume
bound by name to its claim, for the Ray pods. It does not fill the bucket (ModelStaging does,
through an inline volume of the same bucket: `inline_volume`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.facts.hardware import Arch
from components.facts.layout import HF_SECRET_KEY, HF_SECRET_NAME, PVC_NAME
from components.options import child_options
from components.secrets import secret_data

PV_NAME = "training-bucket-pv"
CAPACITY = "768Gi"  # nominal: GCS has no size, but PV and PVC must agree on one

class MountUse(str, enum.Enum):
    """What a mount of the bucket is for; each gets its own GCS FUSE options."""

    # /data in the Ray pods: the model (66 GB read by every GPU at start), verl's source, GSM8K.
    MODEL = "model"
    # The checkpoint mount of the Ray pods: large sequential writes, read back on resume.
    CHECKPOINTS = "checkpoints"
    # The staging Job: bulk writes of the model, GSM8K and verl's source, renamed into place.
    STAGING = "staging"


# Options every use shares (GCS FUSE's GKE samples, samples/gke-csi-yaml/gpu/*-pv.yaml):
# implicit directories; no negative cache, so a file another node creates is seen at once;
# unbounded stat and type caches. The samples' `metadata-cache:ttl-secs:-1` is not taken: a
# re-staged model replaces files under the same path while the Ray pods keep their mounts,
# and checkpoints are written by one node and read by another, so entries expire at once
# (`ttl-secs:0`, the tutorial's choice) and every open sees the current object.
_COMMON = [
    "implicit-dirs",
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:0",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
]
# Reading whole large files, many times (the serving sample): an unbounded file cache, which
# the GPU nodes keep on their local-SSD ephemeral storage, filled by parallel downloads; whole
# files cached even when read in ranges (safetensors are); kernel read-ahead raised.
_READ_LARGE_FILES = [
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
]
# Writing large files sequentially (the checkpointing sample): streaming writes upload while
# the file is written instead of staging it whole on local disk first, with the tutorial's
# larger block budget for sixteen ranks writing shards at once.
_STREAM_WRITES = ["write:enable-streaming-writes:true", "write:global-max-blocks:200000"]

_OPTIONS: dict[MountUse, list[str]] = {
    MountUse.MODEL: _COMMON + _READ_LARGE_FILES,
    MountUse.CHECKPOINTS: _COMMON + _READ_LARGE_FILES + _STREAM_WRITES,
    # The tutorial's options: staging writes and renames; hf_transfer writes out of order, which
    # GCS FUSE stages on local disk whatever the option (streaming writes need sequential ones).
    MountUse.STAGING: _COMMON + _READ_LARGE_FILES + _STREAM_WRITES,
}


def mount_options(arch: Arch, use: MountUse = MountUse.MODEL) -> list[str]:
    """The options of one use, minus kernel read-ahead on arm64.

    gcsfuse known issue: with a raised read_ahead_kb on 64 KiB-page kernels, which A4X (arm64)
    nodes run, reads return premature EOF or wrong data up to gcsfuse v3.7.1
    (GoogleCloudPlatform/gcsfuse docs/known-issues.md).

    GCS FUSE's own workload profiles (`aiml-training`, `aiml-checkpointing`, `aiml-serving`) are
    not used: the CSI driver does not accept `profile` as a mount option, and GKE's profile
    StorageClasses need GKE 1.35.1-gke.1616000 or newer, which the resolved version need not be.
    The options above are those profiles' samples, spelled out.
    """
    options = list(_OPTIONS[use])
    if arch is Arch.ARM64:
        return [o for o in options if not o.startswith("read_ahead_kb=")]
    return options


CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
# Both mounts skip the driver's bucket-access check (the grant is bucket-scoped and may still be
# propagating) and warm the metadata cache at mount time.
_VOLUME_ATTRIBUTES = {"skipCSIBucketAccessCheck": "true", "gcsfuseMetadataPrefetchOnMount": "true"}


def inline_volume(
    volume_name: str,
    bucket_name: pulumi.Input[str],
    arch: Arch,
    use: MountUse = MountUse.STAGING,
) -> k8s.core.v1.VolumeArgs:
    """The bucket as a CSI ephemeral volume of a pod, with the options of its use.

    For pods that must not wait for the claim: the claim is created after the GPU pool (see
    GcsFuseStorageArgs.claim_after), and the staging Job runs while the GPU nodes come up.
    GKE: "Mount Cloud Storage buckets as CSI ephemeral volumes" (bucketName, mountOptions).
    """
    return k8s.core.v1.VolumeArgs(
        name=volume_name,
        csi=k8s.core.v1.CSIVolumeSourceArgs(
            driver=CSI_DRIVER, volume_attributes=inline_attributes(bucket_name, arch, use)
        ),
    )


def inline_attributes(
    bucket_name: pulumi.Input[str], arch: Arch, use: MountUse
) -> dict[str, pulumi.Input[str]]:
    """volumeAttributes of an inline GCS FUSE volume, for a typed volume or a pod as data."""
    return {
        "bucketName": bucket_name,
        "mountOptions": ",".join(mount_options(arch, use)),
        **_VOLUME_ATTRIBUTES,
    }


def workload_principal(project_number: str, project: str, namespace: str, ksa: str) -> str:
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{project}.svc.id.goog/subject/ns/{namespace}/sa/{ksa}"
    )


@dataclass(frozen=True)
class GcsFuseStorageArgs:
    project: str
    region: str
    bucket_name: str
    namespace: pulumi.Input[str]
    service_account: str
    hf_token: pulumi.Input[str] | None  # a secret Output; None when staging is skipped
    arch: Arch
    # The GKE cluster whose Workload Identity pool (`<project>.svc.id.goog`) the bucket grant
    # names. GKE creates that pool with the project's first Workload Identity cluster, and IAM
    # refuses a binding to a member of a pool that does not exist yet ("Identity Pool does not
    # exist", terraform-google-modules/terraform-google-kubernetes-engine#916; google/kctf#193),
    # so on a fresh project the grant must wait for the cluster (REAL-PROVIDER-REVIEW-3 finding 1).
    workload_cluster: pulumi.Resource
    delete_bucket_on_destroy: bool = False
    # Labels of the bucket; the stack label also says which stack may adopt it.
    labels: dict[str, str] = field(default_factory=dict)
    # The bucket exists already (kept by an earlier `pulumi destroy`, or made by the user):
    # import it instead of creating it. Pulumi's `import` option: when the resource is already
    # in the stack's state under that ID it is an ordinary update (pulumi/pulumi
    # step_generator.go: an import only when there is no old state or its ID differs), and
    # when inputs differ from the imported state the import succeeds and is followed by an
    # update (Pulumi >= 3.174, "import and then update a resource in a single deployment").
    adopt: bool = False
    # Must exist before the bucket is touched (components/guards.py BucketIdentity).
    bucket_guard: pulumi.Resource | None = None
    # What the PV and PVC are created after, and so deleted before: the GPU node pool. The
    # claim's finalizer holds its delete until no pod mounts it, so `pulumi destroy` removes
    # GPU nodes only once every gcsfuse sidecar on them has flushed and unmounted. Default: none.
    claim_after: Sequence[pulumi.Resource] = ()


class GcsFuseStorage(pulumi.ComponentResource):
    bucket: gcp.storage.Bucket
    bucket_name: pulumi.Output[str]
    bucket_url: pulumi.Output[str]
    # The bucket's name as the KSA's grant reports it: a pod that mounts the bucket inline
    # (`inline_volume`) with it waits for the grant, as the PV does.
    mount_bucket_name: pulumi.Output[str]
    pvc_name: pulumi.Output[str]
    service_account: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: GcsFuseStorageArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`opts.providers` must carry the cluster's Kubernetes provider."""
        super().__init__("verl-gke:index:GcsFuseStorage", name, None, opts)
        child = child_options(self, opts)
        self.bucket = self._bucket(name, args, child)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=args.service_account, namespace=args.namespace),
            opts=child,
        )
        project_number = gcp.organizations.get_project_output(project_id=args.project).number
        grant = gcp.storage.BucketIAMMember(
            f"{name}-object-user",
            gcp.storage.BucketIAMMemberArgs(
                bucket=self.bucket.name,
                role="roles/storage.objectUser",
                # The principal names the KSA, which IAM does not need to exist; but its pool must
                # (workload_cluster). The grant lands right after the cluster, while the system
                # pool is still being created, so IAM's propagation stays off the critical path.
                member=pulumi.Output.all(project_number, args.namespace).apply(
                    lambda v: workload_principal(v[0], args.project, v[1], args.service_account)
                ),
            ),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[args.workload_cluster])
            ),
        )
        self.hf_secret_name: pulumi.Output[str] | None = None
        if args.hf_token is not None:
            hf_secret = k8s.core.v1.Secret(
                f"{name}-hf-secret",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=HF_SECRET_NAME, namespace=args.namespace),
                type="Opaque",
                data={HF_SECRET_KEY: secret_data(args.hf_token)},
                opts=child,
            )
            # Consumers take the name from the Secret, so they wait for it and go before it.
            self.hf_secret_name = hf_secret.metadata.name
        # Whatever mounts the claim reads and writes the bucket as the KSA: the volume (and so
        # the claim and every pod) waits for the grant, not only for the bucket; and both wait
        # for `claim_after` (the GPU pool), so that destroy deletes them first.
        claim_opts = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(args.claim_after)))
        volume = self._persistent_volume(
            name, args, self.bucket.name,
            pulumi.ResourceOptions.merge(claim_opts, pulumi.ResourceOptions(depends_on=[grant])),
        )
        claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=PVC_NAME, namespace=args.namespace),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteMany"],
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": CAPACITY}),
                storage_class_name="gcsfuse-sc",
                # Bind to exactly this PV (the tutorial leaves it to matching, tutorial defect 4).
                volume_name=volume.metadata.name,
            ),
            opts=claim_opts,
        )

        self.bucket_name = self.bucket.name
        self.bucket_url = self.bucket.url
        self.mount_bucket_name = grant.bucket
        self.pvc_name = claim.metadata.name
        self.service_account = account.metadata.name
        self.register_outputs(
            {
                "bucketName": self.bucket_name,
                "bucketUrl": self.bucket_url,
                "mountBucketName": self.mount_bucket_name,
                "pvcName": self.pvc_name,
                "serviceAccount": self.service_account,
            }
        )

    @staticmethod
    def _bucket(
        name: str, args: GcsFuseStorageArgs, opts: pulumi.ResourceOptions
    ) -> gcp.storage.Bucket:
        keep = not args.delete_bucket_on_destroy
        return gcp.storage.Bucket(
            f"{name}-bucket",
            gcp.storage.BucketArgs(
                name=args.bucket_name,
                project=args.project,
                location=args.region.upper(),
                hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=True),
                uniform_bucket_level_access=True,
                public_access_prevention="enforced",
                # Checkpoints are the product of days of GPU time: never emptied implicitly.
                force_destroy=not keep,
                labels=args.labels or None,
            ),
            # `pulumi destroy` forgets the bucket instead of deleting it, unless asked. Never
            # delete-before-replace: a replacement is refused before it gets here (BucketIdentity
            # and the preflight's location check), and deleting first would delete the data.
            opts=pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(
                    retain_on_delete=keep,
                    import_=args.bucket_name if args.adopt else None,
                    depends_on=[args.bucket_guard] if args.bucket_guard else None,
                ),
            ),
        )

    @staticmethod
    def _persistent_volume(
        name: str,
        args: GcsFuseStorageArgs,
        bucket_name: pulumi.Output[str],
        opts: pulumi.ResourceOptions,
    ) -> k8s.core.v1.PersistentVolume:
        return k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=PV_NAME),
            spec=k8s.core.v1.PersistentVolumeSpecArgs(
                access_modes=["ReadWriteMany"],
                capacity={"storage": CAPACITY},
                # Retain, not the tutorial's Delete: deleting the claim must never be able to
                # reach the bucket's data.
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="gcsfuse-sc",
                mount_options=mount_options(args.arch, MountUse.MODEL),
                csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                    driver=CSI_DRIVER,
                    volume_handle=bucket_name,
                    volume_attributes=dict(_VOLUME_ATTRIBUTES),
                ),
            ),
            opts=opts,
        )
