"""What the providers ask Kubernetes: the supervisor's state, and the RayCluster's suspend.

Through `kubectl` with the cluster's kubeconfig in a private temp file (mode 600) for one
provider call, as the port-forward does (ray_access.py). Only with the default access (a
kubeconfig): with `verl-gke:job.dashboardAddress` there is no cluster to ask, and none of this
applies.

The supervisor suspends the RayCluster after a run (components/supervisor/supervisor.py), which deletes
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
from typing import Any, Callable, Iterator

from components.supervisor.protocol import MARK_KEY, RECORD_KEY, SUBMITTED_KEY
from components.supervisor.supervisor_io import parse_state
from components.run.ray_access import KUBECTL, RayAccessError, RequestPolicy

_RESUME = json.dumps({"spec": {"suspend": False}})


class ClusterState:
    """The RayCluster and the supervisor's state ConfigMap of one stack."""

    def __init__(self, kubeconfig_path: str, access: dict[str, Any], policy: RequestPolicy):
        self._base = [KUBECTL, "--kubeconfig", kubeconfig_path, "-n", access["namespace"]]
        self.ray_cluster: str = access["ray_cluster"]
        self._state: str | None = access.get("state")
        self._policy = policy

    def record(self) -> dict[str, Any] | None:
        """The supervisor's record, None before its first tick (or without its ConfigMap)."""
        return self.state().get(RECORD_KEY)

    def mark(self) -> dict[str, Any] | None:
        """The provider's mark (protocol.MARK_KEY), None if never written."""
        return self.state().get(MARK_KEY)

    def write_submitted(self, run: str, attempt: int, preempted: int,
                        first_start: float | None) -> bool:
        """Record, before the POST, that the provider submits `attempt` of `run`, after
        `preempted` preemptions, the run having first started at `first_start`
        (protocol.SUBMITTED_KEY), as write_mark writes the mark."""
        return self._write(SUBMITTED_KEY, {"run": run, "attempt": attempt,
                                           "preempted": preempted, "first_start": first_start})

    def write_mark(self, mark: dict[str, Any]) -> bool:
        """Write the provider's mark into the supervisor's state (protocol.MARK_KEY)."""
        return self._write(MARK_KEY, mark)

    def _write(self, key: str, value: dict[str, Any]) -> bool:
        """One key of the supervisor's state, the provider's own: a JSON merge patch leaves the
        other keys (the supervisor's record) as they are. False without the state ConfigMap (none
        named, or gone)."""
        if not self._state:
            return False
        patch = json.dumps({"data": {key: json.dumps(value)}})
        done = self._kubectl("patch", "configmap", self._state, "--type", "merge", "-p", patch,
                             missing_ok=True)
        return done is not None

    def state(self) -> dict[str, Any]:
        """Every key of the supervisor's state, decoded from one read as the supervisor decodes
        it (None for a key not written yet)."""
        if not self._state:
            return {}
        found = self._kubectl("get", "configmap", self._state, "-o", "json", missing_ok=True)
        return parse_state((json.loads(found).get("data") or {}) if found else {})

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
    (no kubeconfig, or a resource registered without its RayCluster's name)."""
    if not access.get("kubeconfig") or not access.get("ray_cluster"):
        yield None
        return
    fd, path = tempfile.mkstemp(prefix="verl-gke-kubeconfig-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(access["kubeconfig"])
        yield ClusterState(path, access, policy)
    finally:
        os.unlink(path)


def gate(access: dict[str, Any], policy: RequestPolicy, *, resume: bool, timeout_s: float,
         say: Callable[[str], None]) -> bool:
    """The one gate in front of every provider call that talks to Ray (the GrpoJob, its export,
    the ClusterCheck): whether the RayCluster is suspended, i.e. has no head to talk to.

    A suspended cluster's head Service has no pod behind it (KubeRay v1.7.0
    raycluster_controller.go:360-370 keeps the Service, :940-957 deletes every pod), and `kubectl
    port-forward svc/...` waits for a pod that never comes (kubectl polymorphichelpers
    helpers.go GetPodList): nothing may port-forward to it. With `resume`, the cluster is brought
    back first and waited for until ready, and False is returned; without, True tells the caller
    that nothing runs there (a delete needs no Ray). False, too, without a cluster to ask.
    """
    with open_cluster(access, policy) as cluster:
        if cluster is None or not cluster.suspended():
            return False
        if not resume:
            return True
        say(f"{cluster.ray_cluster}: released after an earlier run; bringing the GPU workers "
            "back")
        cluster.resume(time.monotonic() + timeout_s)
        return False
