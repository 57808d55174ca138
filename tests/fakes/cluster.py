"""The Kubernetes objects the supervisor and the provider share, kept in files, for tests.

`<kind>-<name>.json` in one directory: the state ConfigMap and the RayCluster. The fake kubectl
(tests/fakes/kubectl, the provider's side, in its own process) reads and patches the same files
through FileStore, so what the supervisor writes here is what the job's provider reads on
refresh, as both would through the API server. Every rule (the merge patch, resourceVersion and
409 Conflict, KubeRay's status.state after a suspend) is the Kubernetes model's,
tests/models/kuberay.py, applied at once (a hand world: nothing happens on its own).
"""

from __future__ import annotations

import json
import os
import urllib.error
from pathlib import Path
from typing import Any

from components.supervisor.protocol import MARK_KEY, RECORD_KEY
from components.supervisor.supervisor import check_suspended, parse_state
from tests.models.kuberay import Conflict, patched, settle


class FileStore:
    """The API server's objects as files: each read and write whole (os.replace)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def path(self, kind: str, name: str) -> Path:
        return self.directory / f"{kind}-{name}.json"

    def read(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(kind, name).read_text())
        except FileNotFoundError:
            return None

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """Every object of `kind`, by name (what a List holds before its selector)."""
        return [json.loads(path.read_text())
                for path in sorted(self.directory.glob(f"{kind}-*.json"))]

    def write(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge PATCH (tests/models/kuberay.py patched, settle); Conflict on a stale
        resourceVersion; FileNotFoundError when the object is gone."""
        obj = self.read(kind, name)
        if obj is None:
            raise FileNotFoundError(f"{kind}-{name}.json: NotFound")
        version = str(int((obj.get("metadata") or {}).get("resourceVersion") or 0) + 1)
        new = settle(kind, patched(obj, patch, version))
        self.put(kind, name, new)
        return new

    def put(self, kind: str, name: str, obj: dict[str, Any]) -> None:
        """Write a whole object at once, as the API server stores one: a concurrent reader
        (the fake kubectl in the provider's process) sees the old or the new object, never
        half."""
        path = self.path(kind, name)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(obj))
        os.replace(partial, path)


class FileCluster:
    """The supervisor's view (supervisor.Cluster) of those files, and the tests' hand on them."""

    def __init__(self, directory: Path, state: str, ray_cluster: str) -> None:
        self.directory = directory
        self.store = FileStore(directory)
        self.state_name, self.cluster_name = state, ray_cluster
        self.state_path = self.store.path("configmap", state)
        self.cluster_path = self.store.path("raycluster", ray_cluster)
        directory.mkdir(parents=True, exist_ok=True)
        # What Pulumi creates: an empty state ConfigMap and a ready RayCluster without suspend.
        self.store.put("configmap", state, {"metadata": {"name": state, "resourceVersion": "1"}})
        self.store.put("raycluster", ray_cluster, {"metadata": {"name": ray_cluster},
                                                   "spec": {}, "status": {"state": "ready"}})
        self.suspends = 0

    def state(self) -> dict[str, Any]:
        """The ConfigMap's data, as supervisor.InCluster.state reads it (a GET of the object);
        a ConfigMap that is gone fails as the API server's 404 does (an OSError there)."""
        obj = self.store.read("configmap", self.state_name)
        if obj is None:
            raise FileNotFoundError(f"{self.state_path.name}: NotFound")
        return {**parse_state(obj.get("data") or {}),
                "version": obj.get("metadata", {}).get("resourceVersion")}

    def record(self) -> dict[str, Any] | None:
        return self.state()[RECORD_KEY]

    def save(self, record: dict[str, Any], version: str | None = None) -> None:
        """A merge patch of the record key alone (supervisor.InCluster.save); with `version`,
        conditional: 409 Conflict when the stored resourceVersion differs."""
        patch: dict[str, Any] = {"data": {RECORD_KEY: json.dumps(record)}}
        if version is not None:
            patch["metadata"] = {"resourceVersion": version}
        try:
            self.store.write("configmap", self.state_name, patch)
        except Conflict:
            raise urllib.error.HTTPError(str(self.state_path), 409, "Conflict", None, None)

    def mark(self, mark: dict[str, Any]) -> None:
        """What the provider writes (kube.ClusterState.write_mark), for tests that stage it."""
        self.store.write("configmap", self.state_name, {"data": {MARK_KEY: json.dumps(mark)}})

    def suspend(self) -> None:
        """A merge patch of spec.suspend; the reply is the stored object, checked as
        supervisor.InCluster.suspend checks it."""
        self.suspends += 1
        check_suspended(self.store.write("raycluster", self.cluster_name,
                                         {"spec": {"suspend": True}}))

    def resume(self) -> None:
        self.store.write("raycluster", self.cluster_name, {"spec": {"suspend": False}})

    def suspended(self) -> bool:
        obj = self.store.read("raycluster", self.cluster_name) or {}
        return (obj.get("spec") or {}).get("suspend") is True
