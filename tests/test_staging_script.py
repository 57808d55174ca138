"""The staging script (components/storage/staging/stage.py) against a temp dir standing in for /data.

Every source is a tiny local fixture the test makes: a git repository with two commits holding a
stand-in `verl` package and `examples/data_preprocess/gsm8k.py`, a GSM8K-shaped JSON file, and a
fake `huggingface_hub` whose `HfApi.list_repo_files` and `hf_hub_download` serve a local "model"
of the asked revision, logging each listing and the time each file took to write. The script runs as the Job runs it: a subprocess configured by environment.
"Did no work" is proved by taking the sources away before a re-run and checking that no file
under the data dir was rewritten (same inode, same mtime).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.storage.model_staging import DOWNLOAD_WORKERS

STAGE = Path(__file__).resolve().parents[1] / "components" / "storage" / "staging" / "stage.py"

TOKEN = "hf_fixture_token_must_never_be_printed"
MODEL_ID = "tiny-org/tiny-model"
REV_A = "a" * 40
REV_B = "b" * 40
REV_BROKEN = "c" * 40  # its download fails halfway
REV_SHARDED = "d" * 40  # eight weight shards, like a real checkpoint

# Mimics verl's script: same flags, imports verl.utils.hdfs_io as the real one does (so the staged
# checkout must be the one imported), and records which verl wrote each file.
STAND_IN_GSM8K = '''
import argparse, json, os
from verl.utils.hdfs_io import VERSION

parser = argparse.ArgumentParser()
parser.add_argument("--local_dataset_path")
parser.add_argument("--local_save_dir")
args = parser.parse_args()
with open(os.path.join(args.local_dataset_path, "gsm8k.json")) as f:
    raw = json.load(f)
for split in ("train", "test"):
    rows = [
        {"question": r["question"], "answer": r["answer"].split("#### ")[1], "verl": VERSION}
        for r in raw[split]
    ]
    with open(os.path.join(args.local_save_dir, f"{split}.parquet"), "w") as f:
        json.dump(rows, f)
'''

FAKE_HUB = '''
import json, os, shutil, threading, time

_lock = threading.Lock()


def _source(repo_id, revision):
    return os.path.join(os.environ["FAKE_HUB_ROOT"], repo_id, revision)


class HfApi:
    def __init__(self, token=None):
        self.token = token

    def list_repo_files(self, repo_id, revision=None):
        with open(os.environ["FAKE_HUB_LOG"], "a") as log:
            log.write(json.dumps({
                "repo_id": repo_id,
                "revision": revision,
                "token_given": self.token == os.environ.get("HF_TOKEN"),
                "hf_transfer": os.environ.get("HF_HUB_ENABLE_HF_TRANSFER"),
            }) + "\\n")
        return sorted(os.listdir(_source(repo_id, revision)))


def hf_hub_download(repo_id, filename, revision, local_dir, token=None):
    """One file, written into local_dir the way the real client does, slowly if asked; the
    time it spent writing goes to FAKE_HUB_TIMING."""
    if token != os.environ.get("HF_TOKEN"):
        raise PermissionError("the fake hub wants the token")
    if filename == "zz-broken":
        raise OSError("connection reset by the fake hub")
    started = time.monotonic()
    time.sleep(float(os.environ.get("FAKE_HUB_DELAY_S", "0")))
    target = os.path.join(local_dir, filename)
    shutil.copyfile(os.path.join(_source(repo_id, revision), filename), target)
    ended = time.monotonic()
    with _lock, open(os.environ["FAKE_HUB_TIMING"], "a") as log:
        log.write(json.dumps({"file": filename, "start": started, "end": ended}) + "\\n")
    return target
'''

MODEL_FILES = {
    REV_A: {"config.json": '{"rev": "a"}', "model.safetensors": "weights-a", "only-in-a.txt": "a"},
    REV_B: {"config.json": '{"rev": "b"}', "model.safetensors": "weights-b"},
    REV_BROKEN: {"config.json": '{"rev": "c"}', "model.safetensors": "weights-c", "zz-broken": ""},
    REV_SHARDED: {f"model-{n:05d}-of-00008.safetensors": f"shard-{n}" for n in range(1, 9)},
}


@dataclass
class World:
    root: Path
    ref_a: str  # short (7 characters), like the tutorial's VERL_REF
    ref_b: str

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def repo(self) -> Path:
        return self.root / "verl-repo"

    @property
    def gsm8k_source(self) -> Path:
        return self.root / "gsm8k-raw"

    @property
    def hub(self) -> Path:
        return self.root / "hub"

    @property
    def packages(self) -> Path:
        return self.root / "packages"  # holds the fake huggingface_hub

    @property
    def hub_log(self) -> Path:
        return self.root / "hub-calls.jsonl"

    @property
    def marker(self) -> Path:
        return self.data / ".verl-gke-staging.json"

    @property
    def model_dir(self) -> Path:
        return self.data / "tiny-model"

    @property
    def work_dir(self) -> Path:
        return self.data / ".verl-gke-staging"

    def run(
        self, *, ref: str | None = None, revision: str = REV_A, hub_delay_s: float = 0.0
    ) -> subprocess.CompletedProcess:
        env = self.env(ref=ref, revision=revision, hub_delay_s=hub_delay_s)
        done = subprocess.run(
            [sys.executable, str(STAGE)], env=env, capture_output=True, text=True, timeout=120
        )
        assert TOKEN not in done.stdout + done.stderr, "the Hugging Face token was printed"
        return done

    def env(
        self, *, ref: str | None = None, revision: str = REV_A, hub_delay_s: float = 0.0
    ) -> dict[str, str]:
        return {
            "FAKE_HUB_DELAY_S": str(hub_delay_s),
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "HF_TOKEN": TOKEN,
            "PYTHONPATH": str(self.packages),
            "FAKE_HUB_ROOT": str(self.hub),
            "FAKE_HUB_LOG": str(self.hub_log),
            "FAKE_HUB_TIMING": str(self.root / "hub-timing.jsonl"),
            "STAGING_VERL_REPO": str(self.repo),
            "STAGING_VERL_REF": ref or self.ref_a,
            "STAGING_VERL_DIR": str(self.data / "verl"),
            "STAGING_GSM8K_DIR": str(self.data / "gsm8k"),
            "STAGING_GSM8K_SOURCE": str(self.gsm8k_source),
            "STAGING_MODEL_ID": MODEL_ID,
            "STAGING_MODEL_REVISION": revision,
            "STAGING_MODEL_DIR": str(self.model_dir),
            "STAGING_MARKER": str(self.marker),
            "STAGING_WORK_DIR": str(self.work_dir),
            "STAGING_DOWNLOAD_WORKERS": str(DOWNLOAD_WORKERS),
        }

    def remove_sources(self, *, hub: bool = False) -> None:
        """Take away what a step would need, so a step that runs anyway fails the test."""
        shutil.rmtree(self.repo)
        shutil.rmtree(self.gsm8k_source)
        if hub:
            shutil.rmtree(self.hub)
            shutil.rmtree(self.packages)  # not even importable

    def hub_calls(self) -> list[dict]:
        if not self.hub_log.exists():
            return []
        return [json.loads(line) for line in self.hub_log.read_text().splitlines()]


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "fixture",
        "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
        "GIT_COMMITTER_NAME": "fixture",
        "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _commit_verl(repo: Path, version: str) -> str:
    for stale in (repo / "verl").glob("only_in_*.py"):
        stale.unlink()  # each version has a module the other lacks
    _write(repo / "verl" / f"only_in_{version}.py", "")
    # verl's real package __init__ files import torch and ray, which the staging image lacks.
    for init in (repo / "verl" / "__init__.py", repo / "verl" / "utils" / "__init__.py"):
        _write(init, 'raise ImportError("No module named torch")\n')
    _write(repo / "verl" / "utils" / "hdfs_io.py", f"VERSION = {version!r}\n")
    _write(repo / "examples" / "data_preprocess" / "gsm8k.py", textwrap.dedent(STAND_IN_GSM8K))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"verl {version}")
    return _git(repo, "rev-parse", "--short=7", "HEAD")


@pytest.fixture
def world(tmp_path: Path) -> World:
    if shutil.which("git", path="/usr/bin:/bin") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "verl-repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    ref_a = _commit_verl(repo, "A")
    ref_b = _commit_verl(repo, "B")
    w = World(tmp_path, ref_a, ref_b)
    sample = {"question": "Natalia sold 48 clips, then 24. How many?", "answer": "#### 72"}
    _write(w.gsm8k_source / "gsm8k.json", json.dumps({"train": [sample] * 3, "test": [sample]}))
    for revision, files in MODEL_FILES.items():
        for name, text in files.items():
            _write(w.hub / MODEL_ID / revision / name, text)
    _write(w.packages / "huggingface_hub" / "__init__.py", textwrap.dedent(FAKE_HUB))
    return w


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under `path` with its inode and mtime: equal snapshots mean nothing rewritten."""
    return {
        str(f.relative_to(path)): (f.stat().st_ino, f.stat().st_mtime_ns)
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }


