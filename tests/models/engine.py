"""The Pulumi engine's operation order over the run's resources, calling the real providers.

The stack's resources that touch the run, in dependency order (__main__.py): the RayCluster,
the supervisor's state ConfigMap (which the job depends on), the ClusterCheck
(ClusterCheckProvider), the GrpoJob (GrpoJobProvider, whose `checked` input follows the check's
id) and the rest of the RunSupervisor (the CronJob with run.json; `depends_on=[job]`, so its
update comes after the job's create or update returns).
- `up`: check, diff and create/update each in that order; a replacement of a dynamic resource
  is delete-before-replace (both providers' diff set it), and a replaced check replaces the job
  too (`checked` changes): delete job, delete check, create check, create job. The first
  failure stops the operation; what completed before it stays in the state.
- `up --refresh` / `refresh`: read each resource first (a job whose read returns no id leaves
  the stack); the read's inputs are what the next check and diff start from.
- `destroy`: dependents first: supervisor, job, its state ConfigMap, check, then the
  RayCluster (and the pools);
  a failed delete stops the destroy and leaves the rest in the state.
The props are those of tests/test_supervisor_ray.py (provider_props, spec_for), with the same
keys grpo_job.py and supervision.render_spec produce; every provider gets the full `access`
(kubeconfig, namespace, service, port, ray_cluster, state). The deadline reaches both actors:
the supervisor's spec and the provider's `deadline_s` input (grpo_job.py), from one Config.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from components.check.cluster_check import ClusterCheckProvider
from components.run.job_provider import PROVIDER_VERSION, GrpoJobProvider
from components.run.ray_access import RequestPolicy
from tests.models.verl import Bucket
from tests.sim.world import (
    DASHBOARD, HEAD_SERVICE, NAMESPACE, RAY_CLUSTER, STATE, Actor, Killed, World,
)

KUBECONFIG = "apiVersion: v1\nkind: Config\n"
STACK, RESOURCE = "sim", "grpo"


@dataclass
class Config:
    version: int = 1  # the run config: a new version is a new run (a new submission id)
    check_version: int = 1
    wait_for: str = "first-step"
    max_retries: int = 2
    max_preemptions: int | None = None  # None: no limit within the deadline
    export: bool = True
    release_gpus: bool = True
    keep: int = 2
    total_steps: int = 6
    stall_s: float = 45 * 60
    deadline_s: float = 48 * 3600  # job.deadlineHours, given to both actors as production does


@dataclass
class Run:
    """One deployment of a run config: created by the engine, ended by replace or destroy."""

    serial: int
    config: Config
    bucket: Bucket
    sid: str
    entrypoint: str
    export_entrypoint: str | None
    ended_at: float | None = None
    exported: bool = False
    extra_ups: int = 0  # explicit `up`s that found the run FAILED or STOPPED, and resubmitted
    explicit_after: int | None = None  # such an up started after this many attempts

    @property
    def keep(self) -> int:
        return self.config.keep

    @property
    def total_steps(self) -> int:
        return self.config.total_steps


@dataclass
class Resource:
    inputs: dict[str, Any]
    outs: dict[str, Any]
    run: Run | None = None


class Refused(Exception):
    """The engine stopped: a provider raised, or the config was refused."""


@dataclass
class Engine:
    world: World
    config: Config = field(default_factory=Config)
    state: dict[str, Resource] = field(default_factory=dict)
    policy: RequestPolicy = field(default_factory=RequestPolicy)
    said: list[str] = field(default_factory=list)
    buckets: dict[int, Bucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.job = GrpoJobProvider(self.policy, say=self._say)
        self.check = ClusterCheckProvider(self.policy, say=self._say)

    def _say(self, line: str) -> None:
        self.said.append(line)
        self.world.observer.up_said(line)

    # --- props ---------------------------------------------------------------------------------
    def access(self) -> dict[str, Any]:
        return {"kubeconfig": KUBECONFIG, "namespace": NAMESPACE, "service": HEAD_SERVICE,
                "port": 8265, "ray_cluster": RAY_CLUSTER, "state": STATE}

    def job_props(self) -> dict[str, Any]:
        c = self.config
        sid = f"verl-gke-{STACK}-{RESOURCE}-" + hashlib.sha256(
            f"train v{c.version}".encode()).hexdigest()[:12]
        return {
            "submission_id": sid, "entrypoint": f"sim-train v{c.version}",
            "runtime_env": {"env_vars": {}}, "staged": None,
            "checked": f"check-{c.check_version}",
            "metadata": {"verl-gke-stack": STACK, "verl-gke-resource": RESOURCE},
            "wait_for": c.wait_for, "timeout_s": 45 * 60, "max_retries": c.max_retries,
            "max_preemptions": c.max_preemptions, "deadline_s": c.deadline_s,
            "access": self.access(), "checkpoint_uri": f"gs://b/ckpt/v{c.version}",
            "run_dir": f"v{c.version}",
            "export_entrypoint": f"sim-export v{c.version}" if c.export else None,
            "export_resources": {"entrypoint_num_gpus": 1, "entrypoint_memory": 10**9}
            if c.export else None,
            "model_uri": f"gs://b/ckpt/v{c.version}/huggingface" if c.export else None,
            "version": PROVIDER_VERSION, "job_state": "",
        }

    def check_props(self) -> dict[str, Any]:
        v = self.config.check_version
        return {
            "submission_id": f"verl-gke-{STACK}-check-{v:04d}", "entrypoint": f"sim-check v{v}",
            "runtime_env": {"env_vars": {}},
            "expected": {"target": "a4", "nodes": 1, "gpus_per_node": 8, "gpu_name": "B200",
                         "min_busbw_gbs": 1.0, "min_read_mbps": 1.0, "nccl_network": None,
                         "mnnvl": False},
            "metadata": {"verl-gke-stack": STACK, "verl-gke-resource": "cluster-check"},
            "timeout_s": 20 * 60, "access": self.access(), "version": "1",
            **dict.fromkeys(("status", "inventory", "bus_bandwidth_gbs", "read_mbps",
                             "world_size")),
        }

    def spec(self, props: dict[str, Any]) -> dict[str, Any]:
        c = self.config
        export = {"entrypoint": props["export_entrypoint"],
                  "resources": props["export_resources"]} if c.export else None
        return {"submission_id": props["submission_id"], "entrypoint": props["entrypoint"],
                "runtime_env": props["runtime_env"], "metadata": props["metadata"],
                "export": export, "max_retries": c.max_retries,
                "max_preemptions": c.max_preemptions, "stall_s": c.stall_s,
                "deadline_s": c.deadline_s, "release_gpus": c.release_gpus,
                "dashboard": DASHBOARD, "namespace": NAMESPACE, "ray_cluster": RAY_CLUSTER,
                "state": STATE}

    # --- operations ------------------------------------------------------------------------------
    def up(self, refresh: bool = False) -> None:
        world = self.world
        if not world.kuberay.cluster_exists:
            world.kuberay.recreate()  # after a destroy: a new RayCluster, empty and ready
        if refresh:
            self.refresh()
        self._validate()
        current = self.state["job"].run if "job" in self.state else self._same_run()
        if current is not None and world.observer.run_failed(current):
            # The user's explicit decision to try again: one more attempt, if this up makes it
            # (when the supervisor resubmitted first, up adopts and earns nothing).
            current.explicit_after = len(world.observer.attempts(current))
        if STATE not in world.kuberay.configmaps:
            world.kuberay.create_configmap(STATE)  # before the job, which depends on it
        check_news = self.check_props()
        job_news = self.job_props()
        old_check, old_job = self.state.get("check"), self.state.get("job")
        job_diff = None
        if old_job is not None:
            checked = self.job.check(old_job.inputs, job_news).inputs
            job_diff = self.job.diff(old_job.outs["submission_id"], old_job.outs, checked)
            job_news = checked
        check_replace = old_check is not None and self.check.diff(
            old_check.outs["submission_id"], old_check.outs, check_news).replaces
        job_replace = bool(job_diff and job_diff.replaces) or bool(check_replace and old_job)
        if job_replace and old_job is not None:
            self._call("job", old_job.run, self.job.delete, old_job.outs["submission_id"],
                       old_job.outs)
            del self.state["job"]
            old_job.run.ended_at = world.clock.now
        if check_replace:
            self._call("check", None, self.check.delete, old_check.outs["submission_id"],
                       old_check.outs)
            del self.state["check"]
        if "check" not in self.state:
            result = self._call("check", None, self.check.create, check_news)
            self.state["check"] = Resource(check_news, result.outs)
        if "job" not in self.state:
            run = self._new_run(job_news)
            result = self._call("job", run, self.job.create, job_news)
            self.state["job"] = Resource(job_news, result.outs, run)
        elif job_diff is not None and job_diff.changes:
            res = self.state["job"]
            result = self._call("job", res.run, self.job.update,
                                res.outs["submission_id"], res.outs, job_news)
            self.state["job"] = Resource(job_news, result.outs, res.run)
        res = self.state["job"]
        spec = self.spec(res.inputs)
        if world.cron.spec != spec:
            world.cron.deploy(spec, res.run)

    def refresh(self) -> None:
        if "job" in self.state:
            res = self.state["job"]
            read = self._call("job", res.run, self.job.read, res.outs["submission_id"],
                              res.outs)
            if not read.id:
                del self.state["job"]  # gone from Ray: the next up creates it
            else:
                self.state["job"] = Resource(read.inputs or res.inputs, read.outs, res.run)
        if "check" in self.state:
            res = self.state["check"]
            read = self._call("check", None, self.check.read, res.outs["submission_id"],
                              res.outs)
            self.state["check"] = Resource(res.inputs, read.outs)

    def destroy(self) -> None:
        world = self.world
        # What this destroy must end: the jobs of the resources in the state. A create that
        # failed left nothing in the state (a dynamic provider's failed create records no
        # resource), so its job dies with the RayCluster, not with a provider's delete.
        owned = ([self.state["job"].run] if "job" in self.state else []) + (
            [self.state["check"].outs["submission_id"]] if "check" in self.state else [])
        world.cron.remove()
        if "job" in self.state:
            res = self.state["job"]
            self._call("job", res.run, self.job.delete, res.outs["submission_id"], res.outs)
            del self.state["job"]
            if res.run:
                res.run.ended_at = world.clock.now
        world.kuberay.configmaps.pop(STATE, None)  # after the job, which depends on it
        if "check" in self.state:
            res = self.state["check"]
            self._call("check", None, self.check.delete, res.outs["submission_id"], res.outs)
            del self.state["check"]
        world.observer.before_cluster_delete(owned)
        for run in world.runs:  # the whole stack is gone: every run it deployed has ended
            if run.ended_at is None:
                run.ended_at = world.clock.now
        # The RayCluster, the pools and the GKE cluster: gone with their pods and jobs.
        world.kuberay.cluster_exists = False
        world.ray.lose_head()
        world.forwards_lost()

    # --- helpers ---------------------------------------------------------------------------------
    def _validate(self) -> None:
        from components.runspec.lifecycle import RunLifecycle  # noqa: PLC0415
        try:
            RunLifecycle(keep_checkpoints=self.config.keep, max_retries=self.config.max_retries,
                         max_preemptions=self.config.max_preemptions,
                         deadline_hours=self.config.deadline_s / 3600,
                         release_gpus=self.config.release_gpus, wait_for=self.config.wait_for,
                         export_model=self.config.export)
        except Exception as error:  # noqa: BLE001  pydantic's ValidationError
            raise Refused(f"config refused: {error}") from error

    def _new_run(self, props: dict[str, Any]) -> Run:
        """The Run a create starts, or continues: a refresh that found no record dropped the
        job from the stack, and the next `up` creates it again under the same id (the same
        run, as far as the program and the user are concerned)."""
        c = self.config
        same = self._same_run()
        if same is not None:
            return same
        bucket = self.buckets.setdefault(c.version, Bucket())
        run = Run(len(self.world.runs) + 1, Config(**vars(c)), bucket, props["submission_id"],
                  props["entrypoint"], props["export_entrypoint"])
        self.world.runs.append(run)
        return run

    def _same_run(self) -> Run | None:
        """The deployed run that the current config's job would continue (same id)."""
        last = self.world.runs[-1] if self.world.runs else None
        sid = self.job_props()["submission_id"]
        return last if last is not None and last.ended_at is None and last.sid == sid else None

    def _call(self, kind: str, run: Run | None, method: Any, *args: Any) -> Any:
        world = self.world
        actor = Actor("up", run or (self.state["job"].run if "job" in self.state else None),
                      world.faults.pop("up", None))
        try:
            return world.run_task(f"{kind}-{method.__name__}", lambda: method(*args), actor)
        except Killed as error:
            raise Refused(f"{kind}: the engine's process died ({error})") from error
        except Exception as error:  # noqa: BLE001  the engine reports any provider error
            world.observer.op_failed(kind, method.__name__, error, actor.faulted)
            raise Refused(f"{kind} {method.__name__}: {error}") from error
