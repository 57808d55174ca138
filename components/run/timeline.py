"""When a real `up` reached each milestone of the critical-path model, read from Kubernetes.

tools/critical_path.py splits `pulumi up` into phases, most of them assumptions; each phase ends
at one of MILESTONES. The job's provider calls `gather` once it has followed the run as far as
`waitFor` (job_provider.py), and the job's `timeline` output keeps what it found, so that
`python -m tools.critical_path --measured <outputs>` can replace the model's figures by the
times this `up` took (docs/cost.md, "Expected timings").

Each milestone is a timestamp Kubernetes (or Ray) already keeps; nothing here waits or polls:
- clusterCreated: the `kube-system` namespace's creationTimestamp, written when the control
  plane first serves (the cluster's create then still boots and deletes its default pool);
- gpuNodesRegistered: the latest creationTimestamp of the nodes the Ray workers run on (a
  Node object is created when its kubelet registers);
- gpusAllocatable: the latest PodScheduled time of the Ray workers: a worker asks for
  nvidia.com/gpu, so the scheduler placed it once its node's GPUs were allocatable (the driver
  installed, the device plugin advertising them). Exact while the worker was pending, as on a
  fresh `up` (the RayCluster exists before its nodes' GPUs do); an upper bound otherwise;
- imagePulled: the latest start of a Ray pod's Ray container (containerStatuses startedAt): the
  image was on the node then (the pull's own end is in the pod's `Pulled` event, which the API
  server keeps only an hour);
- rayClusterReady: KubeRay's `status.stateTransitionTimes.ready` (kuberay v1.7.0), else the
  `RayClusterProvisioned` condition's lastTransitionTime;
- jobStarted and firstStep: Ray's start_time of the attempt followed and that plus the
  provider's firstStepSeconds (job_outputs.py).

A timestamp that cannot be read is None, and a cluster that cannot be asked at all (no
kubeconfig: `job.dashboardAddress`; kubectl missing or failing) gives None for the whole
timeline: reading it never fails `up`. Only timestamps are kept: no names, no log lines.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pulumi

from components.run.kube import ClusterState, open_cluster
from components.run.ray_access import RayAccessError, RequestPolicy

CLUSTER_CREATED = "clusterCreated"
NODES_REGISTERED = "gpuNodesRegistered"
GPUS_ALLOCATABLE = "gpusAllocatable"
IMAGE_PULLED = "imagePulled"
RAY_CLUSTER_READY = "rayClusterReady"
JOB_STARTED = "jobStarted"
FIRST_STEP = "firstStep"
# In the order `up` reaches them (tools/critical_path.py MILESTONES is held to this).
MILESTONES = (CLUSTER_CREATED, NODES_REGISTERED, GPUS_ALLOCATABLE, IMAGE_PULLED,
              RAY_CLUSTER_READY, JOB_STARTED, FIRST_STEP)
# KubeRay's labels on the pods of a RayCluster (kuberay ray-operator/controllers/ray/utils
# constant.go: RayClusterLabelKey, RayNodeTypeLabelKey).
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"


def gather(access: dict[str, Any], policy: RequestPolicy,
           observed: dict[str, Any]) -> dict[str, str | None] | None:
    """The timeline of this `up` (MILESTONES -> ISO 8601 UTC, or None each), or None when the
    cluster cannot be asked. `observed`: the provider's outputs so far (start_time,
    first_step_s)."""
    try:
        with open_cluster(access, policy) as cluster:
            if cluster is None:
                return None
            found = _from_cluster(cluster)
    except (RayAccessError, OSError, ValueError) as error:
        pulumi.log.warn(f"timeline not recorded (`up` goes on): {error}")
        return None
    started = _parse(observed.get("start_time"))
    first_step_s = observed.get("first_step_s")
    found[JOB_STARTED] = _iso(started)
    found[FIRST_STEP] = (_iso(started + datetime.timedelta(seconds=float(first_step_s)))
                         if started and first_step_s is not None else None)
    return {key: found.get(key) for key in MILESTONES}


def _from_cluster(cluster: ClusterState) -> dict[str, str | None]:
    namespace = _get(cluster, "namespace", "kube-system")
    ray = _get(cluster, "raycluster", cluster.ray_cluster)
    pods = _items(_get(cluster, "pod", None, f"{CLUSTER_LABEL}={cluster.ray_cluster}"))
    workers = [p for p in pods if _labels(p).get(NODE_TYPE_LABEL) == "worker"]
    node_names = {(p.get("spec") or {}).get("nodeName") for p in workers} - {None}
    # One List of the nodes, not a call per worker's node (32 nodes: 32 kubectl round trips).
    nodes = [n for n in _items(_get(cluster, "node", None)) if _meta(n).get("name") in node_names]
    return {
        CLUSTER_CREATED: _iso(_parse(_meta(namespace).get("creationTimestamp"))),
        NODES_REGISTERED: _latest(_meta(n).get("creationTimestamp") for n in nodes),
        GPUS_ALLOCATABLE: _latest(_condition(p, "PodScheduled") for p in workers),
        IMAGE_PULLED: _latest(_ray_container_started(p) for p in pods),
        RAY_CLUSTER_READY: _ray_ready(ray),
    }


def _get(cluster: ClusterState, kind: str, name: str | None,
         selector: str | None = None) -> dict[str, Any] | None:
    """One object (or, with `selector`, a List) as JSON; None when it does not exist."""
    args = ["get", kind, *([name] if name else []), *(["-l", selector] if selector else []),
            "-o", "json"]
    # kube.ClusterState's one way to call kubectl: the stack's kubeconfig and namespace.
    found = cluster._kubectl(*args, missing_ok=True)  # noqa: SLF001
    return json.loads(found) if found else None


def _items(found: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((found or {}).get("items") or [])


def _meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return _meta(obj).get("labels") or {}


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition.get("lastTransitionTime")
    return None


def _ray_container_started(pod: dict[str, Any]) -> str | None:
    """When the pod's Ray container (KubeRay's first container) first started."""
    containers = (pod.get("spec") or {}).get("containers") or []
    name = containers[0].get("name") if containers else None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != name:
            continue
        starts = [(status.get(key) or {}).get(state, {}).get("startedAt")
                  for key in ("lastState", "state") for state in ("terminated", "running")]
        return _earliest(starts)
    return None


def _ray_ready(ray: dict[str, Any] | None) -> str | None:
    status = (ray or {}).get("status") or {}
    ready = (status.get("stateTransitionTimes") or {}).get("ready")
    return _iso(_parse(ready or _condition(ray or {}, "RayClusterProvisioned")))


def _parse(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _iso(moment: datetime.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def _latest(texts) -> str | None:
    found = [m for m in map(_parse, texts) if m is not None]
    return _iso(max(found)) if found else None


def _earliest(texts) -> str | None:
    found = [m for m in map(_parse, texts) if m is not None]
    return _iso(min(found)) if found else None
