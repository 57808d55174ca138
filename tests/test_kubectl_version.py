"""kubectl's port-forward through GKE's DNS endpoint needs its WebSocket transport (1.31+).

A kubectl older than ray_access.KUBECTL_MINIMUM is refused before the first port-forward, with
the minimum and the fix in the message, instead of failing the cluster check or the run with a
port-forward error after 40 minutes of provisioning. tests/fakes/kubectl plays the client.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from components.run import ray_access

FAKES = Path(__file__).resolve().parent / "fakes"


@pytest.fixture
def fake_kubectl(monkeypatch, tmp_path):
    """The fake kubectl on PATH, a fresh process-wide check, and the log of port-forwards."""
    log = tmp_path / "kubectl.jsonl"
    log.touch()
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(log))
    monkeypatch.setenv("FAKE_KUBECTL_SERVICE", "head-svc")
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", "127.0.0.1:9")
    monkeypatch.setattr(ray_access, "_kubectl_checked", None)
    return log


def _forward(tmp_path) -> ray_access.PortForward:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    kubeconfig.chmod(0o600)
    return ray_access.PortForward(str(kubeconfig), "verl", "head-svc", 8265, 10.0)


def test_an_old_kubectl_is_refused_before_any_port_forward(fake_kubectl, monkeypatch, tmp_path):
    """kubectl v1.30 speaks SPDY only: the port-forward is never started, and the message names
    the client's version, the minimum and how to get it."""
    monkeypatch.setenv("FAKE_KUBECTL_VERSION", "v1.30.4")
    forward = _forward(tmp_path)
    with pytest.raises(ray_access.KubectlTooOld) as refused:
        forward.address()
    message = str(refused.value)
    assert "kubectl v1.30.4 is older than 1.31" in message
    assert "gcloud components install kubectl" in message
    assert "verl-gke:job.dashboardAddress" in message
    assert fake_kubectl.read_text() == ""  # no port-forward was run


def test_a_current_kubectl_port_forwards_and_is_asked_once(fake_kubectl, monkeypatch, tmp_path):
    """kubectl 1.31 passes; the check runs once per process, not once per port-forward."""
    monkeypatch.setenv("FAKE_KUBECTL_VERSION", "v1.31.0")
    forward = _forward(tmp_path)
    try:
        assert forward.address().startswith("http://127.0.0.1:")
    finally:
        forward.close()
    [run] = [json.loads(line) for line in fake_kubectl.read_text().splitlines()]
    assert "port-forward" in run["argv"]
    monkeypatch.setenv("FAKE_KUBECTL_VERSION", "v1.29.0")
    assert ray_access.require_kubectl() == "v1.31.0"


def test_a_kubectl_whose_version_cannot_be_read_is_refused_with_the_minimum(monkeypatch, tmp_path):
    """An answer that is not kubectl's JSON (a wrapper script, a broken install) says what the
    port-forward needs rather than guessing."""
    fake = tmp_path / "bin"
    fake.mkdir()
    script = fake / "kubectl"
    script.write_text("#!/bin/sh\necho 'Client Version: something'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(ray_access, "_kubectl_checked", None)
    with pytest.raises(ray_access.RayAccessError, match=r"needs kubectl 1\.31 or newer"):
        ray_access.require_kubectl()
