"""`make curve`: the training curve PNG from a real Ray job's log, by file and through Ray.

A verl-format job (tests/fakes/verl_trainer.py) runs on a local Ray head started here; the
curve is drawn from its log three ways: the saved file, the dashboard address, and a deployed
stack's outputs (fake `pulumi` and `kubectl` relaying to the local Ray, the GrpoJob
provider's port-forward path). Each PNG must exist, be a PNG, and hold the series: in its
text chunk, and as pixels of each series' colour.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from PIL import Image

from tools import cli, curve

ROOT = Path(__file__).resolve().parents[1]
FAKES = Path(__file__).parent / "fakes"
SUBMISSION_ID = "verl-gke-test-grpo-curve"
STEPS, NAN_STEP = 5, 2
TRAINER = (
    f"{sys.executable} {FAKES / 'verl_trainer.py'} --steps {STEPS} --sleep 0.05 "
    f"--all-metrics --nan-reward-at {NAN_STEP}"
)


@pytest.fixture(scope="module")
def ray_job(shared_ray_head):
    """A local Ray head with one finished verl-format job; yields (head, its driver log)."""
    head = shared_ray_head
    requests.post(
        f"{head.dashboard_url}/api/jobs/",
        json={"entrypoint": TRAINER, "submission_id": SUBMISSION_ID}, timeout=10,
    ).raise_for_status()
    for _ in range(240):
        status = requests.get(f"{head.dashboard_url}/api/jobs/{SUBMISSION_ID}", timeout=10).json()["status"]
        if status in ("SUCCEEDED", "FAILED"):
            break
        time.sleep(0.25)
    assert status == "SUCCEEDED"
    log = head.temp_dir / "session_latest" / "logs" / f"job-driver-{SUBMISSION_ID}.log"
    yield head, log


@pytest.fixture
def run_curve(capsys, monkeypatch):
    """`make curve <args>`: tools/curve.py's main through the entry point's cli.run, in this
    process (a fresh interpreter costs ~2 CPU-s of imports; test_cli_errors runs the entry
    point itself), with `env` set as `make` would pass it. Returns exit code, stdout, stderr."""
    monkeypatch.chdir(ROOT)

    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = cli.run(curve.main, list(args))
        printed = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, printed.out, printed.err)

    return run


def assert_png_holds_the_series(png: Path) -> None:
    """A PNG with every metric's series (NaN reward left out) and each series' colour drawn."""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(png)
    series = json.loads(image.text[curve.SERIES_KEY])
    assert set(series) == set(curve.PANELS)
    assert [s for s, _ in series["critic/score/mean"]] == [s for s in range(1, STEPS + 1) if s != NAN_STEP]
    assert series["critic/score/mean"][-1] == [STEPS, pytest.approx(0.1 * STEPS)]
    assert series["response_length/mean"] == [[s, 100 + s] for s in range(1, STEPS + 1)]
    assert series["timing_s/step"][0] == [1, 10.5]
    assert series["perf/throughput"][-1] == [STEPS, 1000.0 + 50 * STEPS]
    assert image.text["Title"].startswith("verl GRPO training curve")
    pixels = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=1 << 24)}
    for key in curve.PANELS:
        color = curve.series_color(key)
        rgb = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in pixels, f"no {key} line in the image"


def test_curve_from_a_saved_log(ray_job, tmp_path, run_curve):
    """--log: the real driver log file gives a PNG with all four series."""
    _, log = ray_job
    done = run_curve("--log", str(log), "--out", str(tmp_path / "curve.png"))
    assert done.returncode == 0, done.stderr
    assert_png_holds_the_series(tmp_path / "curve.png")


def test_curve_through_the_ray_dashboard(ray_job, tmp_path, run_curve):
    """--address: the log comes through the provider's Jobs API client."""
    head, _ = ray_job
    done = run_curve("--address", head.dashboard_url, "--submission-id", SUBMISSION_ID,
                     "--out", str(tmp_path / "curve.png"))
    assert done.returncode == 0, done.stderr
    assert_png_holds_the_series(tmp_path / "curve.png")


def _deployed_stack(head, tmp_path) -> dict[str, str]:
    """The env of the fake `pulumi` and `kubectl` (tests/fakes) for a deployed a4 stack whose
    head Service forwards to the test's Ray head."""
    outputs = {
        "kubeconfig": "apiVersion: v1\nkind: Config\n",
        "rayCluster": {"namespace": "verl", "headService": "b200-ray-cluster-head-svc", "dashboardPort": 8265},
        "job": {"submissionId": SUBMISSION_ID},
    }
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    return {
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "FAKE_PULUMI_STACK": "a4", "FAKE_PULUMI_OUTPUTS": str(tmp_path / "outputs.json"),
        "FAKE_KUBECTL_TARGET": f"127.0.0.1:{head.dashboard_port}",
        "FAKE_KUBECTL_SERVICE": "b200-ray-cluster-head-svc",
        "FAKE_KUBECTL_LOG": str(tmp_path / "kubectl.jsonl"),
    }


def test_curve_of_a_stack_port_forwards_like_the_provider(ray_job, tmp_path, run_curve):
    """--stack (make curve STACK=...): outputs from `pulumi stack output`, the log through
    `kubectl port-forward` with the stack's kubeconfig, as the GrpoJob provider reaches Ray."""
    head, _ = ray_job
    env = _deployed_stack(head, tmp_path)

    done = run_curve("--stack", "a4", "--out", str(tmp_path / "curve.png"), env=env)
    assert done.returncode == 0, done.stderr
    assert_png_holds_the_series(tmp_path / "curve.png")
    [call] = [json.loads(l) for l in (tmp_path / "kubectl.jsonl").read_text().splitlines()]
    assert call["argv"][-2:] == ["svc/b200-ray-cluster-head-svc", ":8265"] and call["mode"] == "0o600"
    missing = run_curve("--stack", "a3u", "--out", str(tmp_path / "x.png"), env=env)
    assert missing.returncode != 0 and "no stack named 'a3u'" in missing.stderr


def test_a_log_without_step_lines_is_an_error_not_an_empty_plot(tmp_path, run_curve):
    """A log with no step line (the job has not trained yet) fails with a message, no PNG."""
    (tmp_path / "job.log").write_text("Runtime env is setting up.\n")
    done = run_curve("--log", str(tmp_path / "job.log"), "--out", str(tmp_path / "curve.png"))
    assert done.returncode != 0 and "no verl step line" in done.stderr
    assert not (tmp_path / "curve.png").exists()


def test_make_logs_follows_the_job_through_the_providers_port_forward(ray_job, tmp_path):
    """`make logs STACK=a4`: the same outputs and port-forward as `make curve --stack`; the
    whole driver log is printed, then the job's terminal status, and the exit code says it."""
    head, log = ray_job
    env = {**os.environ, **_deployed_stack(head, tmp_path)}

    done = subprocess.run([sys.executable, "-m", "tools.logs", "--stack", "a4", "--interval", "0.2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(log.read_text())
    assert f"\n[make logs] job {SUBMISSION_ID}: SUCCEEDED (" in done.stdout
    [call] = [json.loads(l) for l in (tmp_path / "kubectl.jsonl").read_text().splitlines()]
    assert call["argv"][-2:] == ["svc/b200-ray-cluster-head-svc", ":8265"] and call["mode"] == "0o600"
