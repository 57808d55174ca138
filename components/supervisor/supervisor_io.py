"""The supervisor's I/O: Ray's Jobs REST API and the Kubernetes API, with the standard library.

Shipped with supervisor.py and protocol.py into the supervisor's pod (components/run/
supervision.py CODE): RayHttp makes the same Ray calls as ray_access.RayJobs, InCluster the
merge patches the pod's service account may make (its state ConfigMap, the RayCluster's
spec.suspend). supervisor.py holds what a tick decides.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol

from components.supervisor import protocol

_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class RayHttp:
    """Ray's Jobs REST API for one submission id (the same calls as ray_access.RayJobs)."""

    def __init__(self, base_url: str, submission_id: str, timeout_s: float = 15.0) -> None:
        self.base = base_url.rstrip("/")
        self.submission_id = submission_id
        self.timeout_s = timeout_s

    def info(self) -> dict[str, Any] | None:
        status, body = self._call("GET", f"/api/jobs/{self.submission_id}")
        return None if status == 404 else json.loads(body)

    def submit(self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
               resources: dict[str, Any] | None = None) -> bool:
        body = {"entrypoint": entrypoint, "submission_id": self.submission_id,
                "runtime_env": runtime_env, "metadata": metadata, **(resources or {})}
        status, text = self._call("POST", "/api/jobs/", body)
        if status == 500 and "already exists" in text:
            return False
        self._check(status, text, "submitting")
        return True

    def stop(self) -> None:
        self._call("POST", f"/api/jobs/{self.submission_id}/stop")

    def log_tail(self, lines: int, info: dict[str, Any] | None = None) -> str:
        node = (info or self.info() or {}).get("driver_node_id")
        if not node:
            return ""
        query = urllib.parse.urlencode(
            {"submission_id": self.submission_id, "node_id": node, "lines": lines})
        status, text = self._call("GET", f"/api/v0/logs/file?{query}")
        return text if status == 200 else ""

    def list_jobs(self) -> list[dict[str, Any]]:
        """Every record (GET /api/jobs/), asked again after a 500 (see RayJobs.list_jobs)."""
        for _ in range(3):
            status, text = self._call("GET", "/api/jobs/")
            if status != 500:
                break
            time.sleep(0.5)
        self._check(status, text, "listing jobs")
        return json.loads(text)

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the GCS knows, the dead ones with their end (protocol.NODES_QUERY)."""
        return self._rows(*protocol.NODES_QUERY, "listing nodes")

    def actors_of(self, job_id: str) -> list[dict[str, Any]]:
        """The actors of Ray job `job_id`, the dead ones included (protocol.actors_query)."""
        return self._rows(*protocol.actors_query(job_id), "listing actors")

    def _rows(self, path: str, params: dict[str, Any], action: str) -> list[dict[str, Any]]:
        status, text = self._call("GET", f"{path}?{urllib.parse.urlencode(params)}")
        self._check(status, text, action)
        return protocol.state_rows(json.loads(text))

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return reply.status, reply.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def _check(self, status: int, text: str, action: str) -> None:
        if status != 200:
            raise RuntimeError(f"{self.submission_id}: {action} answered HTTP {status}: "
                               f"{text.strip()[-300:]}")


class Cluster(Protocol):
    """Where the supervisor keeps its record, and the RayCluster it may suspend."""

    def state(self) -> dict[str, Any]:
        """The state ConfigMap's data, parsed: {RECORD_KEY: ..., MARK_KEY: ...} (None if unset),
        and its "version" (metadata.resourceVersion)."""
        ...

    def save(self, record: dict[str, Any], version: str | None = None) -> None:
        """Write the record; with `version`, only if the ConfigMap is still at that version
        (else an error: someone, i.e. the provider, wrote in between)."""
        ...

    def suspend(self) -> None: ...


class InCluster:
    """The Kubernetes API with the pod's service account (merge patches only)."""

    def __init__(self, namespace: str, state: str, ray_cluster: str) -> None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self._api = f"https://{host}:{port}"
        self._state = f"/api/v1/namespaces/{namespace}/configmaps/{state}"
        self._cluster = f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{ray_cluster}"
        with open(f"{_SERVICE_ACCOUNT}/token") as file:
            self._token = file.read().strip()
        self._tls = ssl.create_default_context(cafile=f"{_SERVICE_ACCOUNT}/ca.crt")

    def state(self) -> dict[str, Any]:
        found = self._call("GET", self._state)
        return {**parse_state(found.get("data") or {}),
                "version": (found.get("metadata") or {}).get("resourceVersion")}

    def save(self, record: dict[str, Any], version: str | None = None) -> None:
        # Only the record key: the provider's mark (protocol.MARK_KEY) is another key of the
        # same ConfigMap, which a JSON merge patch leaves as it is (RFC 7386). A resourceVersion
        # in the patched object makes the write conditional: the API server answers 409
        # Conflict when the stored object has another one (k8s.io/apiserver
        # pkg/registry/generic/registry/store.go Update, OptimisticLockErrorMsg), which
        # urllib raises as an HTTPError (an OSError): the tick ends, the next one looks again.
        body: dict[str, Any] = {"data": {protocol.RECORD_KEY: json.dumps(record)}}
        if version is not None:
            body["metadata"] = {"resourceVersion": version}
        self._call("PATCH", self._state, body)

    def suspend(self) -> None:
        # spec.suspend only: a field Pulumi's manifest never sets, so no apply conflict; never
        # a worker group's replicas, which would take the whole atomic workerGroupSpecs list
        # from Pulumi (KUBERAY-RAYJOB-REVIEW.md rows 11 and 15). The PATCH answers the object
        # as stored: a CRD without the field (an old KubeRay) prunes it silently, so it must
        # read back true, or the GPUs were not released.
        stored = self._call("PATCH", self._cluster, {"spec": {"suspend": True}})
        check_suspended(stored)

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self._api + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self._token}",
                     "Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(request, timeout=30, context=self._tls) as reply:
            return json.loads(reply.read())


def parse_state(data: dict[str, str]) -> dict[str, Any]:
    """The state ConfigMap's data keys, decoded."""
    return {key: json.loads(data[key]) if data.get(key) else None
            for key in (protocol.RECORD_KEY, protocol.MARK_KEY, protocol.SUBMITTED_KEY)}


def check_suspended(stored: dict[str, Any]) -> None:
    if (stored.get("spec") or {}).get("suspend") is not True:
        name = (stored.get("metadata") or {}).get("name", "the RayCluster")
        raise RuntimeError(
            f"{name}: spec.suspend did not read back true after the PATCH (the RayCluster CRD "
            "may lack the field: KubeRay older than 1.2); the GPUs were not released")
