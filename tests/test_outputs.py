"""The stack outputs contract: schemas/stack-outputs.schema.json, and `make outputs`."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from tools import outputs as outputs_tool

ROOT = Path(__file__).resolve().parents[1]


def test_every_stacks_outputs_match_the_schema(program):
    """Each stack and mode's outputs (as the CLI prints them) validate against the schema,
    which forbids unknown keys: a new output must be added to the schema, and the README."""
    _, _, _, recording = program
    assert outputs_tool.schema_problems(recording.plain_outputs()) == []


def test_the_schema_catches_a_renamed_or_retyped_output(program):
    """Renaming an output, changing its shape or leaking a secret fails the schema."""
    _, _, _, recording = program
    good = recording.plain_outputs()
    renamed = copy.deepcopy(good)
    renamed["rayCluster"]["headSvc"] = renamed["rayCluster"].pop("headService")
    retyped = copy.deepcopy(good)
    retyped["hardware"]["nodes"] = str(retyped["hardware"]["nodes"])
    leaked = copy.deepcopy(good)
    leaked["kubeconfig"] = "apiVersion: v1"
    for bad in (renamed, retyped, leaked):
        assert outputs_tool.schema_problems(bad)


def test_new_outputs_point_at_the_dashboard_the_logs_and_the_ray_dashboard(program):
    """The dashboard URL, the job logs URL and the command that opens the Ray dashboard."""
    stack, _, _, recording = program
    out = recording.plain_outputs()
    assert out["consoleUrls"]["trainingDashboard"] == (
        "https://console.cloud.google.com/monitoring/dashboards/custom/observability-dashboard-id"
        "?project=example-project"
    )
    assert "ray-log-shipper" in out["consoleUrls"]["jobLogs"]
    head = out["rayCluster"]["headService"]
    assert out["rayCluster"]["dashboardCommand"].startswith(
        f"gcloud container clusters get-credentials {out['clusterName']} --location us-central1 "
        "--project example-project && kubectl --namespace default port-forward "
        f"svc/{head} 8265:8265"
    )
    # kubectl's default --address is localhost: nothing in the command opens it wider.
    assert "--address" not in out["rayCluster"]["dashboardCommand"]


def test_outputs_command_prints_the_cli_shape_with_secrets_masked():
    """`python -m tools.outputs` (what `make outputs` runs) prints one JSON object of all
    outputs, the kubeconfig masked, and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.outputs", "--stack", "a3u"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["kubeconfig"] == "[secret]"
    assert printed["hardware"]["target"] == "a3u"
    assert "gke-gcloud-auth-plugin" not in done.stdout
