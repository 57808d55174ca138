"""The run's supervisor: one look at the run, every few minutes, from a pod in the cluster.

A CronJob (components/ray/supervision.py, `concurrencyPolicy: Forbid`, so one tick at a time)
runs `python -m components.ray.supervisor` with this file and protocol.py mounted from a
ConfigMap, and the run's spec (`run.json`, written by Pulumi) next to them. Each tick reads the
run's record in Ray through the head Service (Jobs REST API, no port-forward) and acts:
- RUNNING or PENDING: past the wall-clock deadline (from the first attempt's start) it stops
  the run for good; with no new verl step for `stall_s` (before the first step: since the
  attempt started) it stops the attempt and counts it as failed;
- FAILED, or STOPPED by its own stall stop: resubmits under the same id while the retry budget
  lasts (protocol.resubmit: the next attempt resumes from the run's checkpoints); STOPPED by
  anyone else (a person, `pulumi destroy`) is left alone;
- SUCCEEDED: runs the export once (`<id>-export`, on a GPU worker), then, with `release_gpus`,
  suspends the RayCluster: KubeRay deletes every Ray pod and the GPU nodes are free.
What it did is kept in its state ConfigMap (protocol.RECORD_KEY), which the provider reads on
`pulumi refresh`, and printed to its log.

Standard library only, so that its image is a plain Python (components/facts/pins.py). It
talks to Kubernetes with its service account's token: a Role allows it to read and patch its
state ConfigMap and to patch the one RayCluster, nothing else.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Protocol

from components.ray import protocol
from components.ray.protocol import RESUBMITTABLE, TERMINAL, Submission

# Ray's JobManager.JOB_MONITOR_LOOP_PERIOD_S (ray/dashboard/modules/job/job_manager.py).
_MONITOR_PERIOD_S = 1.0
# Lines of the driver log's tail read per tick for the step: more than the provider's 200, so
# that bursts of NCCL INFO lines between two steps do not hide the last step line.
_LOG_LINES = 2000
_SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class RayHttp:
    """Ray's Jobs REST API for one submission id (the same calls as ray_access.RayJobs)."""

    def __init__(self, base_url: str, submission_id: str, timeout_s: float = 15.0,
                 settle_s: float = 120.0) -> None:
        self.base = base_url.rstrip("/")
        self.submission_id = submission_id
        self.timeout_s, self.settle_s = timeout_s, settle_s

    def info(self) -> dict[str, Any] | None:
        status, body = self._call("GET", f"/api/jobs/{self.submission_id}")
        return None if status == 404 else json.loads(body)

    def submit(self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
               resources: dict[str, Any] | None = None) -> bool:
        body = {"entrypoint": entrypoint, "submission_id": self.submission_id,
                "runtime_env": runtime_env, "metadata": metadata, **(resources or {})}
        status, text = self._call("POST", "/api/jobs/", body)
        if status == 500 and "already exists" in text:
            return False
        self._check(status, text, "submitting")
        return True

    def stop(self) -> None:
        self._call("POST", f"/api/jobs/{self.submission_id}/stop")

    def delete(self) -> bool:
        """Delete a terminal record once its supervisor actor is dead (see RayJobs.delete)."""
        deadline = time.monotonic() + self.settle_s
        while self._supervisor_alive():
            info = self.info()
            if info is not None and info["status"] not in TERMINAL:
                return False
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        time.sleep(2 * _MONITOR_PERIOD_S)
        status, text = self._call("DELETE", f"/api/jobs/{self.submission_id}")
        if status == 500 and "non-terminal state" in text:
            return False
        return status == 200

    def log_tail(self, lines: int, info: dict[str, Any] | None = None) -> str:
        node = (info or self.info() or {}).get("driver_node_id")
        if not node:
            return ""
        query = urllib.parse.urlencode(
            {"submission_id": self.submission_id, "node_id": node, "lines": lines})
        status, text = self._call("GET", f"/api/v0/logs/file?{query}")
        return text if status == 200 else ""

    def live_jobs(self, metadata: dict[str, str]) -> list[dict[str, Any]]:
        """Asked again after a 500: a record deleted while Ray lists them (see RayJobs.live_jobs)."""
        for _ in range(3):
            status, text = self._call("GET", "/api/jobs/")
            if status != 500:
                break
            time.sleep(0.5)
        self._check(status, text, "listing jobs")
        return [job for job in json.loads(text)
                if job.get("status") not in TERMINAL
                and all((job.get("metadata") or {}).get(k) == v for k, v in metadata.items())]

    def _supervisor_alive(self) -> bool:
        query = urllib.parse.urlencode({
            "filter_keys": "name", "filter_predicates": "=",
            "filter_values": f"_ray_internal_job_actor_{self.submission_id}"})
        _, text = self._call("GET", f"/api/v0/actors?{query}")
        actors = json.loads(text)["data"]["result"]["result"]
        return any(actor["state"] != "DEAD" for actor in actors)

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return reply.status, reply.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def _check(self, status: int, text: str, action: str) -> None:
        if status != 200:
            raise RuntimeError(f"{self.submission_id}: {action} answered HTTP {status}: "
                               f"{text.strip()[-300:]}")


