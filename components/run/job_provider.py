"""GrpoJobProvider: the dynamic provider that submits the GRPO run to Ray and follows it.

The run's id is the resource's id; its attempts are the Ray jobs `<run id>-a<N>` and its
export's `<run id>-export-a<N>` (protocol.py, docs/run-lifecycle.md).
- create writes the provider's mark (this run is the stack's) into the supervisor's state,
  stops any other live job of the same stack and resource (an earlier run's, left behind by a
  lost state or a `pulumi state delete`), then submits attempt 0, or adopts the newest attempt
  an earlier, interrupted `up` or the supervisor submitted (after a FAILED or STOPPED one, the
  next). On a suspended RayCluster it first brings the cluster back (kube.gate). It then follows
  the attempt as far as `waitFor` says (default: verl's first training step), within
  `timeoutMinutes`, printing a line at each phase and a bounded heartbeat, and submitting the
  next attempt after one that fails as recovery.decide says (budgets, deadline);
- diff replaces the job when the run's config or the staged files change (stopping the old one
  first) and updates in place for metadata, waiting or access changes, and for a job that a
  refresh found FAILED or STOPPED (update submits the next attempt; a SUCCEEDED run is never
  resubmitted) or SUCCEEDED without its export (update exports, resuming a released cluster);
- read (`pulumi refresh`) reports status, times, attempts, the last failure and the last metric
  line of the newest attempt, from Ray, or from the supervisor's record once the cluster is
  released;
- delete first writes "ended" into the provider's mark, so that no supervisor tick acts on the
  run again, then stops every live attempt and export and waits until each has stopped. A
  suspended cluster needs no Ray, a finished or unknown job is fine, and a head Service that
  Kubernetes says is gone yields a warning; a Ray that cannot be reached fails the delete,
  because a replacement created after it would run next to the old job.

Progress reaches the CLI through the provider's stderr: the dynamic provider process has no
engine connection (pulumi/dynamic/__main__.py configures Settings without one), so
`pulumi.log.info` prints to stderr (pulumi/log.py), and the engine forwards a dynamic provider's
stdout and stderr lines as info diagnostics (pulumi/pulumi sdk/go/common/resource/plugin/
plugin.go newPlugin: `runtrace` -> Diag.Infoerrf; `isDynamicPluginBinary` exempts
pulumi-resource-pulumi-python from the hiding applied to other providers' output).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import pulumi
import pulumi.dynamic as dynamic

from components import unknowns
from components.run import attempts, export, timeline
from components.supervisor import protocol, recovery
from components.run.following import Progress, iso, log_tail, poll, short, tail_metrics
from components.run.job_outputs import PROVIDER_OUTPUTS
from components.run.kube import gate, open_cluster
from components.supervisor.protocol import (
    RECORD_KEY, RESUBMITTABLE, SUBMITTED_KEY, TERMINAL, last_metrics,
)
from components.run.ray_access import (
    RayAccessError,
    RayClusterGone,
    RayJobs,
    RayUnreachable,
    RequestPolicy,
    open_dashboard,
)
from components.runspec.lifecycle import WaitFor

# Bump when the provider's behaviour changes: a changed input makes the engine call update,
# because the provider itself is pickled by reference and its code is not part of the diff.
PROVIDER_VERSION = "6"

# Statuses that satisfy each waitFor by themselves (first-step also needs a step line).
_REACHED = {
    WaitFor.SUBMITTED: frozenset({"PENDING", "RUNNING", *TERMINAL}),
    WaitFor.RUNNING: frozenset({"RUNNING", "SUCCEEDED"}),
    WaitFor.FIRST_STEP: frozenset({"SUCCEEDED"}),
    WaitFor.SUCCEEDED: frozenset({"SUCCEEDED"}),
}
# Inputs that define the run: changing one is a different job. The id already hashes the
# entrypoint and env; listing them keeps the plan's reason readable. A re-staging (`staged`, the
# staging Job's name) or new Ray pods (`ray_pods`, grpo_job.py) replace (stop) the job first.
REPLACE_KEYS = ("submission_id", "entrypoint", "runtime_env", "staged", "checked", "ray_pods")
# Inputs that only change how the job is followed or described; Ray keeps a job's metadata
# from its submission, so a metadata change is recorded in the stack only. `job_state` carries
# a refresh's finding (see _job_state).
UPDATE_KEYS = (
    "metadata", "wait_for", "timeout_s", "max_retries", "max_preemptions", "deadline_s", "access",
    "checkpoint_uri", "run_dir", "export_entrypoint", "export_resources", "model_uri", "version",
    "job_state",
)
INPUT_KEYS = (*REPLACE_KEYS, *UPDATE_KEYS)
OUTPUT_KEYS = PROVIDER_OUTPUTS  # what the provider computes (components/run/job_outputs.py)
# What check appends to a refresh's finding, so that the preview reads
# `jobState: "FAILED at step 12" => "FAILED at step 12; resubmitting"`, or
# `"SUCCEEDED, model not exported" => "SUCCEEDED, model not exported; exporting"`.
_RESUBMITTING = "; resubmitting"
_EXPORTING = "; exporting"
_NOT_EXPORTED = "SUCCEEDED, model not exported"


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
        self._mark(props)
        record = self._await_release(props)
        self._gate(props, resume=True)
        with open_dashboard(props["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, props["submission_id"], self.policy)
            progress = self._progress(jobs)
            number = attempts.submit_or_adopt(jobs, props, progress, record, self._noter(props))
            outs = self._follow(jobs, props, progress, number)
        return dynamic.CreateResult(props["submission_id"], outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [key for key in INPUT_KEYS if olds.get(key) != news.get(key)]
        # A refresh found the job FAILED or STOPPED (update resubmits it), or SUCCEEDED without
        # its model exported (update exports it); see check. A released run is neither.
        resubmit = olds.get("status") in RESUBMITTABLE
        exporting = export.export_pending(olds, news)
        return dynamic.DiffResult(
            changes=bool(changed) or resubmit or exporting,
            replaces=[key for key in changed if key in REPLACE_KEYS],
            delete_before_replace=True,
        )

    def update(
        self, _id: str, olds: dict[str, Any], news: dict[str, Any]
    ) -> dynamic.UpdateResult:
        released = self._released(news)
        exporting = export.export_pending(olds, news)
        if released is not None and olds.get("status") not in RESUBMITTABLE and not exporting:
            # The run SUCCEEDED and the cluster was released: following or describing it
            # differently needs no Ray, and must not bring the GPUs back.
            return dynamic.UpdateResult({**olds, **news, **_from_record(released, olds),
                                         "job_state": ""})
        record = released or {}
        if olds.get("status") in RESUBMITTABLE or exporting:
            self._mark(news)  # this run is the stack's, and `up` acts on it: see _await_release
            record = self._await_release(news)
        self._gate(news, resume=True)
        with open_dashboard(news["access"], self.policy) as dashboard:
            jobs = RayJobs(dashboard, news["submission_id"], self.policy)
            progress = self._progress(jobs)
            if olds.get("status") in RESUBMITTABLE:
                # What the preview announced: the refreshed state said FAILED or STOPPED. Ray is
                # asked again, so a job someone resubmitted meanwhile is adopted, not doubled.
                number = attempts.submit_or_adopt(jobs, news, progress, record, self._noter(news))
            elif released is not None:
                # Released after the run SUCCEEDED, its export not done: the cluster was resumed
                # above (a new head, an empty job table); export, and the supervisor releases
                # the GPUs again once the export SUCCEEDED.
                outs = {**olds, **news, **_from_record(released, olds), "job_state": ""}
                outs["export_status"] = export.run_export(
                    jobs, news, self.policy, progress, released.get("export_attempt"))
                outs["state"] = protocol.describe({**released, "released": False,
                                                   "ended": None,
                                                   "export_status": outs["export_status"]})
                return dynamic.UpdateResult(outs)
            else:
                number = attempts.newest(jobs, record)
            outs = self._follow(jobs, {**olds, **news}, progress, number)
        return dynamic.UpdateResult(outs)

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        released = self._released(props)
        if released is not None:
            outs = {**props, **_from_record(released, props)}
        elif self._gate(props, resume=False):
            # Suspended, but not by the supervisor after this run: nothing runs, no head to ask.
            outs = {**props, "state": f"{props.get('status')}, RayCluster suspended"}
        else:
            with open_dashboard(props["access"], self.policy) as dashboard:
                jobs = RayJobs(dashboard, id_, self.policy)
                found = protocol.attempts(jobs.list_jobs(), id_)
                if not found:
                    return dynamic.ReadResult("", {})  # gone from Ray: drop it from the stack
                number = max(found)
                attempt = jobs.for_id(protocol.attempt_id(id_, number))
                info = found[number]
                # How it ended, for the outputs and the preview's reason: a report, so no wait
                # for a node's death to be recorded (update classifies it again, settled).
                ended = (attempts.ending(attempt, info, settle=False)
                         if info["status"] in RESUBMITTABLE else None)
                observed = _observed(attempt, info, props, ended)
                observed["export_status"] = (
                    export.export_status(jobs, props) if info["status"] == "SUCCEEDED"
                    else props.get("export_status")
                )
                outs = {**props, **observed}
        outs["job_state"] = _job_state(outs)
        # The inputs the next diff starts from carry the finding (check turns it into the
        # preview's reason). `access` is left out: it holds the kubeconfig, and inputs a
        # provider returns are plain values (pulumi/dynamic/__main__.py Read serializes them
        # without secrets), so it is never handed back where it could lose its secretness.
        inputs = {key: outs.get(key) for key in INPUT_KEYS if key != "access"}
        return dynamic.ReadResult(id_, outs, inputs)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        # "Ended" is written down first, so that no supervisor tick submits for this run again
        # (protocol.not_ours); on `pulumi destroy` the supervisor and its state are gone already.
        self._mark(props, ended="deleted (destroy or replace)")
        # Suspended: KubeRay deleted every Ray pod, the head and its jobs included.
        if self._gate(props, resume=False):
            return
        try:
            with open_dashboard(props["access"], self.policy) as dashboard:
                self._end(RayJobs(dashboard, id_, self.policy))
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

    def _follow(self, jobs: RayJobs, props: dict[str, Any], progress: "Progress",
                number: int) -> dict:
        attempt, info = _wait(jobs, number, props, self.policy, progress, self._noter(props))
        outs = {**props, **_observed(attempt, info, props), "job_state": ""}
        outs["first_step_s"] = progress.first_step_s or (
            props.get("first_step_s") if _same_attempt(attempt, props) else None)
        outs["timeline"] = timeline.gather(props.get("access") or {}, self.policy, outs)
        outs["export_status"] = props.get("export_status")
        if info["status"] == "SUCCEEDED" and props.get("export_entrypoint"):
            outs["export_status"] = export.run_export(jobs, props, self.policy, progress)
        return outs

    def _end(self, jobs: RayJobs) -> None:
        """Stop every live attempt of the run and of its export and wait until each is terminal.
        Records are kept: the provider's mark says the run ended. A job that appears right
        after (a supervisor tick that was submitting at that moment) is stopped in the next
        round."""
        run = jobs.submission_id
        for _ in range(3):
            listing = jobs.list_jobs()
            runs = (run, protocol.export_run(run))
            live = [info for one in runs for info in protocol.attempts(listing, one).values()
                    if info["status"] not in TERMINAL]
            if not live:
                return
            for info in live:
                one = jobs.for_id(info["submission_id"])
                one.stop()
                poll(one, TERMINAL, time.monotonic() + self.policy.stop_timeout_s, self.policy)
            time.sleep(2 * self.policy.poll_min_s)

    def _released(self, props: dict[str, Any]) -> dict[str, Any] | None:
        """The supervisor's record when it released the cluster after this run, else None."""
        with open_cluster(props.get("access") or {}, self.policy) as cluster:
            record = cluster.record() if cluster else None
            ours = record and record.get("submission_id") == props.get("submission_id")
            # Still suspended: someone may have resumed the cluster by hand since.
            if ours and record.get("released") and cluster.suspended():
                return record
        return None

    def _mark(self, props: dict[str, Any], ended: str | None = None) -> None:
        """Write the provider's mark into the supervisor's state (protocol.MARK_KEY): this run
        is the stack's, or it ended. An ending is written only over this run's own mark (an
        old run's delete never un-marks the run that replaced it)."""
        with open_cluster(props.get("access") or {}, self.policy) as cluster:
            if cluster is None:
                return
            run = props["submission_id"]
            # Read first only for an ending (one kubectl call fewer on every create and update).
            if ended and (cluster.mark() or {}).get("run") not in (None, run):
                return
            cluster.write_mark({"run": run, "at": time.time(), "ended": ended})

    def _await_release(self, props: dict[str, Any]) -> dict[str, Any]:
        """Wait while the supervisor is releasing the GPUs (its record holds a release intent):
        it saved that intent only if the state was unchanged since it last read the mark, so
        a mark written after it has to let the suspend land before the gate resumes the
        cluster, or the new run would be suspended under it. A tick that died with the intent
        is finished (or dropped, for a run no longer the stack's) by the next, within one
        period of the CronJob. Returns the supervisor's record of this run ({} if none): the
        attempts it knows of when Ray's job table was lost with the head."""
        with open_cluster(props.get("access") or {}, self.policy) as cluster:
            if cluster is None:
                return {}
            deadline = time.monotonic() + float(props["timeout_s"])
            said = False
            while ((record := (state := cluster.state()).get(RECORD_KEY) or {}).get(
                    "intent") or {}).get("action") == "release":
                if time.monotonic() > deadline:
                    raise RayAccessError(
                        "the supervisor has been releasing the GPUs of "
                        f"{record.get('submission_id')} since before the deadline; check its "
                        "CronJob (`kubectl get jobs -l app.kubernetes.io/name=verl-gke-supervisor`)"
                        " and run `pulumi up` again"
                    )
                if not said:
                    (self.say or pulumi.log.info)(
                        f"waiting for the supervisor to finish releasing the GPUs of "
                        f"{record.get('submission_id')}, then bringing them back")
                    said = True
                time.sleep(self.policy.poll_max_s)
        run = props.get("submission_id")
        ours = dict(record) if record.get("submission_id") == run else {}
        return protocol.with_lost(run, ours, state.get(SUBMITTED_KEY))

    def _noter(self, props: dict[str, Any]) -> attempts.Note:
        """Records each attempt number, the preemptions before it and the run's first start
        before the provider submits it (protocol.SUBMITTED_KEY), so that one the head loses
        still counts against the budget and the deadline."""
        def note(number: int, preempted: int, first_start: float | None) -> None:
            with open_cluster(props.get("access") or {}, self.policy) as cluster:
                if cluster is not None:
                    cluster.write_submitted(props["submission_id"], number, preempted, first_start)
        return note

    def _gate(self, props: dict[str, Any], resume: bool) -> bool:
        """kube.gate: True when the cluster is suspended (and left so)."""
        return gate(props.get("access") or {}, self.policy, resume=resume,
                    timeout_s=float(props["timeout_s"]), say=self.say or pulumi.log.info)


