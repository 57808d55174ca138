"""GrpoJob: verl's GRPO training submitted to the RayCluster as a Ray job, tracked as a resource.

The component computes everything about the run offline (overrides, entrypoint, runtime env, the
run's checkpoint directory, a deterministic submission id), so the plan shows the exact command,
and registers one dynamic resource whose provider talks to Ray's Jobs API:
- create submits with the submission id (derived from the stack, the resource name and the
  run's config), so a retried `pulumi up` adopts the job it already started; a job found FAILED
  or STOPPED under that id is submitted again and resumes from the run's checkpoints. Before
  submitting it stops any other live job of the same stack and resource (left behind by a lost
  state or a `pulumi state delete`) and waits until it has stopped: never two runs at once.
  It then follows the job as far as `waitFor` says, within `timeoutMinutes`, resubmitting a job
  that fails up to `maxRetries` times, and reports progress at a bounded rate;
- diff replaces the job when the run's config or the staged files change (stopping the old one
  first: both would need every GPU, and staging must not change files under a running job) and
  updates in place for metadata, waiting or access changes, and for a job that a refresh found
  FAILED or STOPPED (update resubmits it; a SUCCEEDED job is never resubmitted);
- read (`pulumi refresh`) reports status, times and the last metric line of the log's tail, and
  records a FAILED or STOPPED job in the inputs, so the next preview says "FAILED at step N;
  resubmitting";
- delete stops a running job and waits until it has stopped. A finished or unknown job is fine,
  and a head Service that Kubernetes says is gone yields a warning; a Ray that cannot be reached
  fails the delete, because a replacement created after it would run next to the old job.
It does not create the RayCluster, the bucket or any Kubernetes object, and it never exposes
the dashboard (see components/ray/ray_access.py).

Progress reaches the CLI through the provider's stderr: the dynamic provider process has no
engine connection (pulumi/dynamic/__main__.py configures Settings without one), so
`pulumi.log.info` prints to stderr (pulumi/log.py), and the engine forwards a dynamic provider's
stdout and stderr lines as info diagnostics (pulumi/pulumi sdk/go/common/resource/plugin/
plugin.go newPlugin: `runtrace` -> Diag.Infoerrf; `isDynamicPluginBinary` exempts
pulumi-resource-pulumi-python from the hiding applied to other providers' output).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import re
import time
from typing import Any, Callable

import pulumi
import pulumi.dynamic as dynamic
from pulumi.runtime import rpc

from components.facts.hardware import HardwareProfile
from components.facts.layout import DASHBOARD_PORT
from components.options import child_options
from components.ray.ray_access import (
    TERMINAL_STATUSES,
    RayAccessError,
    RayClusterGone,
    RayJobs,
    RayUnreachable,
    RequestPolicy,
    open_dashboard,
)
from components.schema.lifecycle import WaitFor
from components.schema.run import (
    GrpoRunConfig,
    EXPORT_SUBDIR,
    entrypoint,
    export_command,
    run_dir_name,
    run_problems,
    runtime_env,
    tensorboard_dir,
)

# Bump when the provider's behaviour changes: a changed input makes the engine call update,
# because the provider itself is pickled by reference and its code is not part of the diff.
PROVIDER_VERSION = "2"

_TERMINAL = TERMINAL_STATUSES
_RESUBMITTABLE = frozenset({"FAILED", "STOPPED"})
# Statuses that satisfy each waitFor: a job that already succeeded has been running.
_REACHED = {
    WaitFor.SUBMITTED: frozenset({"PENDING", "RUNNING", *_TERMINAL}),
    WaitFor.RUNNING: frozenset({"RUNNING", "SUCCEEDED"}),
    WaitFor.SUCCEEDED: frozenset({"SUCCEEDED"}),
}
# Inputs that define the run: changing one is a different job. The id already hashes the
# entrypoint and env; listing them keeps the plan's reason readable. `staged` is the staging
# Job's name, which changes with what it stages: a re-staging replaces (stops) the job first.
_REPLACE_KEYS = ("submission_id", "entrypoint", "runtime_env", "staged", "checked")
# Inputs that only change how the job is followed or described; Ray keeps a job's metadata
# from its submission, so a metadata change is recorded in the stack only. `job_state` carries
# a refresh's finding (see _job_state).
_UPDATE_KEYS = (
    "metadata", "wait_for", "timeout_s", "max_retries", "access", "checkpoint_uri", "run_dir",
    "export_entrypoint", "model_uri", "version", "job_state",
)
_INPUT_KEYS = (*_REPLACE_KEYS, *_UPDATE_KEYS)
_OUTPUT_KEYS = (
    "status", "message", "start_time", "end_time", "dashboard_path", "metrics", "export_status",
)
# What check appends to a refresh's finding, so that the preview reads
# `jobState: "FAILED at step 12" => "FAILED at step 12; resubmitting"`, or
# `"SUCCEEDED, model not exported" => "SUCCEEDED, model not exported; exporting"`.
_RESUBMITTING = "; resubmitting"
_EXPORTING = "; exporting"
_NOT_EXPORTED = "SUCCEEDED, model not exported"
# Metadata keys that name the stack and the resource of a job (see _metadata).
STACK_KEY, RESOURCE_KEY = "verl-gke-stack", "verl-gke-resource"


@dataclasses.dataclass(frozen=True)
class GrpoJobArgs:
    """What the GrpoJob needs from the stack.

    `head_service` and `kubeconfig` should be outputs of the RayCluster and the GKE cluster, so
    that the job is created after them and deleted before them; `staged` an output of the
    staging Job, so that a re-staging stops the job before it touches the bucket.
    """

    run: GrpoRunConfig  # the stack config key verl-gke:job
    profile: HardwareProfile  # the target's hardware row
    nodes: int  # GPU worker replicas of the RayCluster
    checkpoint_uri: pulumi.Input[str]  # gs://<bucket>/checkpoints: the root of every run's dir
    namespace: str  # where the RayCluster runs
    head_service: pulumi.Input[str]  # the RayCluster's head Service, <raycluster>-head-svc
    # The GKE kubeconfig (a secret). Its user is the gke-gcloud-auth-plugin exec entry, so it
    # holds no token; required unless run.dashboardAddress is set.
    kubeconfig: pulumi.Input[str] | None = None
    dashboard_port: int = DASHBOARD_PORT  # the head Service's dashboard port
    # The revision of the model when it is the staged one (part of the run's identity).
    model_revision: str | None = None
    # The staging Job's name (None when staging is skipped): it changes whenever staging would
    # rewrite files under /data, and the job is replaced, i.e. stopped first, when it does.
    staged: pulumi.Input[str | None] = None
    # The ClusterCheck's id (None when skipped): a re-check replaces, i.e. first stops, the job,
    # since both need every GPU; the job then resumes from its checkpoints.
    checked: pulumi.Input[str | None] = None


class GrpoJob(pulumi.ComponentResource):
    """The GRPO training run on the stack's RayCluster. Outputs are Ray's view of the job."""

    submission_id: pulumi.Output[str]
    status: pulumi.Output[str]
    start_time: pulumi.Output[str | None]
    end_time: pulumi.Output[str | None]
    dashboard_path: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]  # the run's own directory, gs://<bucket>/checkpoints/<run>
    run_dir: str  # <runName>-<N>gpu-<digest>
    model_uri: pulumi.Output[str | None]  # <checkpoint_uri>/huggingface; None without export
    export_status: pulumi.Output[str | None]  # the export job's status once it ran
    entrypoint: pulumi.Output[str]
    metrics: pulumi.Output[dict[str, float]]

    def __init__(
        self, name: str, args: GrpoJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:GrpoJob", name, None, opts)
        _validate(args)
        command = entrypoint(args.run, args.profile, args.nodes, args.model_revision)
        run_dir = run_dir_name(args.run, args.profile, args.nodes, args.model_revision)
        env = runtime_env(args.profile, args.nodes, tensorboard_dir(args.run, run_dir))
        run_uri = pulumi.Output.from_input(args.checkpoint_uri).apply(
            lambda root: f"{root.rstrip('/')}/{run_dir}"
        )
        export = args.run.export_model
        inputs = {
            "submission_id": submission_id(pulumi.get_stack(), name, command, env),
            "entrypoint": command,
            "runtime_env": env,
            "staged": args.staged,
            "checked": args.checked,
            "metadata": _metadata(args, name),
            "wait_for": args.run.wait_for.value,
            "timeout_s": args.run.timeout_minutes * 60,
            "max_retries": args.run.max_retries,
            "access": _access(args),
            "checkpoint_uri": run_uri,
            "run_dir": run_dir,
            "export_entrypoint": export_command(run_dir) if export else None,
            "model_uri": run_uri.apply(lambda uri: f"{uri}/{EXPORT_SUBDIR}") if export else None,
            "version": PROVIDER_VERSION,
            "job_state": "",
        }
        job = _GrpoRun(
            f"{name}-run",
            inputs,
            # The engine echoes secret inputs as secret outputs; this makes sure of it for the
            # kubeconfig nested in `access`.
            child_options(self, opts, additional_secret_outputs=["access"]),
        )
        self.submission_id = job.submission_id
        self.status = job.status
        self.start_time = job.start_time
        self.end_time = job.end_time
        self.dashboard_path = job.dashboard_path
        self.checkpoint_uri = job.checkpoint_uri
        self.run_dir = run_dir
        self.model_uri = job.model_uri
        self.export_status = job.export_status
        self.entrypoint = job.entrypoint
        self.metrics = job.metrics
        self.register_outputs({
            "submissionId": self.submission_id,
            "status": self.status,
            "startTime": self.start_time,
            "endTime": self.end_time,
            "dashboardPath": self.dashboard_path,
            "checkpointUri": self.checkpoint_uri,
            "runDir": self.run_dir,
            "modelUri": self.model_uri,
            "exportStatus": self.export_status,
            "entrypoint": self.entrypoint,
            "metrics": self.metrics,
        })


def _validate(args: GrpoJobArgs) -> None:
    problems = run_problems(args.run, args.profile, args.nodes)
    if args.kubeconfig is None and args.run.dashboard_address is None:
        problems.append(
            "GrpoJobArgs.kubeconfig is None and verl-gke:job.dashboardAddress is unset: pass "
            "the cluster's kubeconfig to port-forward to the head, or set dashboardAddress"
        )
    if problems:
        raise ValueError("invalid GRPO job:\n- " + "\n- ".join(problems))


def submission_id(stack: str, name: str, command: str, env: dict) -> str:
    """verl-gke-<stack>-<name>-<12 hex of the run's config>: same config, same id."""
    return deterministic_id(stack, name, {"entrypoint": command, "runtime_env": env})


