"""The supervisor's view of Kubernetes (supervisor.Cluster) kept in files, for tests.

`<kind>-<name>.json` in one directory: the state ConfigMap and the RayCluster. The fake kubectl
(tests/fakes/kubectl) reads and patches the same files, so what the supervisor writes here is
what the job's provider reads on refresh, as both would through the API server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.ray.protocol import RECORD_KEY


class FileCluster:
    def __init__(self, directory: Path, state: str, ray_cluster: str) -> None:
        self.directory = directory
        self.state_path = directory / f"configmap-{state}.json"
        self.cluster_path = directory / f"raycluster-{ray_cluster}.json"
        directory.mkdir(parents=True, exist_ok=True)
        # What Pulumi creates: an empty state ConfigMap and a ready RayCluster without suspend.
        self.state_path.write_text(json.dumps({"metadata": {"name": state}}))
        self.cluster_path.write_text(json.dumps(
            {"metadata": {"name": ray_cluster}, "spec": {}, "status": {"state": "ready"}}))
        self.suspends = 0

    def record(self) -> dict[str, Any] | None:
        data = json.loads(self.state_path.read_text()).get("data") or {}
        return json.loads(data[RECORD_KEY]) if RECORD_KEY in data else None

    def save(self, record: dict[str, Any]) -> None:
        obj = json.loads(self.state_path.read_text())
        obj.setdefault("data", {})[RECORD_KEY] = json.dumps(record)
        self.state_path.write_text(json.dumps(obj))

    def suspend(self) -> None:
        self.suspends += 1
        obj = json.loads(self.cluster_path.read_text())
        obj["spec"]["suspend"] = True
        obj["status"]["state"] = "suspended"
        self.cluster_path.write_text(json.dumps(obj))

    def suspended(self) -> bool:
        return json.loads(self.cluster_path.read_text())["spec"].get("suspend") is True
