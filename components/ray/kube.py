"""What the job's provider asks Kubernetes: the supervisor's record, and the RayCluster's suspend.

Through `kubectl` with the cluster's kubeconfig in a private temp file (mode 600) for one
provider call, as the port-forward does (ray_access.py). Only with the default access (a
kubeconfig): with `verl-gke:job.dashboardAddress` there is no cluster to ask, and none of this
applies.

The supervisor suspends the RayCluster after a run (components/ray/supervisor.py), which deletes
every Ray pod, the head and its job table included (kuberay v1.7.0 raycluster_controller.go
:940-964): from then on the supervisor's record is what is known about the run. Resuming is a
merge patch of `spec.suspend` alone, a field Pulumi's manifest never sets, so server-side apply
sees no conflict (KUBERAY-RAYJOB-REVIEW.md row 11); KubeRay then recreates the head and the
workers and reports `.status.state` ready (:2114-2116 sets "suspended" while it is not).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from typing import Any, Iterator

from components.ray.protocol import RECORD_KEY
from components.ray.ray_access import KUBECTL, RayAccessError, RequestPolicy

_RESUME = json.dumps({"spec": {"suspend": False}})


class ClusterState:
    """The RayCluster and the supervisor's state ConfigMap of one stack."""

    def __init__(self, kubeconfig_path: str, access: dict[str, Any], policy: RequestPolicy):
        self._base = [KUBECTL, "--kubeconfig", kubeconfig_path, "-n", access["namespace"]]
        self.ray_cluster: str = access["ray_cluster"]
        self._state: str = access["state"]
        self._policy = policy

    def record(self) -> dict[str, Any] | None:
        """The supervisor's record, None before its first tick (or without its ConfigMap)."""
        found = self._kubectl("get", "configmap", self._state, "-o", "json", missing_ok=True)
        if found is None:
            return None
        data = json.loads(found).get("data") or {}
        return json.loads(data[RECORD_KEY]) if RECORD_KEY in data else None

    def suspended(self) -> bool:
        found = self._kubectl("get", "raycluster", self.ray_cluster, "-o",
                              "jsonpath={.spec.suspend}", missing_ok=True)
        return (found or "").strip() == "true"

    def resume(self, deadline: float) -> None:
        """Unsuspend the RayCluster and wait until KubeRay reports it ready."""
        self._kubectl("patch", "raycluster", self.ray_cluster, "--type", "merge", "-p", _RESUME)
        while True:
            state = self._kubectl("get", "raycluster", self.ray_cluster, "-o",
                                  "jsonpath={.status.state}", missing_ok=True)
            if (state or "").strip() == "ready":
                return
            if time.monotonic() > deadline:
                raise RayAccessError(
                    f"RayCluster {self.ray_cluster} was resumed but is {state or 'not'} ready "
                    "at the deadline; check its pods (`kubectl get pods -l "
                    f"ray.io/cluster={self.ray_cluster}`), then run `pulumi up` again"
                )
            time.sleep(self._policy.poll_max_s)

    def _kubectl(self, *args: str, missing_ok: bool = False) -> str | None:
        try:
            done = subprocess.run(
                [*self._base, *args], capture_output=True, text=True,
                timeout=self._policy.forward_timeout_s, stdin=subprocess.DEVNULL,
            )
        except (FileNotFoundError, subprocess.TimeoutExpired) as error:
            raise RayAccessError(f"kubectl {' '.join(args[:3])}: {error}") from error
        if done.returncode != 0:
            if missing_ok and "(NotFound)" in done.stderr:
                return None
            raise RayAccessError(
                f"kubectl {' '.join(args[:3])} failed: {done.stderr.strip()[-300:]}"
            )
        return done.stdout


@contextlib.contextmanager
def open_cluster(access: dict[str, Any], policy: RequestPolicy) -> Iterator[ClusterState | None]:
    """The stack's ClusterState for one provider call, or None when there is no cluster to ask
    (a configured dashboard address, or a job registered without a supervisor)."""
    if not access.get("kubeconfig") or not access.get("ray_cluster") or not access.get("state"):
        yield None
        return
    fd, path = tempfile.mkstemp(prefix="verl-gke-kubeconfig-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(access["kubeconfig"])
        yield ClusterState(path, access, policy)
    finally:
        os.unlink(path)
