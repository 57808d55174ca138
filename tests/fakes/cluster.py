"""The supervisor's view of Kubernetes (supervisor.Cluster) kept in files, for tests.

`<kind>-<name>.json` in one directory: the state ConfigMap and the RayCluster. The fake kubectl
(tests/fakes/kubectl) reads and patches the same files, so what the supervisor writes here is
what the job's provider reads on refresh, as both would through the API server.
"""

from __future__ import annotations

import json
import os
import urllib.error
from pathlib import Path
from typing import Any

from components.supervisor.protocol import MARK_KEY, RECORD_KEY
from components.supervisor.supervisor import check_suspended, parse_state


class FileCluster:
    def __init__(self, directory: Path, state: str, ray_cluster: str) -> None:
        self.directory = directory
        self.state_path = directory / f"configmap-{state}.json"
        self.cluster_path = directory / f"raycluster-{ray_cluster}.json"
        directory.mkdir(parents=True, exist_ok=True)
        # What Pulumi creates: an empty state ConfigMap and a ready RayCluster without suspend.
        self.state_path.write_text(json.dumps({"metadata": {"name": state,
                                                            "resourceVersion": "1"}}))
        self.cluster_path.write_text(json.dumps(
            {"metadata": {"name": ray_cluster}, "spec": {}, "status": {"state": "ready"}}))
        self.suspends = 0

    def state(self) -> dict[str, Any]:
        """The ConfigMap's data, as supervisor.InCluster.state reads it (a GET of the object);
        a ConfigMap that is gone fails as the API server's 404 does (an OSError there)."""
        if not self.state_path.exists():
            raise FileNotFoundError(f"{self.state_path.name}: NotFound")
        obj = json.loads(self.state_path.read_text())
        return {**parse_state(obj.get("data") or {}),
                "version": obj.get("metadata", {}).get("resourceVersion")}

    def record(self) -> dict[str, Any] | None:
        return self.state()[RECORD_KEY]

    def save(self, record: dict[str, Any], version: str | None = None) -> None:
        """A merge patch of the record key alone (supervisor.InCluster.save); with `version`,
        conditional as the API server makes it: 409 Conflict when the stored resourceVersion
        differs (k8s.io/apiserver pkg/registry/generic/registry/store.go Update)."""
        obj = json.loads(self.state_path.read_text())
        if version is not None and obj.get("metadata", {}).get("resourceVersion") != version:
            raise urllib.error.HTTPError(str(self.state_path), 409, "Conflict", None, None)
        obj.setdefault("data", {})[RECORD_KEY] = json.dumps(record)
        self._write(obj)

    def mark(self, mark: dict[str, Any]) -> None:
        """What the provider writes (kube.ClusterState.write_mark), for tests that stage it."""
        obj = json.loads(self.state_path.read_text())
        obj.setdefault("data", {})[MARK_KEY] = json.dumps(mark)
        self._write(obj)

    def _write(self, obj: dict[str, Any]) -> None:
        """Every write moves metadata.resourceVersion, as the API server's does (an opaque
        string; here a counter)."""
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        _replace(self.state_path, obj)

    def suspend(self) -> None:
        """A merge patch of spec.suspend; the reply is the stored object, checked as
        supervisor.InCluster.suspend checks it."""
        self.suspends += 1
        obj = json.loads(self.cluster_path.read_text())
        obj["spec"]["suspend"] = True
        obj["status"]["state"] = "suspended"
        _replace(self.cluster_path, obj)
        check_suspended(obj)

    def resume(self) -> None:
        obj = json.loads(self.cluster_path.read_text())
        obj["spec"]["suspend"] = False
        obj["status"]["state"] = "ready"
        _replace(self.cluster_path, obj)

    def suspended(self) -> bool:
        return json.loads(self.cluster_path.read_text())["spec"].get("suspend") is True


def _replace(path: Path, obj: dict[str, Any]) -> None:
    """Write a whole object at once, as the API server stores one: a concurrent reader (the
    fake kubectl in the provider's process) sees the old or the new object, never half."""
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(obj))
    os.replace(partial, path)
