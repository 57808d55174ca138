"""What a user brings to a run: the training image, a working directory, data and a reward.

- `job.image`: a tag or a digest, refused when the tag floats (components/forms/image_refs.py);
  __main__.py pulls it through the stack's Docker Hub mirror like the pinned one.
- `job.workingDir`: a local directory, uploaded to `gs://<bucket>/workdirs/<digest>/` (the
  digest of its files' names and contents, so an unchanged directory names the same objects and
  uploads nothing; components/storage/working_dir.py), or a `gs://<the stack's bucket>/<path>`
  already there. Either way the Ray pods see it under the bucket's mount (/data), and the run's
  relative paths (data files, the reward file) are read inside it.
- Paths of the run (`modelPath`, `trainFiles`, `valFiles`, `rewardFunctionPath`) may be
  `/data/...`, `gs://<the stack's bucket>/...`, or relative to the working directory.

`placed` turns them into the absolute paths the pods read; the working directory's digest then
stands in the run's identity (its path on the bucket), so changed code is a new run.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from components.facts.layout import DATA_MOUNT
from components.messages import quoted

if TYPE_CHECKING:
    from components.runspec.run_config import GrpoRunConfig

# Where uploaded working directories go in the bucket: one prefix per content digest.
WORKDIR_SUBPATH = "workdirs"
# Entries never uploaded: version control, caches and virtualenvs are not the experiment.
IGNORED_NAMES = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".DS_Store"})
# One BucketObject per file: past these a plan grows unwieldy (each object is a resource the
# engine diffs on every `up`); a larger tree belongs in the bucket already, as a gs:// path.
MAX_FILES = 200
MAX_BYTES = 100 * 1024 * 1024
DIGEST_HEX = 16
# The run's fields that are paths, as the pods read them.
PATH_FIELDS = ("model_path", "train_files", "val_files", "reward_function_path")

_GS = re.compile(r"^gs://(?P<bucket>[^/]+)(?:/(?P<path>.*))?$")


def is_gs(value: str) -> bool:
    return value.startswith("gs://")


def local_files(directory: Path) -> list[tuple[str, Path]]:
    """(path relative to `directory` in POSIX form, file) of every file uploaded, sorted."""
    found = []
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if any(part in IGNORED_NAMES for part in relative.parts) or not path.is_file():
            continue
        found.append((relative.as_posix(), path))
    return found


def tree_digest(files: list[tuple[str, Path]]) -> str:
    """The digest of a directory's files: each one's relative name and the SHA-256 of its bytes.
    Modification times and permissions are left out: a fresh checkout names the same objects."""
    outer = hashlib.sha256()
    for relative, path in files:
        outer.update(relative.encode() + b"\0")
        outer.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return outer.hexdigest()[:DIGEST_HEX]


def working_dir_problems(key: str, value: str, bucket: str) -> list[str]:
    """Why `value` cannot be the run's working directory; [] if it can."""
    if is_gs(value):
        return gs_problems(key, value, bucket)
    directory = Path(value).expanduser()
    if not directory.is_dir():
        return [
            f"{key}={quoted(value)} is not a directory here (paths are relative to the project "
            f"directory, {Path.cwd()}): give a local directory to upload, or a "
            f"gs://{bucket}/<path> already in the stack's bucket"
        ]
    files = local_files(directory)
    size = sum(path.stat().st_size for _, path in files)
    if not files or len(files) > MAX_FILES or size > MAX_BYTES:
        return [
            f"{key}={quoted(value)} holds {len(files)} files, {size / 2**20:.1f} MiB: an uploaded "
            f"working directory has 1 to {MAX_FILES} files and at most {MAX_BYTES // 2**20} MiB "
            "(one bucket object each). Copy a larger one into the bucket yourself "
            f"(`gcloud storage rsync --recursive {value} gs://{bucket}/<path>`) and set "
            f"{key} to gs://{bucket}/<path>"
        ]
    return []


def gs_problems(key: str, value: str, bucket: str) -> list[str]:
    match = _GS.match(value)
    if match and match.group("bucket") == bucket and match.group("path"):
        return []
    return [
        f"{key}={quoted(value)} is not a path in the stack's bucket: the Ray pods mount "
        f"gs://{bucket} only (at {DATA_MOUNT}); use gs://{bucket}/<path>, or copy the files "
        f"there first (`gcloud storage cp --recursive <source> gs://{bucket}/<path>`)"
    ]


def mounted(value: str) -> str:
    """`gs://<bucket>/a/b` -> `/data/a/b` (the bucket is checked by gs_problems)."""
    path = (_GS.match(value).group("path") or "").strip("/")
    return f"{DATA_MOUNT}/{path}"


def uploaded_dir(digest: str) -> str:
    """The object prefix (in the bucket) of an uploaded working directory."""
    return f"{WORKDIR_SUBPATH}/{digest}"


def working_dir_mount(value: str | None) -> str | None:
    """Where the pods read the working directory: /data/workdirs/<digest> for a local one
    (computed from its files now), /data/<path> for a gs:// one; None without one."""
    if value is None:
        return None
    if is_gs(value):
        return mounted(value)
    return f"{DATA_MOUNT}/{uploaded_dir(tree_digest(local_files(Path(value).expanduser())))}"


def path_problems(run: GrpoRunConfig, bucket: str, key_of) -> list[str]:
    """Every path field that the pods could not read: a gs:// path outside the stack's bucket,
    or a relative path without a working directory."""
    problems = []
    for field in PATH_FIELDS:
        value = getattr(run, field)
        if value is None:
            continue
        if is_gs(value):
            problems += gs_problems(key_of(field), value, bucket)
        elif not value.startswith("/") and run.working_dir is None:
            problems.append(
                f"{key_of(field)}={quoted(value)} is relative, but there is no working directory "
                f"to read it in: set {key_of('working_dir')} (a local directory or "
                f"gs://{bucket}/<path>), or give {DATA_MOUNT}/... or gs://{bucket}/..."
            )
    return problems


def placed(run: GrpoRunConfig) -> GrpoRunConfig:
    """The run with every path as the pods read it, and its working directory on the mount.

    The working directory's place names its content (a local one's digest), and it is a field
    of the run's identity, so another content is another run."""
    workdir = working_dir_mount(run.working_dir)
    update = {}
    for field in PATH_FIELDS:
        value = getattr(run, field)
        if value is None:
            continue
        if is_gs(value):
            update[field] = mounted(value)
        elif not value.startswith("/") and workdir is not None:
            update[field] = str(PurePosixPath(workdir) / value)
    if workdir is not None:
        update["working_dir"] = workdir
    return run.model_copy(update=update) if update else run
