"""RunSupervisor: the Kubernetes objects that keep following the run after `pulumi up` returns.

A CronJob runs components/supervisor/supervisor.py every SUPERVISOR_PERIOD_MINUTES with
`concurrencyPolicy: Forbid` (one tick at a time, a long tick delays the next) and a Job
`backoffLimit: 0` (a failed tick is simply followed by the next). Its code (supervisor.py,
supervisor_end.py, what it does after the run, its I/O supervisor_io.py, and protocol.py, the
rules it shares with the provider) and the run's spec are in one ConfigMap; what it did is in a
second ConfigMap, under a key only it writes (the job's provider writes its mark under another,
protocol.MARK_KEY; Pulumi creates the ConfigMap empty and never reads its data back as a change).
Its service account may read and merge-patch the state ConfigMap and patch (not read) the one
RayCluster, in this namespace only (a Role, not a ClusterRole). It reaches the Ray dashboard
through the head Service, which the head's NetworkPolicy opens to pods of the namespace; nothing
is exposed outside it.

Why not KubeRay's RayJob: on an existing RayCluster (`clusterSelector`) it cannot retry
(rejected since 1.6.0), its deadline leaves the Ray job running, it never releases anything and
nothing in it detects a stall (KUBERAY-RAYJOB-REVIEW.md rows 2, 3, 5, 7, read at kuberay
v1.7.0); a RayJob that owns its cluster retries by recreating the whole RayCluster. So the
RayCluster stays Pulumi's and this supervisor is small and namespaced.

Its state ConfigMap is created before the GrpoJob and deleted after it (the job depends on it),
so the provider's notes (its mark, and each attempt it submits with the run's first start) are
kept from the run's first submission on: a create that fails, or a head that loses its job table
before the first tick, still leaves the budget and the deadline their count. Everything else is
created after the GrpoJob and deleted before it (depends_on), so `pulumi destroy` ends the
supervisor before the job is stopped; the protocol (protocol.py) makes a tick that overlaps the
stop harmless: the provider writes "ended" into the state before it stops the run, and a tick
reads it again right before any submission.

It does not create the RayCluster, the head's NetworkPolicy or the job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pulumi
import pulumi_kubernetes as k8s

from components.facts.layout import DASHBOARD_PORT
from components.options import child_options
from components.runspec.lifecycle import SUPERVISOR_PERIOD_MINUTES, RunLifecycle

_ROOT = Path(__file__).resolve().parent.parent.parent
# The files the supervisor's pod runs, as `python -m components.supervisor.supervisor` in /app,
# each at its path in the project (namespace packages: no __init__.py is needed): all of
# components/supervisor/ (the supervisor, what it does after the run, its I/O, the protocol, the
# run's state and the decision it shares with the provider) and the verl facts the protocol reads
# the job log with (tests/test_layout.py holds the list to the room). ConfigMap keys cannot hold
# a '/', so each is keyed by its file name.
CODE_PATHS = ("components/supervisor/protocol.py", "components/supervisor/supervisor.py",
              "components/supervisor/supervisor_end.py", "components/supervisor/supervisor_io.py",
              "components/supervisor/run_state.py", "components/supervisor/recovery.py",
              "components/facts/verl.py")
CODE = {path.rsplit("/", 1)[1]: _ROOT / path for path in CODE_PATHS}
APP_DIR = "/app"
SPEC_FILE = "run.json"
LABELS = {"app.kubernetes.io/name": "verl-gke-supervisor"}
# A tick's own limit: a stop waits for a terminal status (60 s); a submission waits for nothing
# (each attempt has its own id, protocol.py). A tick cut short is finished by the next one.
TICK_DEADLINE_S = 600


def state_name(name: str) -> str:
    """The state ConfigMap of the supervisor named `name`, which the job's provider reads."""
    return f"{name}-state"


@dataclass(frozen=True)
class RunSupervisorArgs:
    """What the supervisor follows and where."""

    run: RunLifecycle  # the run's lifecycle keys (ResolvedRun.lifecycle, verl-gke:job)
    spec: Mapping[str, Any]  # GrpoJob.supervision_spec: id, entrypoint, env, metadata, export
    namespace: str
    ray_cluster: str  # the RayCluster's name
    head_service: str  # <raycluster>-head-svc
    image: str  # pins.SUPERVISOR_IMAGE, mirrored
    node_selector: Mapping[str, str]  # the system pool; {} on Autopilot
    dashboard_port: int = DASHBOARD_PORT


