"""The Ray metrics the dashboard and the GPU-idle alert read exist, with the labels they use.

A real Ray head (the shared test head) runs a driver whose actor is named like verl's
`TaskRunner`; its node's Prometheus endpoint (what Managed Prometheus scrapes on port 8080 in
the cluster) must export every Ray metric the dashboard references, and `ray_actors` must
report `Name="TaskRunner", State="ALIVE"` while the actor lives.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import requests

from components.observability import dashboard

FAKE = Path(__file__).parent / "fakes" / "task_runner.py"
_ALIVE_TASK_RUNNER = re.compile(r'^ray_actors\{[^}]*Name="TaskRunner"[^}]*State="ALIVE"[^}]*\} ([0-9.]+)', re.M)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return reply.read().decode()


def test_dashboard_ray_metrics_and_the_task_runner_label_exist(shared_ray_head):
    """Every ray_* metric of the dashboard is exported, and ray_actors counts an ALIVE
    TaskRunner while verl's actor would be running (the GPU-idle alert's `and` clause)."""
    submission_id = f"task-runner-{uuid.uuid4().hex[:8]}"
    requests.post(
        f"{shared_ray_head.dashboard_url}/api/jobs/",
        json={"entrypoint": f"{sys.executable} {FAKE} --seconds 60", "submission_id": submission_id},
        timeout=10,
    ).raise_for_status()
    port = shared_ray_head.metrics_port
    try:
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            text = scrape(port)
            alive = [float(v) for v in _ALIVE_TASK_RUNNER.findall(text)]
            if sum(alive) >= 1:
                break
            time.sleep(1)
        else:
            raise AssertionError("no ray_actors{Name=TaskRunner, State=ALIVE} within 60 s")
        exported = set(re.findall(r"^(ray_[a-z_]+)\{", text, re.M))
        assert set(dashboard.RAY_METRICS) <= exported, set(dashboard.RAY_METRICS) - exported
    finally:
        requests.post(f"{shared_ray_head.dashboard_url}/api/jobs/{submission_id}/stop", timeout=10)