def model_files(w: World) -> dict[str, str]:
    return {f.name: f.read_text() for f in w.model_dir.iterdir() if f.is_file()}


def gsm8k_rows(w: World, name: str) -> list[dict]:
    return json.loads((w.data / "gsm8k" / name).read_text())


def test_first_run_stages_verl_gsm8k_and_model(world: World) -> None:
    """A first run fills the three paths from the pinned sources and records them in the marker;
    the model comes from the hub with hf_transfer and the token; no scratch is left."""
    done = world.run()

    assert done.returncode == 0, done.stderr
    verl = world.data / "verl"
    assert (verl / "verl" / "utils" / "hdfs_io.py").read_text() == "VERSION = 'A'\n"
    assert not (verl / ".git").exists(), "the clone's .git must not be copied into the bucket"
    for name in ("train.parquet", "test.parquet"):
        rows = gsm8k_rows(world, name)
        assert rows and all(r == {**rows[0], "answer": "72", "verl": "A"} for r in rows)
    assert len(gsm8k_rows(world, "train.parquet")) == 3
    assert model_files(world) == MODEL_FILES[REV_A]
    assert json.loads(world.marker.read_text()) == {
        "verl": {"repo": str(world.repo), "ref": world.ref_a},
        "gsm8k": {"verlRef": world.ref_a, "datasetPath": str(world.gsm8k_source)},
        "model": {"id": MODEL_ID, "revision": REV_A},
    }
    assert world.hub_calls() == [
        {"repo_id": MODEL_ID, "revision": REV_A, "token_given": True, "hf_transfer": "1"}
    ]
    assert list((world.data / ".verl-gke-staging").iterdir()) == []


