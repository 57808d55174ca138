"""GrpoJob: verl's GRPO training submitted to the RayCluster as a Ray job, tracked as a resource.

The component computes everything about the run offline (overrides, entrypoint, runtime env,
a deterministic submission id), so the plan shows the exact command, and registers one dynamic
resource whose provider talks to Ray's Jobs API:
- create submits with the submission id (derived from the stack, the resource name and the
  run's config), so a retried `pulumi up` adopts the job it already started; a job found FAILED
  or STOPPED under that id is submitted again, and resumes from the run's own checkpoint
  directory (components/schema/run.py run_dir_name).
  It then follows the job as far as `waitFor` says, within `timeoutMinutes`;
- diff replaces the job when the run's config changes (stopping the old one first: both would
  need every GPU) and updates in place for metadata, waiting or access changes;
- read (`pulumi refresh`) reports status, times and the last metric line of the job log;
- delete stops a running job and waits until it has stopped; Ray keeps the record as history
  (`ray job list`), and a later create under the same id submits the stopped job again. A
  finished or unknown job is fine, and a Ray cluster that is already gone yields a warning
  instead of a destroy that never ends.
It does not create the RayCluster, the bucket or any Kubernetes object, and it never exposes
the dashboard (see components/ray/ray_access.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import re
import time
from typing import Any

import pulumi
import pulumi.dynamic as dynamic
from pulumi.runtime import rpc

from components.schema.run import (
    GrpoRunConfig,
    WaitFor,
    entrypoint,
    run_dir_name,
    run_problems,
    runtime_env,
)
from components.facts.hardware import HardwareProfile
from components.facts.layout import DASHBOARD_PORT
from components.options import child_options
from components.ray.ray_access import (
    RayAccessError,
    RayJobs,
    RayUnreachable,
    RequestPolicy,
    open_dashboard,
)

# Bump when the provider's behaviour changes: a changed input makes the engine call update,
# because the provider itself is pickled by reference and its code is not part of the diff.
PROVIDER_VERSION = "1"

_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Statuses that satisfy each waitFor: a job that already succeeded has been running.
_REACHED = {
    WaitFor.SUBMITTED: frozenset({"PENDING", "RUNNING", *_TERMINAL}),
    WaitFor.RUNNING: frozenset({"RUNNING", "SUCCEEDED"}),
    WaitFor.SUCCEEDED: frozenset({"SUCCEEDED"}),
}
# Inputs that define the run: changing one is a different job. The id already hashes the
# other two; listing them keeps the plan's reason readable.
_REPLACE_KEYS = ("submission_id", "entrypoint", "runtime_env")
# Inputs that only change how the job is followed or described; Ray keeps a job's metadata
# from its submission, so a metadata change is recorded in the stack only.
_UPDATE_KEYS = ("metadata", "wait_for", "timeout_s", "access", "checkpoint_uri", "version")
_OUTPUT_KEYS = ("status", "message", "start_time", "end_time", "dashboard_path", "metrics")


@dataclasses.dataclass(frozen=True)
class GrpoJobArgs:
    """What the GrpoJob needs from the stack.

    `head_service` and `kubeconfig` should be outputs of the RayCluster and the GKE cluster, so
    that the job is created after them and deleted before them.
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


