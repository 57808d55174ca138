"""WorkingDirUpload: a local working directory, uploaded to the training bucket by content.

Each file becomes one `gcp.storage.BucketObject` at `workdirs/<digest>/<its relative path>`,
the digest being that of every file's name and bytes (components/runspec/run_inputs.py
tree_digest). An unchanged directory names the same objects with the same content, so `up`
uploads nothing; a changed one names new objects under a new prefix (an object's `name` and
`source` force a replacement: google-beta/services/storage/resource_storage_bucket_object.go:71-76
and :198-204 at terraform-provider-google-beta 93c65b2d60, the snapshot read here), which the run
reads once its job is resubmitted: the working directory's place is part of the run's identity.

One object per file rather than one archive: the Ray pods read the bucket through GCS FUSE
(components/storage/gcs_fuse_storage.py), which shows objects as files, so the files are usable
where they land, with no unpacking step before the job and nothing to clean up; the price is a
resource per file, which run_inputs.MAX_FILES bounds (a larger tree is copied by the user and
given as a gs:// path).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from components.options import child_options, fixed_name
from components.runspec.run_inputs import local_files, tree_digest, uploaded_dir

TYPE_TOKEN = "verl-gke:index:WorkingDirUpload"


@dataclass(frozen=True)
class WorkingDirUploadArgs:
    directory: str  # local path, relative to the project directory (Pulumi runs the program there)
    bucket_name: pulumi.Input[str]  # the training bucket, once it exists


class WorkingDirUpload(pulumi.ComponentResource):
    """The directory's files in the bucket; `prefix` is where (`workdirs/<digest>`)."""

    prefix: str
    objects: list[gcp.storage.BucketObject]

    def __init__(
        self, name: str, args: WorkingDirUploadArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        files = local_files(Path(args.directory).expanduser())
        self.prefix = uploaded_dir(tree_digest(files))
        self.objects = [
            gcp.storage.BucketObject(
                # Named by the file's relative path: the resource keeps its name across
                # changes, while every object's `name` carries the tree digest, so any changed
                # file replaces every object of the tree (a new prefix, delete first).
                f"{name}-{hashlib.sha256(relative.encode()).hexdigest()[:12]}",
                bucket=args.bucket_name,
                name=f"{self.prefix}/{relative}",
                source=pulumi.FileAsset(str(path)),
                # Delete first: an object replaced under the same name (the bucket's own
                # replacement) would otherwise be deleted after its successor was written.
                opts=fixed_name(child_options(self, opts)),
            )
            for relative, path in files
        ]
        self.register_outputs({"prefix": self.prefix, "files": len(self.objects)})
