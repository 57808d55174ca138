#!/usr/bin/env python3
"""Stage verl's source, GSM8K and a Hugging Face model into the training bucket, idempotently.

The staging Job (components/storage/model_staging.py) runs this with the bucket mounted through GCS FUSE.
Three steps, in order, each skipped when the marker file already records the values it would
stage and its destination exists:

  verl   clone the repository, check out the pinned ref, copy the tree (without .git)
  gsm8k  run verl's own examples/data_preprocess/gsm8k.py from the staged checkout
  model  the repository's files at the pinned revision, STAGING_DOWNLOAD_WORKERS at a time, each
         over many connections (hf_transfer, or hf_xet for a Xet-backed file), written through
         the mount straight into the bucket

A step builds its result in a scratch directory under the work directory, on the same mount, and
renames it into place only when it is complete. Its marker entry is removed before an old result
is touched and written back only after the rename, so a destination the marker vouches for is
always whole, and a half-filled one is rebuilt on the next run. The model's scratch directory
survives a failed attempt, so a Job retry resumes the download instead of restarting 66 GB.
The verl step replaces only the entries it stages, so what the training job writes under
/data/verl (checkpoints) survives a new ref; nothing else of the bucket is ever touched.

Everything comes from environment variables (ENV below), so tests can point the clone, the
dataset and the hub at local fixtures. Plain Python 3 standard library, plus git, and the pinned
wheels the Job installs (huggingface_hub with hf_transfer and hf_xet, datasets). Nothing here
prints the Hugging Face token.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

# Settings field -> environment variable. Every one is required except the GSM8K source.
ENV = {
    "verl_repo": "STAGING_VERL_REPO",
    "verl_ref": "STAGING_VERL_REF",
    "verl_dir": "STAGING_VERL_DIR",
    "gsm8k_dir": "STAGING_GSM8K_DIR",
    "model_id": "STAGING_MODEL_ID",
    "model_revision": "STAGING_MODEL_REVISION",
    "model_dir": "STAGING_MODEL_DIR",
    "marker": "STAGING_MARKER",
    "work_dir": "STAGING_WORK_DIR",
    "download_workers": "STAGING_DOWNLOAD_WORKERS",
}
# A local copy of GSM8K for verl's `--local_dataset_path`; unset, verl's script reads
# openai/gsm8k from the Hub.
GSM8K_SOURCE_ENV = "STAGING_GSM8K_SOURCE"
# Steps not to run, comma-separated (gsm8k, model): the run reads data or a model of the user's
# own, so downloading the defaults would only cost time and bucket space. verl is always staged.
SKIP_ENV = "STAGING_SKIP_STEPS"
SKIPPABLE = ("gsm8k", "model")
REQUIRED_ENV = tuple(ENV.values())

GSM8K_FILES = ("train.parquet", "test.parquet")

# Training's checkpoint directory inside the verl source tree (see Step.keep).
CHECKPOINTS = "checkpoints"


class StagingError(RuntimeError):
    """A step could not produce what it promised."""


@dataclass(frozen=True)
class Settings:
    verl_repo: str
    verl_ref: str
    verl_dir: Path
    gsm8k_dir: Path
    gsm8k_source: str | None
    model_id: str
    model_revision: str
    model_dir: Path
    marker: Path
    work_dir: Path
    # Model files fetched at once, set by the component (model_staging.DOWNLOAD_WORKERS), which
    # sizes it for the staging pod's disk and the Cloud NAT's ports.
    download_workers: int
    skip: frozenset[str] = frozenset()  # SKIPPABLE steps left out


@dataclass(frozen=True)
class Step:
    name: str
    dest: Path
    wanted: dict[str, str]  # what the marker records once `dest` holds this result
    build: Callable[[Path], None]  # fills the scratch directory it is given
    resumable: bool = False  # keep a failed attempt's scratch directory for the next try
    # Entries of `dest` that are not staged content (training writes them) and must survive a
    # re-staging; everything else in `dest` is replaced, so no stale file of an old ref remains.
    keep: tuple[str, ...] = ()

    @property
    def parked_name(self) -> str:
        return f"{self.name}.kept"

    @property
    def scratch_name(self) -> str:
        # Keyed by the wanted values, so a resumed attempt never mixes two revisions.
        digest = hashlib.sha256(json.dumps(self.wanted, sort_keys=True).encode()).hexdigest()
        return f"{self.name}-{digest[:12]}"


def log(message: str) -> None:
    print(f"[stage] {message}", flush=True)


def settings_from_env(env: Mapping[str, str]) -> Settings:
    missing = [name for name in REQUIRED_ENV if not env.get(name)]
    if missing:
        raise SystemExit(f"[stage] missing environment variables: {', '.join(missing)}")
    value = {field: env[name] for field, name in ENV.items()}
    workers = value["download_workers"]
    if not workers.isdigit() or int(workers) < 1:
        raise SystemExit(f"[stage] {ENV['download_workers']}={workers!r} is not a positive integer")
    return Settings(
        verl_repo=value["verl_repo"],
        verl_ref=value["verl_ref"],
        verl_dir=Path(value["verl_dir"]),
        gsm8k_dir=Path(value["gsm8k_dir"]),
        gsm8k_source=env.get(GSM8K_SOURCE_ENV) or None,
        model_id=value["model_id"],
        model_revision=value["model_revision"],
        model_dir=Path(value["model_dir"]),
        marker=Path(value["marker"]),
        work_dir=Path(value["work_dir"]),
        download_workers=int(workers),
        skip=_skipped(env.get(SKIP_ENV, "")),
    )


def _skipped(value: str) -> frozenset[str]:
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(names - set(SKIPPABLE))
    if unknown:
        raise SystemExit(f"[stage] {SKIP_ENV} names {', '.join(unknown)}: only {SKIPPABLE}")
    return names


def plan(s: Settings) -> list[Step]:
    return [step for step in _steps(s) if step.name not in s.skip]


def _steps(s: Settings) -> list[Step]:
    return [
        Step(
            "verl",
            s.verl_dir,
            {"repo": s.verl_repo, "ref": s.verl_ref},
            lambda scratch: clone_verl(s, scratch),
            # The training job checkpoints to /data/verl/checkpoints (the tutorial's layout,
            # components/facts/layout.py CHECKPOINT_DIR): a new ref must never delete them.
            keep=(CHECKPOINTS,),
        ),
        # verl's script at that ref defines the rows, so a new ref re-runs it.
        Step(
            "gsm8k",
            s.gsm8k_dir,
            {"verlRef": s.verl_ref, "datasetPath": s.gsm8k_source or ""},
            lambda scratch: preprocess_gsm8k(s, scratch),
        ),
        Step(
            "model",
            s.model_dir,
            {"id": s.model_id, "revision": s.model_revision},
            lambda scratch: download_model(s, scratch),
            resumable=True,
        ),
    ]


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True)
    if done.returncode != 0:  # git's own message says why (unknown ref, unreachable repo)
        raise StagingError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def clone_verl(s: Settings, scratch: Path) -> None:
    # Cloned on the container's disk, not the mount: git's lock files, renames and packfiles
    # are slow and fragile over FUSE. A blobless clone still resolves a short ref such as the
    # tutorial's; `git fetch <sha>` would need the full 40 characters.
    with tempfile.TemporaryDirectory() as local:
        checkout = Path(local) / "verl"
        git("clone", "--quiet", "--filter=blob:none", "--no-checkout", s.verl_repo, str(checkout))
        git("-C", str(checkout), "checkout", "--quiet", "--detach", s.verl_ref)
        log(f"verl: {s.verl_ref} is commit {git('-C', str(checkout), 'rev-parse', 'HEAD')}")
        shutil.copytree(
            checkout,
            scratch,
            ignore=shutil.ignore_patterns(".git"),
            symlinks=True,
            dirs_exist_ok=True,
        )


# Runs verl's gsm8k.py with `verl` and `verl.utils` as bare packages of the staged checkout:
# their modules import from that tree, but the two `__init__.py` files, which import torch, ray
# and tensordict (verl/__init__.py imports verl.protocol), never run. The preprocessing itself
# needs only `datasets` and verl.utils.hdfs_io, which imports the standard library only: so in
# volcengine/verl's examples/data_preprocess/gsm8k.py from b00f77d85 (2025-04-18) through
# dfa3933ac (2025-09-09, its last change before b178a3cd5, 2026-01-29, the newest read). The staging image needs neither torch nor the 25 GB
# training image; a verl whose script imports more fails the gsm8k step with the missing module.
_BARE_VERL = """
import runpy, sys, types
root, script = sys.argv[1], sys.argv[2]
for name, path in (("verl", root + "/verl"), ("verl.utils", root + "/verl/utils")):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def preprocess_gsm8k(s: Settings, scratch: Path) -> None:
    script = s.verl_dir / "examples" / "data_preprocess" / "gsm8k.py"
    command = [sys.executable, "-c", _BARE_VERL, str(s.verl_dir), str(script)]
    if s.gsm8k_source:
        command += ["--local_dataset_path", s.gsm8k_source]
    # No .pyc files written into the bucket.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as local:
        subprocess.run([*command, "--local_save_dir", local], check=True, env=env, cwd=local)
        for name in GSM8K_FILES:
            produced = Path(local) / name
            if not produced.is_file():
                raise StagingError(f"gsm8k: {script} did not write {name}")
            shutil.copyfile(produced, scratch / name)