def deterministic_id(stack: str, name: str, config: dict[str, Any]) -> str:
    """verl-gke-<stack>-<name>-<12 hex of `config`>: the Ray submission id of a resource, the
    same for the same config, so a repeated `pulumi up` finds its job instead of adding one."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
    return "-".join(["verl-gke", slug(stack), slug(name), digest])


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


def _metadata(args: GrpoJobArgs, name: str) -> dict[str, str]:
    return {
        **args.run.metadata,
        STACK_KEY: pulumi.get_stack(),
        RESOURCE_KEY: name,
        "verl-gke-target": args.profile.target.value,
    }


def _access(args: GrpoJobArgs) -> dict[str, Any]:
    return access_inputs(args.run.dashboard_address, args.kubeconfig, args.namespace,
                         args.head_service, args.dashboard_port)


def access_inputs(
    address: str | None, kubeconfig: pulumi.Input[str] | None, namespace: str,
    service: pulumi.Input[str], port: int,
) -> dict[str, Any]:
    """How a provider reaches the dashboard (ray_access.open_dashboard); the kubeconfig secret."""
    if address is not None:
        return {"address": address}
    return {
        "kubeconfig": pulumi.Output.secret(kubeconfig),
        "namespace": namespace,
        "service": service,
        "port": port,
    }


class _GrpoRun(dynamic.Resource, module="verl-gke", name="GrpoRun"):
    """The dynamic resource; a subclass because the SDK's mocks reject a bare dynamic.Resource."""

    submission_id: pulumi.Output[str]
    entrypoint: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]
    model_uri: pulumi.Output[str | None]
    export_status: pulumi.Output[str | None]
    status: pulumi.Output[str]
    message: pulumi.Output[str]
    start_time: pulumi.Output[str | None]
    end_time: pulumi.Output[str | None]
    dashboard_path: pulumi.Output[str]
    metrics: pulumi.Output[dict[str, float]]

    def __init__(self, name: str, inputs: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
        outputs = dict.fromkeys(_OUTPUT_KEYS)
        super().__init__(GrpoJobProvider(), name, {**outputs, **inputs}, opts)


class GrpoJobProvider(dynamic.ResourceProvider):
    """CRUD of one Ray job. Pickled into the engine's provider process: builds its own clients.

    `say` receives progress lines (default: pulumi.log.info, i.e. the provider's stderr).
    """

    def __init__(
        self, policy: RequestPolicy = RequestPolicy(), say: Callable[[str], None] | None = None
    ) -> None:
        self.policy = policy
        self.say = say

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        failures = [dynamic.CheckFailure(key, reason) for key, reason in _input_problems(news)]
        found = (olds or {}).get("job_state") or ""
        acted = found.endswith((_RESUBMITTING, _EXPORTING))
        # An export is only announced if this config still wants one (exportModel may be off).
        wanted = found != _NOT_EXPORTED or bool(news.get("export_entrypoint"))
        if found and not acted and wanted:
            action = _EXPORTING if found == _NOT_EXPORTED else _RESUBMITTING
            news = {**news, "job_state": found + action}
        return dynamic.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        with open_dashboard(props["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, props["submission_id"], self.policy)
            progress = self._progress(jobs)
            _submit_or_adopt(jobs, props, progress)
            outs = self._follow(jobs, props, progress)
        return dynamic.CreateResult(props["submission_id"], outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [key for key in _INPUT_KEYS if olds.get(key) != news.get(key)]
        # A refresh found the job FAILED or STOPPED (update resubmits it), or SUCCEEDED without
        # its model exported (update exports it); see check.
        resubmit = olds.get("status") in _RESUBMITTABLE
        export = _export_pending(olds, news)
        return dynamic.DiffResult(
            changes=bool(changed) or resubmit or export,
            replaces=[key for key in changed if key in _REPLACE_KEYS],
            delete_before_replace=True,
        )

    def update(
        self, _id: str, olds: dict[str, Any], news: dict[str, Any]
    ) -> dynamic.UpdateResult:
        with open_dashboard(news["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, news["submission_id"], self.policy)
            progress = self._progress(jobs)
            if olds.get("status") in _RESUBMITTABLE:
                # What the preview announced: the refreshed state said FAILED or STOPPED. Ray is
                # asked again, so a job someone resubmitted meanwhile is adopted, not doubled.
                _submit_or_adopt(jobs, news, progress)
            outs = self._follow(jobs, news, progress)
        return dynamic.UpdateResult(outs)

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        with open_dashboard(props["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, id_, self.policy)
            info = jobs.info()
            if info is None:
                return dynamic.ReadResult("", {})  # gone from Ray: drop it from the stack
            observed = _observed(jobs, info, props)
            observed["export_status"] = (
                _export_status(jobs, props) if info["status"] == "SUCCEEDED"
                else props.get("export_status")
            )
            outs = {**props, **observed}
            outs["job_state"] = _job_state(outs)
            # The inputs the next diff starts from carry the finding (check turns it into the
            # preview's reason). `access` is left out: it holds the kubeconfig, and inputs a
            # provider returns are plain values (pulumi/dynamic/__main__.py Read serializes them
            # without secrets), so it is never handed back where it could lose its secretness.
            inputs = {key: outs.get(key) for key in _INPUT_KEYS if key != "access"}
            return dynamic.ReadResult(id_, outs, inputs)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        try:
            with open_dashboard(props["access"], self.policy) as dashboard:
                self._stop(RayJobs(dashboard, id_, self.policy))
        except RayClusterGone as error:
            # The head Service is gone, so is every job that ran on it.
            pulumi.log.warn(f"{error}. The Ray cluster no longer exists; removing the job "
                            "from the stack.")
        except RayUnreachable as error:
            # Going on would let the engine create the replacement next to a job that may
            # still be running on the same GPUs. Nothing is removed from the stack.
            raise RayAccessError(
                f"{error}. Could not stop Ray job {id_}, so it may still be running; the stack "
                "is unchanged. Make the dashboard reachable and run the command again. If the "
                "Ray cluster no longer exists, remove the job from the stack with `pulumi "
                "state delete <urn>` (the URN of the GrpoRun resource, from `pulumi stack "
                "--show-urns`)"
            ) from error

    def _progress(self, jobs: RayJobs) -> "Progress":
        return Progress(jobs, self.policy, self.say or pulumi.log.info)

    def _follow(self, jobs: RayJobs, props: dict[str, Any], progress: "Progress") -> dict:
        info = _wait(jobs, props, self.policy, progress)
        outs = {**props, **_observed(jobs, info, props), "job_state": ""}
        outs["export_status"] = props.get("export_status")
        if info["status"] == "SUCCEEDED" and props.get("export_entrypoint"):
            outs["export_status"] = _export(jobs, props, self.policy, progress)
        return outs

    def _stop(self, jobs: RayJobs) -> None:
        info = jobs.info()
        if info is not None and info["status"] not in _TERMINAL:
            jobs.stop()
            poll(jobs, _TERMINAL, time.monotonic() + self.policy.stop_timeout_s, self.policy)


def _job_state(observed: dict[str, Any]) -> str:
    """What a refresh records for the next preview: why update would act, or "" for nothing."""
    if _export_pending(observed, observed):
        return _NOT_EXPORTED
    if observed["status"] not in _RESUBMITTABLE:
        return ""
    step = (observed.get("metrics") or {}).get("step")
    where = f" at step {int(step)}" if step is not None else " before its first step"
    return f"{observed['status']}{where}"


class Progress:
    """Status changes as they happen; otherwise one line per `progress_every_s` with the time
    waited and the latest metrics. Only status, times and parsed numbers are printed, never a
    raw log line (a log can hold anything, secrets included)."""

    def __init__(self, jobs: RayJobs, policy: RequestPolicy, say: Callable[[str], None]) -> None:
        self._jobs, self._policy, self._say = jobs, policy, say
        self._started = time.monotonic()
        self._status: str | None = None
        self._next = self._started + policy.progress_every_s

    def say(self, text: str) -> None:
        self._say(f"{self._jobs.submission_id}: {text}")

    def seen(self, info: dict[str, Any]) -> None:
        now = time.monotonic()
        status = info["status"]
        if status != self._status:
            self._status = status
            self.say(f"{status} after {_duration(now - self._started)}")
            self._next = now + self._policy.progress_every_s
        elif now >= self._next:
            metrics = _metrics(self._jobs, None, self._policy, info) or {}
            shown = " ".join(f"{key}={value:g}" for key, value in list(metrics.items())[:6])
            self.say(f"{status}, {_duration(now - self._started)} waited"
                     + (f"; {shown}" if shown else ""))
            self._next = now + self._policy.progress_every_s


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _export_pending(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """The run SUCCEEDED, an export is wanted and has not succeeded yet."""
    return (
        olds.get("status") == "SUCCEEDED"
        and bool(news.get("export_entrypoint"))
        and olds.get("export_status") != "SUCCEEDED"
    )


def _export_id(submission_id: str) -> str:
    return f"{submission_id}-export"


def _export_status(jobs: RayJobs, props: dict[str, Any]) -> str | None:
    """The export job's status in Ray, or what the state last said if Ray has no record."""
    if not props.get("export_entrypoint"):
        return None
    info = RayJobs(jobs.dashboard, _export_id(jobs.submission_id), jobs.policy).info()
    return info["status"] if info else props.get("export_status")


def _export(jobs: RayJobs, props: dict[str, Any], policy: RequestPolicy, progress: "Progress") -> str:
    """Run verl's model merger on the run's last checkpoint as a Ray job, once per run.

    Its submission id is the run's with `-export`: a retried `pulumi up` adopts it, a FAILED one
    is submitted again (the merger writes to a scratch directory and renames it into place).
    """
    export = RayJobs(jobs.dashboard, _export_id(jobs.submission_id), policy)
    metadata = {**props["metadata"], "verl-gke-role": "model-export"}
    progress.say(f"SUCCEEDED; exporting the model to {props.get('model_uri') or 'the run dir'}")
    if not export.submit(props["export_entrypoint"], props["runtime_env"], metadata):
        info = export.info() or {}
        if info.get("status") in _RESUBMITTABLE:
            export.delete()
            export.submit(props["export_entrypoint"], props["runtime_env"], metadata)
    deadline = time.monotonic() + props["timeout_s"]
    info = poll(export, _TERMINAL, deadline, policy)
    if info["status"] != "SUCCEEDED":
        raise RayAccessError(
            f"the run SUCCEEDED, but {export.where()} exporting its model ended "
            f"{info['status']} ({info.get('message')}). Last log lines:\n"
            f"{_log_tail(export, info)}\nThe checkpoints are intact; fix the cause, then run "
            "`pulumi up --refresh` to export again, or set verl-gke:job.exportModel to false"
        )
    progress.say(f"model exported to {props.get('model_uri')}")
    return info["status"]


def _input_problems(news: dict[str, Any]) -> list[tuple[str, str]]:
    """What check reports; values still unknown (during a preview) are not judged."""
    known = {key: value for key, value in news.items() if value != rpc.UNKNOWN}
    problems = [
        (key, "is required") for key in ("submission_id", "entrypoint") if not news.get(key)
    ]
    if "wait_for" in known and known["wait_for"] not in {w.value for w in WaitFor}:
        problems.append(
            ("wait_for", f"is {known['wait_for']!r}: use submitted, running or succeeded")
        )
    if "timeout_s" in known and not known["timeout_s"] > 0:
        problems.append(
            ("timeout_s", f"is {known['timeout_s']!r}: use a positive number of seconds")
        )
    access = known.get("access")
    if isinstance(access, dict) and not access.get("address") and "kubeconfig" not in access:
        problems.append(
            ("access", "needs an address, or a kubeconfig with namespace, service and port")
        )
    return problems


def _submit_or_adopt(jobs: RayJobs, props: dict[str, Any], progress: Progress) -> None:
    """Submit, or adopt the job an earlier, interrupted `pulumi up` submitted under this id.

    A FAILED or STOPPED job under this id is submitted again: it resumes from the run's
    checkpoints (trainer.resume_mode=auto). A SUCCEEDED one is adopted as it is.
    """
    _stop_others(jobs, props["metadata"], progress)
    submit = (props["entrypoint"], props["runtime_env"], props["metadata"])
    if jobs.submit(*submit):
        progress.say("submitted")
        return
    info = jobs.info() or {}
    if info.get("entrypoint") != props["entrypoint"]:
        raise RayAccessError(
            f"{jobs.where()}: a job with this submission id but another entrypoint exists; "
            f"remove it with `ray job delete {jobs.submission_id}` and run `pulumi up` again"
        )
    if info["status"] in _RESUBMITTABLE:
        _resubmit(jobs, props, info, progress)
    else:
        progress.say(f"adopted, {info['status']}")


def _resubmit(jobs: RayJobs, props: dict[str, Any], info: dict, progress: Progress) -> None:
    progress.say(f"{_job_state(_observed_status(jobs, info))}; resubmitting under the same id, "
                 f"resuming from {props.get('checkpoint_uri') or 'its checkpoints'}")
    jobs.delete()
    if not jobs.submit(props["entrypoint"], props["runtime_env"], props["metadata"]):
        raise RayAccessError(
            f"{jobs.where()}: another `pulumi up` resubmitted it at the same moment; run "
            "`pulumi refresh` to see its state"
        )


def _observed_status(jobs: RayJobs, info: dict) -> dict[str, Any]:
    return {"status": info["status"], "metrics": _metrics(jobs, None, jobs.policy, info)}


def _stop_others(jobs: RayJobs, metadata: dict[str, str], progress: Progress) -> None:
    """Stop every other live job of this stack and resource, and wait until each has stopped.

    Such a job is this resource's own earlier run whose record left the stack (a lost state, a
    `pulumi state delete`, an interrupted replace): it holds the GPUs the new run needs.
    """
    mine = {key: metadata[key] for key in (STACK_KEY, RESOURCE_KEY) if key in metadata}
    if len(mine) < 2:
        return
    others = [job for job in jobs.live_jobs(mine) if job.get("submission_id") != jobs.submission_id]
    deadline = time.monotonic() + jobs.policy.stop_timeout_s
    for job in others:
        other = job["submission_id"]
        progress.say(f"stopping {other}, an earlier run of the same stack and resource that "
                     f"is still {job['status']}")
        jobs.stop_other(other)
        while (status := (jobs.info_of(other) or {"status": "STOPPED"})["status"]) not in _TERMINAL:
            if time.monotonic() > deadline:
                raise RayAccessError(
                    f"{jobs.where()}: job {other} of the same stack and resource is still "
                    f"{status} {jobs.policy.stop_timeout_s:g}s after it was asked to stop; "
                    f"nothing was submitted. Stop it with `ray job stop --address "
                    f"<the dashboard> {other}` and run `pulumi up` again"
                )
            time.sleep(jobs.policy.poll_min_s)
        progress.say(f"{other} has stopped ({status})")


def _wait(jobs: RayJobs, props: dict[str, Any], policy: RequestPolicy, progress: Progress) -> dict:
    """Follow the job until `wait_for`, resubmitting a FAILED job up to `max_retries` times."""
    wait_for = WaitFor(props["wait_for"])
    deadline = time.monotonic() + props["timeout_s"]
    budget = int(props.get("max_retries") or 0)
    retries = 0
    while True:
        info = poll(jobs, _REACHED[wait_for] | _TERMINAL, deadline, policy, progress.seen)
        if info["status"] in _REACHED[wait_for]:
            return info
        if info["status"] == "FAILED" and retries < budget:
            retries += 1
            progress.say(f"retry {retries} of {budget} (verl-gke:job.maxRetries)")
            _resubmit(jobs, props, info, progress)
            continue
        spent = f" after {retries} of {budget} retries" if budget else ""
        raise RayAccessError(
            f"{jobs.where()} ended {info['status']}{spent} ({info.get('message')}) before "
            f"reaching {wait_for.value}. Last log lines:\n{_log_tail(jobs, info)}\n"
            "Fix the cause, "
            "then run `pulumi up --refresh`: it submits the job again under the same id and "
            "verl resumes from the run's last checkpoint"
        )


def poll(
    jobs: RayJobs,
    statuses: frozenset[str],
    deadline: float,
    policy: RequestPolicy,
    seen: Callable[[dict], None] | None = None,
) -> dict:
    """Poll the job until its status is one of `statuses`, at most 10% after it got there."""
    started = time.monotonic()
    while True:
        info = jobs.info()
        if info is None:
            raise RayAccessError(
                f"{jobs.where()} no longer exists in Ray (was the head restarted?); run "
                "`pulumi refresh` and then `pulumi up` to submit it again"
            )
        if seen is not None:
            seen(info)
        if info["status"] in statuses:
            return info
        now = time.monotonic()
        interval = min(max(policy.poll_min_s, (now - started) / 10), policy.poll_max_s)
        if now + interval > deadline:
            raise RayAccessError(
                f"{jobs.where()} is still {info['status']} at the deadline; it was left as it "
                "is: run `pulumi up` again to keep waiting (it adopts the job), or raise "
                "verl-gke:job.timeoutMinutes"
            )
        time.sleep(interval)


def _observed(jobs: RayJobs, info: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": info["status"],
        "message": info.get("message") or "",
        "start_time": _iso(info.get("start_time")),
        "end_time": _iso(info.get("end_time")),
        "dashboard_path": f"/#/jobs/{jobs.submission_id}",
        "metrics": _metrics(jobs, props.get("metrics"), jobs.policy, info),
    }


def _metrics(
    jobs: RayJobs, previous: dict[str, float] | None, policy: RequestPolicy, info: dict
) -> dict[str, float] | None:
    """The last metric line of the log's tail; the previous snapshot if it cannot be read.

    Only the tail is read (RayJobs.log_tail), so refresh costs the same after days of NCCL INFO
    lines as after a minute. The job's status must still be reported when the log is unreadable.
    """
    try:
        metrics = last_metrics(jobs.log_tail(policy.log_tail_lines, info))
    except RayAccessError as error:
        pulumi.log.warn(f"metrics not refreshed, keeping the last ones: {error}")
        return previous
    return metrics or previous


def _iso(epoch_ms: int | None) -> str | None:
    if not epoch_ms:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")


def _log_tail(jobs: RayJobs, info: dict, lines: int = 20) -> str:
    try:
        return "\n".join(jobs.log_tail(lines, info).splitlines()[-lines:])
    except RayAccessError as error:
        return f"(log unavailable: {error})"


# verl's console logger prints one line per step: "step:12 - critic/score/mean:0.53 - ..."
# (verl/utils/logger/aggregate_logger.py concat_dict_to_str); Ray prefixes actor output with
# "(TaskRunner pid=123) ". Values may be numpy reprs such as np.float64(0.5).
_STEP_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
_NUMBER = re.compile(r"^(?:np\.\w+\()?([-+0-9.eEinfa]+)\)?$")


def last_metrics(log: str) -> dict[str, float]:
    """The metrics of the last step line in a verl job log; {} before the first step."""
    for line in reversed(log.splitlines()):
        if match := _STEP_LINE.search(line):
            metrics = {"step": float(match.group(1))}
            for item in match.group(2).split(" - "):
                key, _, raw = item.rpartition(":")
                number = _NUMBER.match(raw.strip())
                if key and number:
                    with_value = _finite(number.group(1))
                    if with_value is not None:
                        metrics[key.strip()] = with_value
            return metrics
    return {}


def _finite(text: str) -> float | None:
    """A float for the stack state, which is JSON: NaN and infinities are dropped."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