def test_rerun_with_same_values_does_no_work(world: World) -> None:
    """A re-run with unchanged values succeeds without cloning, preprocessing or downloading
    (every source is gone, huggingface_hub is not importable) and rewrites no file."""
    assert world.run().returncode == 0
    world.remove_sources(hub=True)
    before = snapshot(world.data)

    done = world.run()

    assert done.returncode == 0, done.stderr
    assert snapshot(world.data) == before
    assert "nothing to do" in done.stdout
    assert len(world.hub_calls()) == 1


def test_changed_revision_restages_only_the_model(world: World) -> None:
    """A new model revision replaces the model directory whole (no file of the old revision
    remains) and leaves verl and GSM8K untouched, their sources being gone."""
    assert world.run(revision=REV_A).returncode == 0
    world.remove_sources()
    verl_and_data = snapshot(world.data / "verl") | snapshot(world.data / "gsm8k")

    done = world.run(revision=REV_B)

    assert done.returncode == 0, done.stderr
    assert model_files(world) == MODEL_FILES[REV_B]
    assert snapshot(world.data / "verl") | snapshot(world.data / "gsm8k") == verl_and_data
    marker = json.loads(world.marker.read_text())
    assert marker["model"] == {"id": MODEL_ID, "revision": REV_B}
    assert marker["verl"]["ref"] == marker["gsm8k"]["verlRef"] == world.ref_a
    assert [c["revision"] for c in world.hub_calls()] == [REV_A, REV_B]


def test_changed_verl_ref_restages_verl_and_gsm8k_and_keeps_checkpoints(world: World) -> None:
    """A new verl ref replaces the source (no file of the old ref remains) and the GSM8K files
    verl's script makes, keeps what training wrote under /data/verl (checkpoints), and does not
    touch the model."""
    assert world.run().returncode == 0
    checkpoint = world.data / "verl" / "checkpoints" / "global_step_1" / "actor.pt"
    _write(checkpoint, "weights of step 1")
    kept = snapshot(world.data / "verl" / "checkpoints")
    model = snapshot(world.model_dir)
    shutil.rmtree(world.hub)
    shutil.rmtree(world.packages)

    done = world.run(ref=world.ref_b)

    assert done.returncode == 0, done.stderr
    assert (world.data / "verl" / "verl" / "utils" / "hdfs_io.py").read_text() == "VERSION = 'B'\n"
    # Nothing of ref A survives: a module B deleted must not stay importable from PYTHONPATH.
    assert sorted(p.name for p in (world.data / "verl" / "verl").glob("only_in_*.py")) == [
        "only_in_B.py"
    ]
    assert {r["verl"] for r in gsm8k_rows(world, "train.parquet")} == {"B"}
    assert snapshot(world.data / "verl" / "checkpoints") == kept
    assert checkpoint.read_text() == "weights of step 1"
    assert snapshot(world.model_dir) == model