def download_model(s: Settings, scratch: Path) -> None:
    """Every file of the model at its revision, `download_workers` files at once.

    What `snapshot_download` does, with the concurrency in this script's hands: it is the one
    knob that decides throughput (each file already comes over many connections) and the
    sidecar's disk use, so it is set and tested here. A file that fails
    fails the step; the files already written stay in the scratch directory for the retry.
    """
    # huggingface_hub reads this when it is imported; imported here so that a run with nothing
    # to download never needs it.
    os.environ.setdefault("HF_HUB_ENABLE_HF_TRANSFER", "1")
    from huggingface_hub import HfApi, hf_hub_download

    token = os.environ.get("HF_TOKEN") or None
    files = HfApi(token=token).list_repo_files(s.model_id, revision=s.model_revision)

    def fetch(name: str) -> None:
        hf_hub_download(
            repo_id=s.model_id,
            filename=name,
            revision=s.model_revision,
            local_dir=scratch,
            token=token,
        )

    with ThreadPoolExecutor(max_workers=s.download_workers) as pool:
        for _ in pool.map(fetch, files):  # re-raises the first failure
            pass


def read_marker(path: Path) -> dict[str, dict[str, str]]:
    return json.loads(path.read_text()) if path.exists() else {}


def write_marker(path: Path, marker: dict[str, dict[str, str]]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


def clear_stale(work_dir: Path, keep: set[str]) -> None:
    """Remove what earlier runs left in the work directory, except scratch dirs still wanted."""
    for entry in work_dir.iterdir():
        if entry.name in keep:
            continue
        log(f"removing leftover {entry}")
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def install(step: Step, built: Path, trash: Path, parked: Path) -> None:
    """Rename a finished build into place; what it replaces goes to `trash`, then is deleted.

    The step's `keep` entries are parked first, outside `trash` and every scratch directory, and
    moved into the new `dest` after the swap. Only staged content ever reaches `trash`, so a
    leftover one is safe to delete next run; a leftover `parked` is restored (`unpark`).
    """
    trash.mkdir(parents=True, exist_ok=True)
    for name in step.keep:
        if (step.dest / name).exists():
            parked.mkdir(parents=True, exist_ok=True)
            (step.dest / name).rename(parked / name)
    swap(built, step.dest, trash)
    unpark(step, parked)
    shutil.rmtree(trash)


def unpark(step: Step, parked: Path) -> None:
    """Move parked `keep` entries back into `dest` (also recovers from a run that died)."""
    if not parked.exists() or not step.dest.exists():
        return
    for entry in sorted(parked.iterdir()):
        log(f"{step.name}: keeping {entry.name}")
        entry.rename(step.dest / entry.name)
    parked.rmdir()


def swap(new: Path, target: Path, trash: Path) -> None:
    if target.exists() or target.is_symlink():
        target.rename(trash / target.name)
    new.rename(target)


def run_step(step: Step, marker: dict[str, dict[str, str]], s: Settings) -> bool:
    """Bring one destination up to date; True if it had to be staged."""
    unpark(step, s.work_dir / step.parked_name)
    if marker.get(step.name) == step.wanted and step.dest.exists():
        log(f"{step.name}: up to date at {step.dest} ({step.wanted})")
        return False
    log(f"{step.name}: staging {step.wanted} into {step.dest}")
    scratch = s.work_dir / step.scratch_name
    if not step.resumable:
        shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True, exist_ok=True)
    step.build(scratch)
    if marker.pop(step.name, None) is not None:
        write_marker(s.marker, marker)
    install(step, scratch, s.work_dir / f"{step.name}.old", s.work_dir / step.parked_name)
    marker[step.name] = step.wanted
    write_marker(s.marker, marker)
    log(f"{step.name}: done")
    return True


def main(env: Mapping[str, str] = os.environ) -> int:
    s = settings_from_env(env)
    steps = plan(s)
    s.work_dir.mkdir(parents=True, exist_ok=True)
    clear_stale(s.work_dir, {name for step in steps for name in (step.scratch_name, step.parked_name)})
    marker = read_marker(s.marker)
    staged = [step.name for step in steps if run_step(step, marker, s)]
    log(f"staged: {', '.join(staged)}" if staged else "nothing to do: the bucket is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
