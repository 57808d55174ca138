"""KubeRay v1.7.0's RayCluster and the Kubernetes objects the provider and the supervisor share.

Cited from ray-project/kuberay tag v1.7.0, `ray-operator/controllers/ray/raycluster_controller.go`:
- every reconcile pass reconciles the head Service before the pods (:359-370), so the Service
  outlives a suspend;
- `spec.suspend: true` deletes every pod, the head included (:940-957), and `.status.state`
  becomes `suspended` once no pod is left (:2114-2116);
- `spec.suspend: false` clears the Suspended condition (:2084-2092) and pods are created on the
  next pass (:958-960 returns early only while suspended); `.status.state` is `ready` only when
  the head and every worker run (:2016-2020).
A Service with no pod behind it: `kubectl port-forward svc/...` resolves it to a pod
(kubernetes `staging/src/k8s.io/kubectl/pkg/polymorphichelpers/helpers.go` GetPodList, which
watches until a pod runs or `--pod-running-timeout`, 1m by default, passes), then fails.
A head container restart (OOM, eviction, node repair) takes the GCS and its job table with it
(ray_jobs.py) and the workers' raylets exit with it; KubeRay restarts them.
A GPU worker pod lost with its node (a spot VM reclaimed): every reconcile pass creates the
worker pods a group is missing (:1167 `diff := numExpectedWorkerPods - len(runningPods.Items)`,
:1183-1214 createWorkerPod), and its raylet joins the head as a new Ray node; `.status.state`
stays `ready` meanwhile (:2016-2020 only ever sets Ready there).
"""

from __future__ import annotations

import json
from typing import Any

POD_RUNNING_TIMEOUT_S = 60.0  # kubectl port-forward --pod-running-timeout default
# What `kubectl version --client -o json` prints (a clientVersion of k8s.io/apimachinery's
# version.Info, kubernetes staging/src/k8s.io/kubectl/pkg/cmd/version/version.go), for a client
# of the release the program needs at least (ray_access.KUBECTL_MINIMUM).
KUBECTL_VERSION = {"clientVersion": {"major": "1", "minor": "31", "gitVersion": "v1.31.0"},
                   "kustomizeVersion": "v5.4.2"}
READY_S = 60.0  # from pods created to every pod Running (GPU nodes already there): an estimate
HEAD_RESTART_S = 20.0  # a container restart of the head: an estimate
WORKERS_RESTART_S = 30.0


