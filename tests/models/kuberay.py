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

The API server's rules for the objects the provider and the supervisor share (the state
ConfigMap, the RayCluster), kept once here for every front: this simulation's SimKube, and the
files tests/fakes/cluster.py (the supervisor's side) and tests/fakes/kubectl (the provider's
side, a separate process) keep for the tick-level and real-Ray tests:
- a `--type merge` PATCH is a JSON merge patch (RFC 7386: kubernetes/kubernetes staging/src/
  k8s.io/apiserver/pkg/endpoints/handlers/patch.go at 00f75347, jsonPatcher.applyJSPatch, `case
  types.MergePatchType: jsonpatch.MergePatch(versionedJS, p.patchBytes)`): objects merge key by
  key, null removes a key, anything else replaces;
- one that names a metadata.resourceVersion other than the stored one is refused with 409
  Conflict (k8s.io/apiserver pkg/registry/generic/registry/store.go Update,
  OptimisticLockErrorMsg), and every write moves resourceVersion (an opaque string);
- an object is stored and read whole: a reader sees the old or the new object, never half;
- `kubectl get -o jsonpath={.a.b}` prints a string as it is, a boolean as true/false, a missing
  field as nothing; a missing object is `Error from server (NotFound)` on stderr, exit 1.
In a hand world (the files' fronts), KubeRay's reaction to a patched spec.suspend happens at once
(`settle`): status.state `suspended` once no pod is left (:2114-2116), `ready` once every pod
runs (:2016-2020).
"""

from __future__ import annotations

import json
from typing import Any, Callable

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
        return kubectl_objects(argv, self._object, self._write)

    def _write(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        key = "raycluster" if kind == "raycluster" else f"cm/{name}"
        if self.conflict(key, patch):
            raise Conflict(self.versions.get(key, 1))
        if kind == "raycluster":
            self.patch_cluster(patch)
        else:
            self._patch_configmap(name, patch)

    def _object(self, kind: str, name: str) -> dict[str, Any] | None:
        if kind in ("raycluster", "rayclusters", "rayclusters.ray.io"):
            return self.cluster_object() if self.cluster_exists and name == self.name else None
        if kind in ("configmap", "configmaps", "cm"):
            return self.configmap_object(name) if name in self.configmaps else None
        return None

    def _patch_configmap(self, name: str, patch: dict[str, Any]) -> None:
        self._written(f"cm/{name}")
        merged = merge_patch({"data": self.configmaps[name]}, {"data": patch.get("data") or {}})
        self.configmaps[name] = merged.get("data") or {}

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


# --- The API server's objects, for every front ---------------------------------------------------
KINDS = {"raycluster": "raycluster", "rayclusters": "raycluster",
         "rayclusters.ray.io": "raycluster", "configmap": "configmap",
         "configmaps": "configmap", "cm": "configmap"}
RESOURCES = {"configmap": "configmaps", "raycluster": "rayclusters.ray.io"}
CONFLICT = ('Operation cannot be fulfilled on {resource} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again")


class Conflict(Exception):
    """409 Conflict: the patch named a resourceVersion that is no longer the stored one."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (the module's docstring)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def patched(obj: dict[str, Any], patch: dict[str, Any], version: str) -> dict[str, Any]:
    """The object a merge PATCH stores: Conflict when the patch names another resourceVersion,
    else the merge, at resourceVersion `version` (the store's next)."""
    wanted = (patch.get("metadata") or {}).get("resourceVersion")
    stored = (obj.get("metadata") or {}).get("resourceVersion")
    if wanted is not None and str(wanted) != str(stored):
        raise Conflict(stored)
    new = merge_patch(obj, patch)
    new.setdefault("metadata", {})["resourceVersion"] = version
    return new


def settle(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """KubeRay's reconcile of a RayCluster, settled at once (the hand worlds)."""
    if kind == "raycluster":
        suspended = (obj.get("spec") or {}).get("suspend") is True
        obj.setdefault("status", {})["state"] = "suspended" if suspended else "ready"
    return obj


def jsonpath(obj: dict[str, Any], output: str) -> str:
    """What `-o jsonpath={.a.b}` prints (the module's docstring)."""
    value: Any = obj
    for part in output.split("{.", 1)[1].rstrip("}").split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return json.dumps(value) if isinstance(value, bool) else str(value)


def forwarding(local_port: int, remote: str) -> list[str]:
    """What `kubectl port-forward svc/<name> :<port>` prints once it listens (kubectl's
    staging/src/k8s.io/client-go/tools/portforward/portforward.go getListener, "Forwarding from
    %s -> %d"), one line per address it binds."""
    return [f"Forwarding from 127.0.0.1:{local_port} -> {remote}",
            f"Forwarding from [::1]:{local_port} -> {remote}"]


def service_missing(name: str) -> str:
    """kubectl's error for a port-forward to a Service that does not exist."""
    return f'Error from server (NotFound): services "{name}" not found'


Read = Callable[[str, str], "dict[str, Any] | None"]
Write = Callable[[str, str, dict[str, Any]], None]
Objects = Callable[[str], "list[dict[str, Any]]"]


def selected(labels: dict[str, str], selector: str) -> bool:
    """An equality-based label selector as the API server applies it: every comma-separated
    term holds, `key=value` (or `key==value`) the label's value, a bare `key` its presence
    (kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/labels/selector.go, Parse)."""
    for term in filter(None, selector.split(",")):
        key, equals, value = term.partition("=")
        if (labels.get(key) != value.lstrip("=")) if equals else (key not in labels):
            return False
    return True


def kubectl_objects(argv: list[str], read: Read, write: Write,
                    objects: Objects = lambda kind: []) -> tuple[int, str, str]:
    """`kubectl ... get|patch <kind> <name> [-o json|jsonpath=...] [--type merge -p <json>]`
    over a store: `read(kind, name)` gives the object or None, `write(kind, name, patch)` applies
    a merge patch (raising Conflict); (exit code, stdout, stderr) as kubectl's. `kubectl get
    <kind> [-l <selector>] -o json` with no name answers a List of `objects(kind)` the selector
    matches (kubectl prints an empty List, not an error, when none does)."""
    verb = next((a for a in argv if a in ("get", "patch", "delete", "apply", "create")), None)
    if verb not in ("get", "patch"):
        raise NotImplementedError(f"the model has no kubectl {verb}: {argv}")
    given, name = argv[argv.index(verb) + 1], argv[argv.index(verb) + 2]
    kind = KINDS.get(given, given)
    if verb == "get" and name.startswith("-"):
        selector = argv[argv.index("-l") + 1] if "-l" in argv else ""
        items = [obj for obj in objects(kind)
                 if selected((obj.get("metadata") or {}).get("labels") or {}, selector)]
        return 0, json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), ""
    obj = read(kind, name)
    if obj is None:
        return 1, "", f'Error from server (NotFound): {given}s "{name}" not found\n'
    if verb == "patch":
        try:
            write(kind, name, json.loads(argv[argv.index("-p") + 1]))
        except Conflict:
            text = CONFLICT.format(resource=RESOURCES.get(kind, kind), name=name)
            return 1, "", f"Error from server (Conflict): {text}\n"
        group = ".ray.io" if kind == "raycluster" else ""
        return 0, f"{kind}{group}/{name} patched\n", ""
    output = argv[argv.index("-o") + 1] if "-o" in argv else "json"
    return 0, (json.dumps(obj) if output == "json" else jsonpath(obj, output)), ""


def _not_found(kind: str, name: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "message": f'{kind} "{name}" not found', "code": 404}


def _conflict(kind: str, name: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
            "message": CONFLICT.format(resource=kind, name=name), "code": 409}