class GrpoJob(pulumi.ComponentResource):
    """The GRPO training run on the stack's RayCluster. Outputs are Ray's view of the job."""

    submission_id: pulumi.Output[str]
    status: pulumi.Output[str]
    start_time: pulumi.Output[str | None]
    end_time: pulumi.Output[str | None]
    dashboard_path: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]  # the run's own directory, gs://<bucket>/checkpoints/<run>
    run_dir: str  # <runName>-<N>gpu-<digest>
    entrypoint: pulumi.Output[str]
    metrics: pulumi.Output[dict[str, float]]

    def __init__(
        self, name: str, args: GrpoJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:GrpoJob", name, None, opts)
        _validate(args)
        command = entrypoint(args.run, args.profile, args.nodes, args.model_revision)
        env = runtime_env(args.profile, args.nodes)
        run_dir = run_dir_name(args.run, args.profile, args.nodes, args.model_revision)
        inputs = {
            "submission_id": submission_id(pulumi.get_stack(), name, command, env),
            "entrypoint": command,
            "runtime_env": env,
            "metadata": _metadata(args, name),
            "wait_for": args.run.wait_for.value,
            "timeout_s": args.run.timeout_minutes * 60,
            "access": _access(args),
            "checkpoint_uri": pulumi.Output.from_input(args.checkpoint_uri).apply(
                lambda root: f"{root.rstrip('/')}/{run_dir}"
            ),
            "version": PROVIDER_VERSION,
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
    config = json.dumps({"entrypoint": command, "runtime_env": env}, sort_keys=True)
    digest = hashlib.sha256(config.encode()).hexdigest()[:12]
    return "-".join(["verl-gke", _slug(stack), _slug(name), digest])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


def _metadata(args: GrpoJobArgs, name: str) -> dict[str, str]:
    return {
        **args.run.metadata,
        "verl-gke-stack": pulumi.get_stack(),
        "verl-gke-resource": name,
        "verl-gke-target": args.profile.target.value,
    }


def _access(args: GrpoJobArgs) -> dict[str, Any]:
    if args.run.dashboard_address is not None:
        return {"address": args.run.dashboard_address}
    return {
        "kubeconfig": pulumi.Output.secret(args.kubeconfig),
        "namespace": args.namespace,
        "service": args.head_service,
        "port": args.dashboard_port,
    }


class _GrpoRun(dynamic.Resource, module="verl-gke", name="GrpoRun"):
    """The dynamic resource; a subclass because the SDK's mocks reject a bare dynamic.Resource."""

    submission_id: pulumi.Output[str]
    entrypoint: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]
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
    """CRUD of one Ray job. Pickled into the engine's provider process: builds its own clients."""

    def __init__(self, policy: RequestPolicy = RequestPolicy()) -> None:
        self.policy = policy

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        failures = [dynamic.CheckFailure(key, reason) for key, reason in _input_problems(news)]
        return dynamic.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        with open_dashboard(props["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, props["submission_id"], self.policy)
            _submit_or_adopt(jobs, props)
            outs = self._follow(jobs, props)
        return dynamic.CreateResult(props["submission_id"], outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        keys = (*_REPLACE_KEYS, *_UPDATE_KEYS)
        changed = [key for key in keys if olds.get(key) != news.get(key)]
        return dynamic.DiffResult(
            changes=bool(changed),
            replaces=[key for key in changed if key in _REPLACE_KEYS],
            delete_before_replace=True,
        )

    def update(
        self, _id: str, _olds: dict[str, Any], news: dict[str, Any]
    ) -> dynamic.UpdateResult:
        with open_dashboard(news["access"], self.policy) as dashboard:
            outs = self._follow(RayJobs(dashboard, news["submission_id"], self.policy), news)
        return dynamic.UpdateResult(outs)

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        with open_dashboard(props["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, id_, self.policy)
            info = jobs.info()
            if info is None:
                return dynamic.ReadResult("", {})  # gone from Ray: drop it from the stack
            return dynamic.ReadResult(id_, {**props, **_observed(jobs, info, props)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        try:
            with open_dashboard(props["access"], self.policy) as dashboard:
                self._stop(RayJobs(dashboard, id_, self.policy))
        except RayUnreachable as error:
            pulumi.log.warn(
                f"{error}. Removing the job from the stack without stopping it: if its Ray "
                "cluster still exists, stop it with `ray job stop`."
            )

    def _follow(self, jobs: RayJobs, props: dict[str, Any]) -> dict[str, Any]:
        info = _wait(jobs, WaitFor(props["wait_for"]), props["timeout_s"], self.policy)
        return {**props, **_observed(jobs, info, props)}

    def _stop(self, jobs: RayJobs) -> None:
        info = jobs.info()
        if info is not None and info["status"] not in _TERMINAL:
            jobs.stop()
            _poll(jobs, _TERMINAL, time.monotonic() + self.policy.stop_timeout_s, self.policy)


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


def _submit_or_adopt(jobs: RayJobs, props: dict[str, Any]) -> None:
    """Submit, or adopt the job an earlier, interrupted `pulumi up` submitted under this id."""
    submit = (props["entrypoint"], props["runtime_env"], props["metadata"])
    if jobs.submit(*submit):
        return
    info = jobs.info() or {}
    if info.get("entrypoint") != props["entrypoint"]:
        raise RayAccessError(
            f"{jobs.where()}: a job with this submission id but another entrypoint exists; "
            f"remove it with `ray job delete {jobs.submission_id}` and run `pulumi up` again"
        )
    if info["status"] in ("FAILED", "STOPPED"):
        # A retried `pulumi up` after a failed run means "run it again"; verl resumes from the
        # last checkpoint on the bucket (trainer.resume_mode=auto).
        jobs.delete()
        jobs.submit(*submit)


def _wait(jobs: RayJobs, wait_for: WaitFor, timeout_s: float, policy: RequestPolicy) -> dict:
    deadline = time.monotonic() + timeout_s
    info = _poll(jobs, _REACHED[wait_for] | _TERMINAL, deadline, policy)
    if info["status"] not in _REACHED[wait_for]:
        raise RayAccessError(
            f"{jobs.where()} ended {info['status']} ({info.get('message')}) before reaching "
            f"{wait_for.value}. Last log lines:\n{_log_tail(jobs)}\nFix the cause; `pulumi up` "
            "submits it again under the same id and verl resumes from its last checkpoint"
        )
    return info


def _poll(
    jobs: RayJobs, statuses: frozenset[str], deadline: float, policy: RequestPolicy
) -> dict:
    """Poll the job until its status is one of `statuses`, with a growing interval."""
    interval = policy.poll_min_s
    while True:
        info = jobs.info()
        if info is None:
            raise RayAccessError(
                f"{jobs.where()} no longer exists in Ray (was the head restarted?); run "
                "`pulumi refresh` and then `pulumi up` to submit it again"
            )
        if info["status"] in statuses:
            return info
        if time.monotonic() + interval > deadline:
            raise RayAccessError(
                f"{jobs.where()} is still {info['status']} at the deadline; it was left as it "
                "is: run `pulumi up` again to keep waiting (it adopts the job), or raise "
                "verl-gke:job.timeoutMinutes"
            )
        time.sleep(interval)
        interval = min(interval * 2, policy.poll_max_s)


def _observed(jobs: RayJobs, info: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": info["status"],
        "message": info.get("message") or "",
        "start_time": _iso(info.get("start_time")),
        "end_time": _iso(info.get("end_time")),
        "dashboard_path": f"/#/jobs/{jobs.submission_id}",
        "metrics": _metrics(jobs, props.get("metrics")),
    }


def _metrics(jobs: RayJobs, previous: dict[str, float] | None) -> dict[str, float] | None:
    """The last metric line of the log; the previous snapshot if the log cannot be read.

    The whole log is fetched (the REST API has no tail): after days of NCCL INFO lines that can
    time out, and the job's status must still be reported when it does.
    """
    try:
        return last_metrics(jobs.logs())
    except RayAccessError as error:
        pulumi.log.warn(f"metrics not refreshed, keeping the last ones: {error}")
        return previous


def _iso(epoch_ms: int | None) -> str | None:
    if not epoch_ms:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")


def _log_tail(jobs: RayJobs, lines: int = 20) -> str:
    try:
        return "\n".join(jobs.logs().splitlines()[-lines:])
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