class Cluster(Protocol):
    """Where the supervisor keeps its record, and the RayCluster it may suspend."""

    def record(self) -> dict[str, Any] | None: ...

    def save(self, record: dict[str, Any]) -> None: ...

    def suspend(self) -> None: ...


class InCluster:
    """The Kubernetes API with the pod's service account (merge patches only)."""

    def __init__(self, namespace: str, state: str, ray_cluster: str) -> None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self._api = f"https://{host}:{port}"
        self._state = f"/api/v1/namespaces/{namespace}/configmaps/{state}"
        self._cluster = f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{ray_cluster}"
        with open(f"{_SERVICE_ACCOUNT}/token") as file:
            self._token = file.read().strip()
        self._tls = ssl.create_default_context(cafile=f"{_SERVICE_ACCOUNT}/ca.crt")

    def record(self) -> dict[str, Any] | None:
        data = (self._call("GET", self._state).get("data") or {})
        return json.loads(data[protocol.RECORD_KEY]) if protocol.RECORD_KEY in data else None

    def save(self, record: dict[str, Any]) -> None:
        self._call("PATCH", self._state, {"data": {protocol.RECORD_KEY: json.dumps(record)}})

    def suspend(self) -> None:
        # spec.suspend only: a field Pulumi's manifest never sets, so no apply conflict; never
        # a worker group's replicas, which would take the whole atomic workerGroupSpecs list
        # from Pulumi (KUBERAY-RAYJOB-REVIEW.md rows 11 and 15).
        self._call("PATCH", self._cluster, {"spec": {"suspend": True}})

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self._api + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self._token}",
                     "Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(request, timeout=30, context=self._tls) as reply:
            return json.loads(reply.read())