def test_failed_download_is_never_mistaken_for_done(world: World) -> None:
    """A download that fails halfway leaves no model directory and no model entry in the marker
    (the finished steps keep theirs); the next run stages the model and only the model."""
    failed = world.run(revision=REV_BROKEN)

    assert failed.returncode != 0
    assert not world.model_dir.exists()
    assert "model" not in json.loads(world.marker.read_text())

    world.remove_sources()
    verl_and_data = snapshot(world.data / "verl") | snapshot(world.data / "gsm8k")
    done = world.run(revision=REV_A)

    assert done.returncode == 0, done.stderr
    assert model_files(world) == MODEL_FILES[REV_A]
    assert snapshot(world.data / "verl") | snapshot(world.data / "gsm8k") == verl_and_data
    assert list((world.data / ".verl-gke-staging").iterdir()) == [], "stale scratch left behind"


def test_missing_setting_is_named() -> None:
    """Run without its settings, the script stops before touching anything and names them all."""
    done = subprocess.run(
        [sys.executable, str(STAGE)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )

    assert done.returncode != 0
    assert "STAGING_MODEL_REVISION" in done.stderr and "STAGING_VERL_REF" in done.stderr


@pytest.mark.parametrize("workers", ["0", "four", "-1"])
def test_bad_download_concurrency_is_named_before_anything_is_staged(
    world: World, workers: str
) -> None:
    """STAGING_DOWNLOAD_WORKERS must be a positive integer; anything else stops the script with
    the variable and its value, before the bucket is touched."""
    env = {**world.env(), "STAGING_DOWNLOAD_WORKERS": workers}
    done = subprocess.run(
        [sys.executable, str(STAGE)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert f"STAGING_DOWNLOAD_WORKERS={workers!r}" in done.stderr
    assert not world.data.exists()


def test_unknown_verl_ref_fails_with_gits_reason_and_stages_nothing(world: World) -> None:
    """A ref the repository lacks stops the run with git's message; nothing is staged or marked."""
    done = world.run(ref="0badc0de")

    assert done.returncode != 0
    assert "0badc0de" in done.stderr
    assert not world.marker.exists()
    assert sorted(p.name for p in world.data.iterdir()) == [".verl-gke-staging"]


def test_checkpoints_parked_by_a_run_that_died_are_restored(world: World) -> None:
    """If a run dies between parking the checkpoints and putting them back, the next run puts
    them back (and never deletes them as a leftover), even when nothing needs staging."""
    assert world.run().returncode == 0
    checkpoint = world.data / "verl" / "checkpoints" / "global_step_1" / "actor.pt"
    _write(checkpoint, "weights of step 1")
    parked = world.work_dir / "verl.kept"
    parked.mkdir(parents=True)
    (world.data / "verl" / "checkpoints").rename(parked / "checkpoints")

    done = world.run()

    assert done.returncode == 0, done.stderr
    assert checkpoint.read_text() == "weights of step 1"
    assert not parked.exists()


def test_model_files_are_written_several_at_once(world: World) -> None:
    """Eight shards that each take 0.4 s at the hub are written DOWNLOAD_WORKERS at a time
    (the component's setting), never more (the sidecar's disk is sized for that many files in
    flight), all of them."""
    done = world.run(revision=REV_SHARDED, hub_delay_s=0.4)
    assert done.returncode == 0, done.stderr
    assert model_files(world) == MODEL_FILES[REV_SHARDED]
    timing = [json.loads(line) for line in (world.root / "hub-timing.jsonl").read_text().splitlines()]
    assert len(timing) == 8
    in_flight = max(sum(t["start"] <= moment < t["end"] for t in timing) for moment in (t["start"] for t in timing))
    assert in_flight == DOWNLOAD_WORKERS == 4
    span = max(t["end"] for t in timing) - min(t["start"] for t in timing)
    assert span < 8 * 0.4 / 2  # one at a time would take 3.2 s