class SimKube:
    def __init__(self, world: Any, namespace: str, ray_cluster: str, service: str) -> None:
        self.world = world
        self.namespace, self.name, self.service = namespace, ray_cluster, service
        self.cluster_exists = True
        self.suspend: bool | None = None
        self.state = "ready"
        self.head_up = True
        self.workers_up = True
        self.configmaps: dict[str, dict[str, str]] = {}
        # metadata.resourceVersion: one counter for every object, moved by every write; a
        # patch that names another version is refused with 409 Conflict (k8s.io/apiserver
        # pkg/registry/generic/registry/store.go Update, OptimisticLockErrorMsg).
        self.revision = 1
        self.versions: dict[str, int] = {}
        self.generation = 0  # bumps at every pod deletion or restart, to drop stale events
        self.suspends: list[tuple[float, Any]] = []  # (time, actor) of each suspend patch

    # --- KubeRay -------------------------------------------------------------------------
    def create_configmap(self, name: str) -> None:
        self.configmaps[name] = {}
        self._written(f"cm/{name}")

    def _written(self, key: str) -> None:
        self.revision += 1
        self.versions[key] = self.revision

    def conflict(self, key: str, patch: dict[str, Any]) -> bool:
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        return wanted is not None and str(wanted) != str(self.versions.get(key, 1))

    def patch_cluster(self, patch: dict[str, Any]) -> dict[str, Any]:
        self._written("raycluster")
        suspend = (patch.get("spec") or {}).get("suspend")
        if suspend is not None and suspend != self.suspend:
            self.suspend = suspend
            if suspend:
                self.suspends.append((self.world.clock.now, self.world.actor))
                self.world.observe_suspend()
                self._delete_pods()
                self.state = "suspended"  # :2114-2116, no pod left
            else:
                self._create_pods()
        return self.cluster_object()

    def _delete_pods(self) -> None:
        self.generation += 1
        self.head_up = self.workers_up = False
        self.world.ray.lose_head()
        self.world.forwards_lost()

    def _create_pods(self) -> None:
        self.generation += 1
        generation = self.generation
        self.state = "suspended" if self.suspend else ""

        def ready() -> None:
            if generation == self.generation and not self.suspend:
                self.head_up = self.workers_up = True
                self.world.ray.head_back()
                self.world.ray.workers_back()
                self.state = "ready"
        self.world.schedule(READY_S, ready)

    def restart_head(self) -> None:
        """The head container restarts; the workers' raylets follow."""
        if not self.head_up:
            return
        self.world.observer.head_lost()
        self._delete_pods()
        generation = self.generation

        def head() -> None:
            if generation == self.generation:
                self.head_up = True
                self.world.ray.head_back()

        def workers() -> None:
            if generation == self.generation:
                self.workers_up = True
                self.world.ray.workers_back()
        self.world.schedule(HEAD_RESTART_S, head)
        self.world.schedule(WORKERS_RESTART_S, workers)

    def lose_worker(self, dead_after_s: float, back_after_s: float) -> None:
        """The GPU worker's pod is gone with its VM; KubeRay's replacement runs `back_after_s`
        later (a new VM, the image pulled: an estimate drawn by the world)."""
        if not (self.head_up and self.workers_up):
            return
        self.workers_up = False
        self.world.observer.worker_lost()
        self.world.ray.worker_lost(dead_after_s)
        generation = self.generation

        def back() -> None:
            if generation == self.generation and self.head_up:
                self.workers_up = True
                self.world.ray.workers_back()
        self.world.schedule(back_after_s, back)

    def recreate(self) -> None:
        self.cluster_exists, self.suspend, self.state = True, None, "ready"
        self.head_up = self.workers_up = True
        self.world.ray.head_back()

    def cluster_object(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"headGroupSpec": {}, "workerGroupSpecs": []}
        if self.suspend is not None:
            spec["suspend"] = self.suspend
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": str(self.versions.get("raycluster", 1))},
                "spec": spec, "status": {"state": self.state} if self.state else {}}

    def configmap_object(self, name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.namespace,
                             "resourceVersion": str(self.versions.get(f"cm/{name}", 1))},
                "data": dict(self.configmaps[name])}

    # --- kubectl (the provider's seam) -------------------------------------------------------
    def kubectl(self, argv: list[str]) -> tuple[int, str, str]:
        """`kubectl --kubeconfig <f> -n <ns> get|patch ...`, and `kubectl version --client -o
        json`, which the provider asks once before its first port-forward
        (ray_access.require_kubectl): (exit code, stdout, stderr)."""
        if argv[1:2] == ["version"]:
            return 0, json.dumps(KUBECTL_VERSION), ""
        verb = next((a for a in argv if a in ("get", "patch", "delete", "apply", "create")),
                    None)
        if verb not in ("get", "patch"):
            raise NotImplementedError(f"the simulation has no kubectl {verb}: {argv}")
        kind, name = argv[argv.index(verb) + 1], argv[argv.index(verb) + 2]
        found = self._object(kind, name)
        if found is None:
            return 1, "", f'Error from server (NotFound): {kind}s "{name}" not found\n'
        if verb == "patch":
            patch = json.loads(argv[argv.index("-p") + 1])
            key = "raycluster" if kind == "raycluster" else f"cm/{name}"
            if self.conflict(key, patch):
                return 1, "", (f'Error from server (Conflict): Operation cannot be fulfilled on '
                               f'{kind}s "{name}": the object has been modified; please apply '
                               "your changes to the latest version and try again\n")
            if kind == "raycluster":
                self.patch_cluster(patch)
            else:
                self._patch_configmap(name, patch)
            return 0, f"{kind}.{'ray.io' if kind == 'raycluster' else ''}/{name} patched\n", ""
        output = argv[argv.index("-o") + 1] if "-o" in argv else "json"
        obj = self._object(kind, name)
        if output == "json":
            return 0, json.dumps(obj), ""
        value: Any = obj
        for part in output.split("{.", 1)[1].rstrip("}").split("."):
            value = value.get(part, "") if isinstance(value, dict) else ""
        # kubectl's jsonpath prints booleans as true/false, missing fields as nothing.
        return 0, (json.dumps(value) if isinstance(value, bool) else str(value)), ""

    def _object(self, kind: str, name: str) -> dict[str, Any] | None:
        if kind in ("raycluster", "rayclusters", "rayclusters.ray.io"):
            return self.cluster_object() if self.cluster_exists and name == self.name else None
        if kind in ("configmap", "configmaps", "cm"):
            return self.configmap_object(name) if name in self.configmaps else None
        return None

    def _patch_configmap(self, name: str, patch: dict[str, Any]) -> None:
        self._written(f"cm/{name}")
        for key, value in (patch.get("data") or {}).items():
            if value is None:
                self.configmaps[name].pop(key, None)
            else:
                self.configmaps[name][key] = value

    # --- the API server over HTTPS (the supervisor's seam) -------------------------------------
    def api(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"] and parts[4] == "configmaps":
            name = parts[5]
            if name not in self.configmaps:
                return 404, _not_found("configmaps", name)
            if method == "PATCH":
                patch = json.loads(body or b"{}")
                if self.conflict(f"cm/{name}", patch):
                    return 409, _conflict("configmaps", name)
                self._patch_configmap(name, patch)
            return 200, self.configmap_object(name)
        if parts[:3] == ["apis", "ray.io", "v1"] and parts[5] == "rayclusters":
            if not self.cluster_exists or parts[6] != self.name:
                return 404, _not_found("rayclusters.ray.io", parts[6])
            if method == "PATCH":
                patch = json.loads(body or b"{}")
                if self.conflict("raycluster", patch):
                    return 409, _conflict("rayclusters.ray.io", parts[6])
                return 200, self.patch_cluster(patch)
            return 200, self.cluster_object()
        return 404, _not_found("unknown", path)


def _not_found(kind: str, name: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "message": f'{kind} "{name}" not found', "code": 404}


def _conflict(kind: str, name: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
            "message": f'Operation cannot be fulfilled on {kind} "{name}": the object has been '
                       "modified; please apply your changes to the latest version and try "
                       "again", "code": 409}