def render_spec(name: str, args: RunSupervisorArgs) -> dict:
    """run.json: everything a tick needs, none of it secret (the job's inputs hold no secret;
    the trackers' keys reach the Ray pods from a Secret, never the job)."""
    return {
        **args.spec,
        "max_retries": args.run.max_retries,
        "max_preemptions": args.run.max_preemptions,
        "stall_s": args.run.stall_minutes * 60,
        "deadline_s": args.run.deadline_hours * 3600,
        "release_gpus": args.run.release_gpus,
        "dashboard": f"http://{args.head_service}.{args.namespace}.svc:{args.dashboard_port}",
        "namespace": args.namespace,
        "ray_cluster": args.ray_cluster,
        "state": state_name(name),
    }


def render_objects(name: str, args: RunSupervisorArgs) -> list[dict[str, Any]]:
    """Every object of the supervisor as plain data, in creation order."""
    meta = {"namespace": args.namespace, "labels": LABELS}
    code = {key: path.read_text() for key, path in CODE.items()}
    spec = render_spec(name, args)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, **meta},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"],
                 "resourceNames": [state_name(name)], "verbs": ["get", "patch"]},
                # patch only: the supervisor merge-patches spec.suspend and reads the reply,
                # never GETs the RayCluster (supervisor.InCluster.suspend).
                {"apiGroups": ["ray.io"], "resources": ["rayclusters"],
                 "resourceNames": [args.ray_cluster], "verbs": ["patch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": args.namespace}],
        },
        {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta},
            "data": {**code, SPEC_FILE: json.dumps(spec, indent=1, sort_keys=True)},
        },
        state_object(name, args.namespace),
        _cron_job(name, args, meta),
    ]


def state_object(name: str, namespace: str) -> dict[str, Any]:
    """The state ConfigMap, created empty: its data is the supervisor's and the provider's."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": state_name(name), "namespace": namespace, "labels": LABELS}}


def _cron_job(name: str, args: RunSupervisorArgs, meta: dict[str, Any]) -> dict[str, Any]:
    items = [{"key": path.rsplit("/", 1)[1], "path": path} for path in CODE_PATHS]
    items.append({"key": SPEC_FILE, "path": SPEC_FILE})
    container = {
        "name": "supervisor",
        "image": args.image,
        "command": ["python3", "-m", "components.supervisor.supervisor"],
        "workingDir": APP_DIR,
        "env": [
            {"name": "SUPERVISOR_SPEC", "value": f"{APP_DIR}/{SPEC_FILE}"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "volumeMounts": [{"name": "code", "mountPath": APP_DIR, "readOnly": True}],
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "128Mi"},
        },
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        },
    }
    pod = {
        "serviceAccountName": name,
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "code", "configMap": {"name": name, "items": items}}],
        **({"nodeSelector": dict(args.node_selector)} if args.node_selector else {}),
    }
    return {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, **meta},
        "spec": {
            "schedule": f"*/{SUPERVISOR_PERIOD_MINUTES} * * * *",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": SUPERVISOR_PERIOD_MINUTES * 60,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": TICK_DEADLINE_S,
                "template": {"metadata": {"labels": LABELS}, "spec": pod},
            }},
        },
    }


_TYPES = {
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "Role": k8s.rbac.v1.Role,
    "RoleBinding": k8s.rbac.v1.RoleBinding,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "CronJob": k8s.batch.v1.CronJob,
}
# Top-level keys whose Python argument name differs.
_FIELDS = {"roleRef": "role_ref"}


class RunSupervisor(pulumi.ComponentResource):
    """The supervisor's service account, Role, RoleBinding, ConfigMaps and CronJob, in two
    steps: the state ConfigMap when it is constructed, before the job (`state`, which the job
    depends on); the rest with `follow`, once the job is declared."""

    name: str
    state_config_map: str
    state: k8s.core.v1.ConfigMap

    def __init__(
        self, name: str, namespace: str, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:RunSupervisor", name, None, opts)
        self.name = name
        self.state_config_map = state_name(name)
        # The state's data is the supervisor's and the provider's: Pulumi never writes it back.
        self.state = k8s.core.v1.ConfigMap(
            f"{name}-state", metadata=state_object(name, namespace)["metadata"],
            opts=child_options(self, opts, ignore_changes=["data"]),
        )

    def follow(self, args: RunSupervisorArgs, opts: pulumi.ResourceOptions) -> None:
        """The objects that follow the job (`opts` depends on it): created after its create or
        update returns, deleted before it."""
        for obj in render_objects(self.name, args):
            kind = obj["kind"]
            if obj["metadata"]["name"] == self.state_config_map:
                continue
            fields = {_FIELDS.get(key, key): value for key, value in obj.items()
                      if key not in ("apiVersion", "kind")}
            _TYPES[kind](f"{self.name}-{kind.lower()}", **fields,
                         opts=child_options(self, opts))
        self.register_outputs({"name": self.name, "stateConfigMap": self.state_config_map})