def _from_record(record: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
    """Outputs from the supervisor's record of a run whose cluster it released."""
    number, ending = record.get("attempt", 0), record.get("ending") or {}
    last = ending.get("reason") if ending.get("attempt") == number else None
    return {
        "status": record.get("status") or props.get("status"),
        "export_status": record.get("export_status") or props.get("export_status"),
        "attempts": number + 1,
        **protocol.counts(number, record.get("preempted") or 0, ending),
        "last_failure": last or record.get("last_failure") or props.get("last_failure"),
        "state": protocol.describe(record),
        "metrics": props.get("metrics"),
    }


def _job_state(observed: dict[str, Any]) -> str:
    """What a refresh records for the next preview: why update would act, or "" for nothing."""
    if export.export_pending(observed, observed):
        return _NOT_EXPORTED
    if observed["status"] not in RESUBMITTABLE:
        return ""
    step = (observed.get("metrics") or {}).get("step")
    return observed.get("last_failure") or protocol.failure(observed, step)


def _input_problems(news: dict[str, Any]) -> list[tuple[str, str]]:
    """What check reports; values still unknown (during a preview) are not judged."""
    known = unknowns.known(news)
    problems = [
        (key, "is required") for key in ("submission_id", "entrypoint")
        if not news.get(key) and not unknowns.is_unknown(news.get(key))
    ]
    if "wait_for" in known and known["wait_for"] not in {w.value for w in WaitFor}:
        problems.append(("wait_for", f"is {known['wait_for']!r}: use "
                         + ", ".join(w.value for w in WaitFor)))
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


def _wait(
    jobs: RayJobs, number: int, props: dict[str, Any], policy: RequestPolicy,
    progress: Progress, note: attempts.Note,
) -> tuple[RayJobs, dict]:
    """Follow attempt `number` until `wait_for`, and after one that ended without reaching it
    do what recovery.decide answers, as the supervisor does: the next attempt while the budget
    of the way it ended lasts (maxPreemptions for a preemption, maxRetries for a failure), else
    fail with the reason; returns the attempt followed last and its record.

    A job is reported as having reached its target only if a status read after the target was
    seen still says so: however fast a job fails, it is never reported running. Only the
    followed attempt's own log is read (its own submission id, its own driver log).
    """
    wait_for = WaitFor(props["wait_for"])
    deadline = time.monotonic() + props["timeout_s"]
    budget = int(props.get("max_retries") or 0)
    # None: no limit of preemptions; no deadline_s in a state from before it was an input.
    preemptions, deadline_s = props.get("max_preemptions"), props.get("deadline_s")
    while True:
        attempt = jobs.for_id(protocol.attempt_id(jobs.submission_id, number))
        progress.follow(attempt)
        info = _poll_target(attempt, wait_for, deadline, policy, progress)
        if info["status"] not in TERMINAL or info["status"] in _REACHED[wait_for]:
            if wait_for is WaitFor.SUBMITTED:
                return attempt, info
            confirmed = attempt.info() or info
            if confirmed["status"] not in RESUBMITTABLE:
                return attempt, confirmed
            info = confirmed
        decision, ended = attempts.decide(attempt, number, info, budget, preemptions, deadline_s)
        if isinstance(decision, recovery.Submit):
            used = protocol.counts(number, protocol.preemptions(info), {
                "attempt": number, "preempted": ended.preempted})
            if ended.preempted:
                limit = ("(no limit within the deadline)" if preemptions is None
                         else f"of {preemptions} (verl-gke:job.maxPreemptions)")
                progress.say(f"preemption {used['preemptions']} {limit}")
            else:
                progress.say(f"retry {used['failures']} of {budget} (verl-gke:job.maxRetries)")
            number = attempts.resubmit(jobs, props, number, info, progress, note, ended)
            continue
        # GiveUp: a budget spent; LeaveAlone: STOPPED (a person, or the supervisor's stop).
        why = (f"{ended.reason}; {decision.reason}" if isinstance(decision, recovery.GiveUp)
               else info["status"])
        raise RayAccessError(
            f"{attempt.where()} ended {why} ({short(info.get('message'))}) before reaching "
            f"{wait_for.value}. Last log lines:\n{log_tail(attempt, info)}\n"
            "Fix the cause, then run `pulumi up --refresh`: it submits the next attempt and "
            "verl resumes from the run's last checkpoint"
        )


def _poll_target(
    jobs: RayJobs, wait_for: WaitFor, deadline: float, policy: RequestPolicy,
    progress: Progress,
) -> dict:
    """Poll until the target is seen or the job is terminal; reads the log tail for first-step.
    RUNNING counts once it has lasted policy.confirm_running_s."""
    if wait_for is WaitFor.RUNNING:
        info = poll(jobs, _REACHED[wait_for] | TERMINAL, deadline, policy, progress.seen)
        if info["status"] != "RUNNING":
            return info
        time.sleep(policy.confirm_running_s)
        return jobs.info() or info
    if wait_for is not WaitFor.FIRST_STEP:
        return poll(jobs, _REACHED[wait_for] | TERMINAL, deadline, policy, progress.seen)
    reached: dict[str, Any] = {}

    def seen(info: dict) -> None:
        log = jobs.log_tail(policy.log_tail_lines, info) if info["status"] == "RUNNING" else None
        progress.seen(info, log)
        if log is not None and last_metrics(log):
            reached.update(info)

    def done(info: dict) -> bool:
        return bool(reached) or info["status"] in TERMINAL

    return poll(jobs, frozenset(), deadline, policy, seen, until=done)


def _same_attempt(jobs: RayJobs, props: dict[str, Any]) -> bool:
    """Whether the outputs in `props` were observed on this attempt (its dashboard path)."""
    return props.get("dashboard_path") == f"/#/jobs/{jobs.submission_id}"


def _observed(jobs: RayJobs, info: dict[str, Any], props: dict[str, Any],
              ended: protocol.Ending | None = None) -> dict[str, Any]:
    """The outputs of one attempt, from its own record and log only: the metrics of an earlier
    attempt are never carried over (when the log cannot be read, the last ones are kept only
    if they were this attempt's). `ended`: how it ended, if it did without success; the last
    failure is then its own, else the one before it (its metadata)."""
    metadata = info.get("metadata") or {}
    previous = props.get("metrics") if _same_attempt(jobs, props) else None
    metrics = tail_metrics(jobs, previous, jobs.policy, info)
    number, preempted = protocol.attempt(info), protocol.preemptions(info)
    ending = ended and {"attempt": number, "preempted": ended.preempted}
    return {
        "status": info["status"],
        "message": short(info.get("message")),
        "start_time": iso(info.get("start_time")),
        "end_time": iso(info.get("end_time")),
        "dashboard_path": f"/#/jobs/{jobs.submission_id}",
        "metrics": metrics,
        "attempts": number + 1,
        **protocol.counts(number, preempted, ending),
        "last_failure": (ended and ended.reason) or metadata.get(protocol.LAST_FAILURE_KEY)
        or props.get("last_failure"),
        "state": protocol.describe({"status": info["status"], "attempt": number,
                                    "preempted": preempted,
                                    "step": (metrics or {}).get("step")}),
    }
