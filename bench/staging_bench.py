"""Benchmark: the staging script's own model pipeline, with a hub and a sink that cost little.

components/storage/staging/stage.py runs as the Job runs it (a subprocess configured by
environment), on its model step only: verl and GSM8K are marked as staged already. A fake
`huggingface_hub` serves SHARDS files of SHARD_MIB each; like hf_transfer it writes each file in
16 MiB chunks in shuffled order (pwrite at offsets), and it records every chunk (time, bytes) and
every file's start and end. The sink is a local directory standing in for the GCS FUSE mount.

Reported: the throughput the script reaches end to end (listing, thread pool, writes, renames
into place, marker), its peak over any second, the CPU it costs per GB (the script's process
and its fake hub together: an upper bound on the script's own cost), and the files in flight at
once. What it does not measure: the network, the Hugging Face CDN or GCS (their figures are
cited in tools/critical_path.py). The run fails if the CPU per GB exceeds
tools/critical_path.PIPELINE_CPU_S_PER_GB, the bound the critical-path estimate relies on, or if
the files in flight are not DOWNLOAD_WORKERS.

    python -m bench.staging_bench [--smoke]

`--smoke` stages SMOKE_SHARD_MIB per file once, without the warm-up and without the verdicts:
what `make test` runs (tests/test_bench.py), so that the benchmark cannot rot unseen.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from components.storage.model_staging import (
    CONNECTIONS_PER_FILE,
    DOWNLOAD_WORKERS,
    PEAK_CONNECTIONS,
)
from tools.critical_path import PIPELINE_CPU_S_PER_GB, PIPELINE_MBPS

STAGE = Path(__file__).resolve().parents[1] / "components" / "storage" / "staging" / "stage.py"
MODEL_ID = "bench-org/bench-model"
REVISION = "e" * 40
SHARDS = 8
SHARD_MIB = 128  # 1 GiB in all: enough for a steady state, light on a shared machine
SMOKE_SHARD_MIB = 2
CHUNK_MIB = 16
RUNS = 3  # after one warm-up run; medians are reported, the machine being shared
WINDOW_S = 0.25  # the window of the peak rate

FAKE_HUB = '''
import json, os, random, threading, time

_lock = threading.Lock()
_CHUNK = int(os.environ["FAKE_HUB_CHUNK"])
_PAYLOAD = os.urandom(_CHUNK)  # generated once: serving bytes costs the hub almost nothing


def _log(record):
    with _lock, open(os.environ["FAKE_HUB_LOG"], "a") as log:
        log.write(json.dumps(record) + "\\n")


class HfApi:
    def __init__(self, token=None):
        pass

    def list_repo_files(self, repo_id, revision=None):
        return [f"model-{n:05d}.safetensors" for n in range(int(os.environ["FAKE_HUB_SHARDS"]))]


def hf_hub_download(repo_id, filename, revision, local_dir, token=None):
    size = int(os.environ["FAKE_HUB_SHARD_BYTES"])
    offsets = list(range(0, size, _CHUNK))
    random.Random(filename).shuffle(offsets)  # out of order, as hf_transfer writes
    target = os.path.join(local_dir, filename)
    started = time.monotonic()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for offset in offsets:
            written = os.pwrite(fd, _PAYLOAD[: min(_CHUNK, size - offset)], offset)
            _log({"t": time.monotonic(), "bytes": written})
    finally:
        os.close(fd)
    _log({"file": filename, "start": started, "end": time.monotonic()})
    return target
'''


def _world(root: Path, shard_mib: int) -> dict[str, str]:
    data = root / "data"
    packages = root / "packages" / "huggingface_hub"
    packages.mkdir(parents=True)
    (packages / "__init__.py").write_text(textwrap.dedent(FAKE_HUB))
    verl_ref, dataset = "bench", ""
    for name in ("verl", "gsm8k"):
        (data / name).mkdir(parents=True)
    marker = {
        "verl": {"repo": "bench://verl", "ref": verl_ref},
        "gsm8k": {"verlRef": verl_ref, "datasetPath": dataset},
    }
    (data / ".verl-gke-staging.json").write_text(json.dumps(marker))
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "PYTHONPATH": str(root / "packages"),
        "FAKE_HUB_LOG": str(root / "hub.jsonl"),
        "FAKE_HUB_CHUNK": str(CHUNK_MIB * 2**20),
        "FAKE_HUB_SHARDS": str(SHARDS),
        "FAKE_HUB_SHARD_BYTES": str(shard_mib * 2**20),
        "STAGING_VERL_REPO": "bench://verl",
        "STAGING_VERL_REF": verl_ref,
        "STAGING_VERL_DIR": str(data / "verl"),
        "STAGING_GSM8K_DIR": str(data / "gsm8k"),
        "STAGING_MODEL_ID": MODEL_ID,
        "STAGING_MODEL_REVISION": REVISION,
        "STAGING_MODEL_DIR": str(data / "bench-model"),
        "STAGING_MARKER": str(data / ".verl-gke-staging.json"),
        "STAGING_WORK_DIR": str(data / ".verl-gke-staging"),
        "STAGING_DOWNLOAD_WORKERS": str(DOWNLOAD_WORKERS),
    }


def measure(shard_mib: int = SHARD_MIB) -> dict[str, float]:
    """One staging run of the model step, `shard_mib` per file; its figures."""
    with tempfile.TemporaryDirectory(prefix="staging-bench-") as tmp:
        root = Path(tmp)
        env = _world(root, shard_mib)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        done = subprocess.run([sys.executable, str(STAGE)], env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"stage.py failed:\n{done.stderr}")
        staged = sum(f.stat().st_size for f in (root / "data" / "bench-model").iterdir())
        records = [json.loads(line) for line in Path(env["FAKE_HUB_LOG"]).read_text().splitlines()]
    chunks = [r for r in records if "bytes" in r]
    files = [r for r in records if "file" in r]
    assert staged == SHARDS * shard_mib * 2**20 == sum(r["bytes"] for r in chunks), "bytes lost"
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    starts = [f["start"] for f in files]
    in_flight = max(sum(f["start"] <= t < f["end"] for f in files) for t in starts)
    return {
        "gb": staged / 1e9,
        "wall_s": wall,
        "mbps": staged / 1e6 / wall,
        "peak_mbps": _peak_rate(chunks),
        "cpu_s_per_gb": cpu / (staged / 1e9),
        "in_flight": in_flight,
    }


def _peak_rate(chunks: list[dict]) -> float:
    """The most bytes the hub wrote in any WINDOW_S window, in MB/s."""
    times = sorted((c["t"], c["bytes"]) for c in chunks)
    best, window, first = 0, 0, 0
    for t, size in times:
        window += size
        while times[first][0] < t - WINDOW_S:
            window -= times[first][1]
            first += 1
        best = max(best, window)
    return best / 1e6 / WINDOW_S


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one small run, no verdict (make test)")
    smoke = parser.parse_args(argv).smoke
    if not smoke:
        measure()  # warm-up: imports and the page cache
    runs = [measure(SMOKE_SHARD_MIB) if smoke else measure() for _ in range(1 if smoke else RUNS)]
    result = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    result["in_flight"] = max(run["in_flight"] for run in runs)
    print(
        f"staging pipeline: {result['gb']:.2f} GB in {SHARDS} files, {DOWNLOAD_WORKERS} at once "
        f"(model_staging.DOWNLOAD_WORKERS), {result['in_flight']} observed in flight; "
        f"median of {len(runs)} run(s)"
    )
    print(
        f"  throughput {result['mbps']:.0f} MB/s end to end (peak {result['peak_mbps']:.0f} MB/s "
        f"over {WINDOW_S:g} s), CPU {result['cpu_s_per_gb']:.2f} s per GB (script + fake hub)"
    )
    print(
        f"  on the real hub each file comes over {CONNECTIONS_PER_FILE} hf_transfer connections: "
        f"{PEAK_CONNECTIONS} at once, the figure the Cloud NAT's ports per VM are sized from"
    )
    holds = result["cpu_s_per_gb"] <= PIPELINE_CPU_S_PER_GB
    print(
        f"  critical-path bound PIPELINE_CPU_S_PER_GB = {PIPELINE_CPU_S_PER_GB:g} s/GB "
        f"(so {PIPELINE_MBPS:.0f} MB/s on the staging container's CPU request): "
        f"{'holds' if holds else 'FAILS'}"
    )
    if not smoke and (result["in_flight"] != DOWNLOAD_WORKERS or not holds):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
