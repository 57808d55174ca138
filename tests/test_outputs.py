"""The stack outputs contract: schemas/stack-outputs.schema.json, and `make outputs`."""

from __future__ import annotations

import copy
import json

from tools import cli
from tools import outputs as outputs_tool


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


def test_outputs_command_prints_the_cli_shape_with_secrets_masked(capsys):
    """`make outputs` (tools/outputs.py's main, through the entry point's cli.run) prints one
    JSON object of all outputs, the kubeconfig masked, and exits 0. In this process, where the
    SDK is already loaded: a fresh interpreter would spend ~6 CPU-s importing it, and the
    entry point itself is run by test_cli_errors."""
    assert cli.run(outputs_tool.main, ["--stack", "a3u"]) == 0
    printed_text = capsys.readouterr().out
    printed = json.loads(printed_text)
    assert printed["kubeconfig"] == "[secret]"
    assert printed["hardware"]["target"] == "a3u"
    assert "gke-gcloud-auth-plugin" not in printed_text