def tick(
    spec: dict[str, Any], ray: Callable[[str], Any], cluster: Cluster,
    say: Callable[[str], None] = print, now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Look at the run once and act (see the module docstring); returns the record saved."""
    sid = spec["submission_id"]
    record = cluster.record() or {}
    if record.get("submission_id") != sid:
        record = {"submission_id": sid}  # a new run: what was known of the last one is moot
    if record.get("released"):
        return record  # the head and its job table are gone with the pods; nothing is left to do
    jobs = ray(sid)
    info = jobs.info()
    if info is None:
        if not record.get("released"):
            record.update(status=None)
            say(f"{sid}: no record in Ray; nothing to follow (ended, or not submitted yet)")
        return _save(cluster, record, now)
    attempt = protocol.attempt(info)
    if record.get("attempt") != attempt:
        record.update(attempt=attempt, step_attempt=None, gave_up=None)
    record.update(status=info["status"],
                  last_failure=(info.get("metadata") or {}).get(protocol.LAST_FAILURE_KEY))
    if info.get("start_time"):
        record.setdefault("first_start", info["start_time"] / 1000)
    if info["status"] in TERMINAL and record.get("step_attempt") != attempt:
        # Ended between two ticks: where it got to, from the log's tail, read once.
        step = protocol.last_metrics(jobs.log_tail(_LOG_LINES, info)).get("step")
        if step is not None:
            record.update(step=step, step_attempt=attempt)
    if info["status"] not in TERMINAL:
        _follow(spec, jobs, info, record, now(), say)
    elif info["status"] in RESUBMITTABLE:
        _retry(spec, jobs, info, record, now(), say)
    else:
        _finish(spec, ray, cluster, record, say)
    return _save(cluster, record, now)


def _follow(spec: dict, jobs: Any, info: dict, record: dict, now: float,
            say: Callable[[str], None]) -> None:
    """A live attempt: track its steps; stop it at the deadline or when it stalls."""
    metrics = protocol.last_metrics(jobs.log_tail(_LOG_LINES, info)) if info.get(
        "driver_node_id") else {}
    step = metrics.get("step")
    attempt = record["attempt"]
    if step is not None and (record.get("step_attempt") != attempt or step != record.get("step")):
        record.update(step=step, step_attempt=attempt, last_step_at=now)
        record.setdefault("first_step_at", now)
    started = (info.get("start_time") or now * 1000) / 1000
    progress = record["last_step_at"] if record.get("step_attempt") == attempt else started
    if now - record.get("first_start", started) > spec["deadline_s"]:
        reason = f"deadline of {_duration(spec['deadline_s'])} reached"
        _stop(jobs, record, reason, say)
        record["gave_up"] = reason
    elif now - progress > spec["stall_s"]:
        where = f"after step {int(step)}" if step is not None else "before its first step"
        _stop(jobs, record, f"no new step for {_duration(spec['stall_s'])} {where}", say)


def _stop(jobs: Any, record: dict, reason: str, say: Callable[[str], None]) -> None:
    say(f"{jobs.submission_id}: stopping attempt {record['attempt']}: {reason}")
    record["stopped"] = {"attempt": record["attempt"], "reason": reason}
    jobs.stop()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = jobs.info()
        if info is None or info["status"] in TERMINAL:
            record["status"] = info["status"] if info else None
            return
        time.sleep(1)


def _retry(spec: dict, jobs: Any, info: dict, record: dict, now: float,
           say: Callable[[str], None]) -> None:
    """A FAILED attempt, or one this supervisor stopped for a stall: the next one, if allowed."""
    stopped = record.get("stopped") or {}
    ours = stopped.get("attempt") == record["attempt"]
    if info["status"] == "STOPPED" and not ours:
        record["gave_up"] = "stopped by someone else: left as it is"
        return
    if record.get("gave_up") or (ours and stopped["reason"].startswith("deadline")):
        return
    if now - record.get("first_start", now) > spec["deadline_s"]:
        record["gave_up"] = f"deadline of {_duration(spec['deadline_s'])} reached"
        return
    if not protocol.may_retry(info, int(spec["max_retries"])):
        record["gave_up"] = f"retry budget of {spec['max_retries']} spent"
        say(f"{jobs.submission_id}: {info['status']}; {record['gave_up']}")
        return
    mine = {key: spec["metadata"][key] for key in (protocol.STACK_KEY, protocol.RESOURCE_KEY)}
    others = [job["submission_id"] for job in jobs.live_jobs(mine)
              if job["submission_id"] not in (jobs.submission_id, _export_id(spec))]
    if others:
        say(f"{jobs.submission_id}: waiting for {', '.join(others)} of the same run to end")
        return
    why = stopped["reason"] if ours else protocol.failure(info, record.get("step")
                                                           if record.get("step_attempt")
                                                           == record["attempt"] else None)
    outcome = protocol.resubmit(jobs, Submission.of(spec), info, why,
                                lambda line: say(f"{jobs.submission_id}: {line}"))
    if outcome == "resubmitted":
        record.update(last_failure=why, attempt=record["attempt"] + 1, status="PENDING",
                      step_attempt=None)


def _finish(spec: dict, ray: Callable[[str], Any], cluster: Cluster, record: dict,
            say: Callable[[str], None]) -> None:
    """SUCCEEDED: export once, then release the GPUs."""
    export = spec.get("export")
    if export and record.get("export_status") != "SUCCEEDED":
        jobs = ray(_export_id(spec))
        job = Submission.of({**export, "runtime_env": spec["runtime_env"],
                             "metadata": {**spec["metadata"], protocol.ROLE_KEY: "model-export"}})
        info = jobs.info()
        if info is None:
            protocol.submit_first(jobs, job)
            say(f"{jobs.submission_id}: export submitted")
            info = jobs.info() or {"status": "PENDING"}
        elif info["status"] in RESUBMITTABLE:
            if protocol.may_retry(info, int(spec["max_retries"])):
                protocol.resubmit(jobs, job, info, f"export {info['status']}",
                                  lambda line: say(f"{jobs.submission_id}: {line}"))
                info = jobs.info() or info
            else:
                record["gave_up"] = "export failed; retry budget spent"
        record["export_status"] = info["status"]
        if info["status"] != "SUCCEEDED":
            return
    if spec.get("release_gpus") and not record.get("released"):
        say(f"{spec['submission_id']}: SUCCEEDED"
            + (", model exported" if export else "") + "; suspending the RayCluster")
        cluster.suspend()
        record["released"] = True


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _export_id(spec: dict) -> str:
    return spec["submission_id"] + protocol.EXPORT_SUFFIX


def _save(cluster: Cluster, record: dict, now: Callable[[], float]) -> dict:
    record["updated"] = now()
    record["state"] = protocol.describe(record)
    cluster.save(record)
    return record


def main() -> int:
    with open(os.environ.get("SUPERVISOR_SPEC", "/etc/verl-gke/run.json")) as file:
        spec = json.load(file)
    cluster = InCluster(spec["namespace"], spec["state"], spec["ray_cluster"])
    try:
        record = tick(spec, lambda sid: RayHttp(spec["dashboard"], sid), cluster,
                      say=lambda line: print(line, flush=True))
    except (OSError, RuntimeError, TimeoutError) as error:
        # The head restarting, the API server busy: the next tick looks again.
        print(f"{spec['submission_id']}: this tick could not finish: {error}", flush=True)
        return 1
    print(f"{spec['submission_id']}: {record['state']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
