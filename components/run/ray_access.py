"""Reaching a Ray dashboard from the machine running Pulumi, and talking to its Jobs API.

Two ways in, both only for the duration of one provider call:
- an address the user configures (`verl-gke:job.dashboardAddress`: a tunnel, IAP, or any Ray
  cluster), used as is;
- by default, `kubectl port-forward` to the RayCluster's head Service through the Kubernetes API,
  with the cluster's kubeconfig written to a private temp file (mode 600) deleted afterwards.
The dashboard is never exposed through a LoadBalancer or an Ingress: it accepts jobs, i.e.
arbitrary code, from anyone who reaches it (ai-on-gke keeps it behind IAP only).

The Jobs API is called over its documented REST endpoints with `requests` rather than through
`ray.job_submission.JobSubmissionClient`, because that client sends every request, including
the version probe in its constructor, with no timeout: a listener that accepts and never
answers hangs it forever. Here every request has a timeout and connection failures are retried
with exponential backoff (a flaky port-forward, ray #24889, is re-opened between attempts).
This also keeps `import ray` (about a second) out of the provider process.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import json
import os
import queue
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import requests

from components.supervisor import protocol

KUBECTL = "kubectl"
# The first kubectl that tunnels port-forward over WebSocket by default (falling back to SPDY):
# KUBECTL_PORT_FORWARD_WEBSOCKETS, beta and on in 1.31 (kubernetes.io/blog/2024/08/20/
# websockets-transition, KEP-4006). GKE's DNS endpoint is a Google front end, not the API
# server (REAL-PROVIDER-REVIEW-4 finding 4), and "many modern proxies ... no longer support"
# SPDY/3.1, which older clients speak. README names the minimum.
KUBECTL_MINIMUM = (1, 31)
_CLIENT_VERSION = re.compile(r"v?(\d+)\.(\d+)")
_kubectl_checked: str | None = None  # the client version that passed, once per process
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) ->")
# Ray's JobManager.JOB_MONITOR_LOOP_PERIOD_S (ray/dashboard/modules/job/job_manager.py).
_JOB_MONITOR_PERIOD_S = 1.0
# Ray's JobStatus values that never change again (ray/dashboard/modules/job/common.py).
TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def _deleted_meanwhile(reply: requests.Response) -> bool:
    """Ray's answer when another actor (the supervisor, a second `pulumi up`) deleted the record
    between the head's lookup and its job agent's: the head finds the job and forwards the call
    (ray/dashboard/modules/job/job_head.py stop_job, delete_job), the agent answers 404 "Job <id>
    does not exist" (job_agent.py), and the head re-raises that as a 500 whose text reads
    "Request failed with status code 404: ..." (JobAgentSubmissionClient._raise_error). It
    means the same as the head's own 404: there is no such record (any more)."""
    return "Request failed with status code 404" in reply.text


@dataclass(frozen=True)
class RequestPolicy:
    """Timeouts and retries of every call to Ray; the defaults suit a remote GKE cluster."""

    timeout_s: float = 15.0  # per HTTP request, connect and read each
    attempts: int = 4  # per request, on connection errors and timeouts
    backoff_s: float = 1.0  # before the 2nd attempt; doubles after each
    forward_timeout_s: float = 30.0  # for kubectl to report its local port
    # Job status polling: every poll_min_s at first, then a tenth of the time waited so far, up
    # to poll_max_s. A status change is seen at most 10% (or poll_min_s) after it happens, so
    # short waits stay quick and a wait of hours costs one request every poll_max_s.
    poll_min_s: float = 0.1
    poll_max_s: float = 5.0
    stop_timeout_s: float = 120.0  # for a stopped job to reach a terminal state
    progress_every_s: float = 30.0  # at most one progress line this often, besides changes
    log_tail_lines: int = 200  # lines of the driver log read for metrics and error reports
    # waitFor running: RUNNING counts if a read this long after it still says so. Ray marks a
    # job RUNNING before it starts the entrypoint and sees the process exit within its 0.1 s
    # poll (job_supervisor.py run, _polling, SUBPROCESS_POLL_PERIOD_S). Longer would show in
    # `make bench`'s create -> RUNNING; a Ray slower than that to see an exit (a loaded head)
    # can still report such a job RUNNING, which first-step, the default, never does.
    confirm_running_s: float = 0.1
    # How long after a FAILED attempt's end a lost node may still be recorded (protocol.SETTLE_S).
    settle_s: float = protocol.SETTLE_S


class RayAccessError(RuntimeError):
    """A call to Ray failed; the message names the job, the address and what to do."""


class RayUnreachable(RayAccessError):
    """No answer from the dashboard at all (as opposed to an answer that is an error)."""


class RayClusterGone(RayUnreachable):
    """The Kubernetes API says the head Service (or its namespace) does not exist: no RayCluster
    is left to run a job, as opposed to a dashboard that is merely unreachable right now."""


class KubectlTooOld(RayAccessError):
    """The kubectl on PATH cannot port-forward through the DNS endpoint (KUBECTL_MINIMUM)."""


# kubectl's answer when the Service or its namespace is gone (the API server's NotFound status).
_NOT_FOUND = re.compile(r'\(NotFound\).*(services|namespaces) "[^"]*" not found')


class Dashboard(abc.ABC):
    """Where the dashboard is right now, and what to tell the user when it does not answer."""

    @abc.abstractmethod
    def address(self) -> str: ...

    @abc.abstractmethod
    def describe(self) -> str: ...

    @abc.abstractmethod
    def hint(self) -> str: ...


class FixedDashboard(Dashboard):
    def __init__(self, address: str) -> None:
        self._address = address.rstrip("/")

    def address(self) -> str:
        return self._address

    def describe(self) -> str:
        return self._address

    def hint(self) -> str:
        return (
            f"check that verl-gke:job.dashboardAddress points at a running Ray dashboard "
            f"(`curl {self._address}/api/version` must answer)"
        )


class PortForward(Dashboard):
    """`kubectl port-forward svc/<head> :<port>`, re-opened if kubectl exits between calls."""

    def __init__(
        self, kubeconfig_path: str, namespace: str, service: str, port: int, timeout_s: float
    ) -> None:
        self._command = [
            KUBECTL, "--kubeconfig", kubeconfig_path, "-n", namespace,
            "port-forward", f"svc/{service}", f":{port}",
        ]
        self._target = f"svc/{service}:{port} in namespace {namespace}"
        self._namespace, self._service = namespace, service
        self._timeout_s = timeout_s
        self._process: subprocess.Popen | None = None
        self._local = ""
        # kubectl prints a line per connection; draining keeps its pipe from filling up, and
        # the tail explains a failure.
        self._output: collections.deque[str] = collections.deque(maxlen=20)

    def address(self) -> str:
        if self._process is None or self._process.poll() is not None:
            self._start()
        return self._local

    def describe(self) -> str:
        return f"{self._local or 'a port-forward'} (forwarded to {self._target})"

    def hint(self) -> str:
        return (
            f"check that the RayCluster head is up: `kubectl -n {self._namespace} get "
            f"svc/{self._service} pods -l ray.io/node-type=head`, or set "
            "verl-gke:job.dashboardAddress to reach the dashboard another way"
        )

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def _start(self) -> None:
        self.close()
        require_kubectl()
        try:
            process = subprocess.Popen(
                self._command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, text=True,
            )
        except FileNotFoundError as error:
            raise RayUnreachable(
                f"cannot port-forward to {self._target}: `{KUBECTL}` is not on PATH; install "
                "kubectl with gke-gcloud-auth-plugin, or set verl-gke:job.dashboardAddress"
            ) from error
        self._process = process
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, args=(process, lines), daemon=True).start()
        deadline = time.monotonic() + self._timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:  # kubectl closed its output: it is exiting
                process.wait(timeout=5)
                break
            if match := _FORWARDING.search(line):
                self._local = f"http://127.0.0.1:{match.group(1)}"
                return
        exit_code = process.poll()
        self.close()
        failure = (
            f"exited with code {exit_code}" if exit_code is not None
            else f"reported no local port within {self._timeout_s:g}s"
        )
        output = " | ".join(self._output) or "no output"
        gone = _NOT_FOUND.search(output)
        raise (RayClusterGone if gone else RayUnreachable)(
            f"kubectl port-forward to {self._target} {failure} (kubectl said: {output}); "
            f"{self.hint()}"
        )

    def _drain(self, process: subprocess.Popen, lines: queue.Queue) -> None:
        for line in process.stdout:
            self._output.append(line.strip())
            lines.put(line)
        lines.put(None)


def require_kubectl() -> str:
    """The kubectl client's version, checked against KUBECTL_MINIMUM once per process before the
    first port-forward (`kubectl version --client -o json`, which asks no server); an older or
    unreadable client is refused with what to install."""
    global _kubectl_checked
    if _kubectl_checked is not None:
        return _kubectl_checked
    minimum = ".".join(map(str, KUBECTL_MINIMUM))
    fix = (f"install kubectl {minimum} or newer (`gcloud components install kubectl`, or "
           "kubernetes.io/docs/tasks/tools), or set verl-gke:job.dashboardAddress to reach the "
           "dashboard another way")
    try:
        answer = subprocess.run(
            [KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True,
            timeout=30, stdin=subprocess.DEVNULL,
        )
        client = json.loads(answer.stdout)["clientVersion"]
        version = client.get("gitVersion") or f"v{client['major']}.{client['minor']}"
        found = _CLIENT_VERSION.match(version)
    except FileNotFoundError as error:
        raise RayUnreachable(f"`{KUBECTL}` is not on PATH: {fix}") from error
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as error:
        raise RayAccessError(
            f"cannot read the kubectl client's version (`{KUBECTL} version --client -o json`: "
            f"{error}); the port-forward needs kubectl {minimum} or newer: {fix}") from error
    if found is None or (int(found.group(1)), int(found.group(2))) < KUBECTL_MINIMUM:
        raise KubectlTooOld(
            f"kubectl {version} is older than {minimum}: its port-forward speaks SPDY only, which a "
            f"proxy such as GKE's DNS endpoint (a Google front end) need not pass; kubectl "
            f"{minimum} tunnels it over WebSocket: {fix}")
    _kubectl_checked = version
    return version


@contextlib.contextmanager
def open_dashboard(access: dict[str, Any], policy: RequestPolicy) -> Iterator[Dashboard]:
    """The dashboard for one provider call: the configured address, or a port-forward.

    `access` is either {"address": url} or {"kubeconfig", "namespace", "service", "port"}.
    """
    if access.get("address"):
        yield FixedDashboard(access["address"])
        return
    # mkstemp creates the file with mode 600: the kubeconfig is readable by this user only.
    fd, path = tempfile.mkstemp(prefix="verl-gke-kubeconfig-", suffix=".yaml")
    forward = None
    try:
        with os.fdopen(fd, "w") as file:
            file.write(access["kubeconfig"])
        forward = PortForward(
            path, access["namespace"], access["service"], int(access["port"]),
            policy.forward_timeout_s,
        )
        yield forward
    finally:
        if forward is not None:
            forward.close()
        os.unlink(path)


class RayJobs:
    """Ray's Jobs REST API for one submission id, with timeouts, retries and clear errors."""

    def __init__(self, dashboard: Dashboard, submission_id: str, policy: RequestPolicy,
                 session: requests.Session | None = None) -> None:
        self.dashboard = dashboard
        self.submission_id = submission_id
        self.policy = policy
        # One keep-alive connection for the whole provider call: through a port-forward each new
        # connection is a new stream through the API server.
        self._session = session or requests.Session()

    def for_id(self, submission_id: str) -> "RayJobs":
        """The same dashboard and connection, for another submission id (another attempt)."""
        return RayJobs(self.dashboard, submission_id, self.policy, self._session)

    def submit(
        self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
        resources: dict[str, Any] | None = None,
    ) -> bool:
        """Submit the job; False if a job with this submission id already exists.

        `resources` are JobSubmitRequest's entrypoint_num_cpus, entrypoint_num_gpus,
        entrypoint_memory and entrypoint_resources (ray/dashboard/modules/job/common.py): a job
        that requests none runs its entrypoint on the head.
        """
        body = {
            "entrypoint": entrypoint,
            "submission_id": self.submission_id,
            "runtime_env": runtime_env,
            "metadata": metadata,
            **(resources or {}),
        }
        reply = self._request("POST", "/api/jobs/", json=body, ok=(200, 500))
        if reply.status_code == 500:
            # Ray answers a duplicate id with 500 and "already exists" in the traceback text.
            if "already exists" in reply.text:
                return False
            self._fail("submitting", reply)
        return True

    def info(self) -> dict[str, Any] | None:
        """The job's JobDetails (status, message, start_time, ...); None if Ray has no such job."""
        reply = self._request("GET", f"/api/jobs/{self.submission_id}", ok=(200, 404))
        return None if reply.status_code == 404 else reply.json()

    def stop(self) -> None:
        """Ask Ray to stop the job; a finished or unknown job is left as it is."""
        self._stop(self.submission_id)

    def delete(self) -> bool:
        """Remove a finished job's record so that its submission id can be submitted again.

        True only when this call removed it. False when there was none (someone else deleted
        it), or when it is not terminal (any more): someone resubmitted it meanwhile, and Ray
        refuses to delete a live record (job_manager.py delete_job, "non-terminal state").
        Ray's job monitor (ray/dashboard/modules/job/job_manager.py, _monitor_job_internal)
        pings the job's supervisor actor once a second and, when that actor has died and the
        record is gone, writes a FAILED record back, over a resubmitted job with the same id
        too. So wait until the supervisor is dead and the monitor has had two periods to see it.
        """
        deadline = time.monotonic() + self.policy.stop_timeout_s
        while self._supervisor_alive():
            info = self.info()
            if info is not None and info["status"] not in TERMINAL_STATUSES:
                return False
            if time.monotonic() > deadline:
                raise RayAccessError(
                    f"{self.where()}: its supervisor actor is still alive after "
                    f"{self.policy.stop_timeout_s:g}s; stop it with `ray job stop "
                    f"{self.submission_id}` and run `pulumi up` again"
                )
            time.sleep(self.policy.poll_min_s)
        time.sleep(2 * _JOB_MONITOR_PERIOD_S)
        reply = self._request("DELETE", f"/api/jobs/{self.submission_id}", ok=(200, 404, 500))
        if reply.status_code == 500:
            if "non-terminal state" in reply.text or _deleted_meanwhile(reply):
                return False
            self._fail("deleting", reply)
        return reply.status_code == 200

    def _supervisor_alive(self) -> bool:
        reply = self._request("GET", "/api/v0/actors", params={
            "filter_keys": "name",
            "filter_predicates": "=",
            "filter_values": f"_ray_internal_job_actor_{self.submission_id}",
        })
        return any(actor["state"] != "DEAD" for actor in protocol.state_rows(reply.json()))

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the GCS knows, the dead ones with their end and its reason
        (protocol.NODES_QUERY)."""
        path, params = protocol.NODES_QUERY
        return protocol.state_rows(self._request("GET", path, params=params).json())

    def actors_of(self, job_id: str) -> list[dict[str, Any]]:
        """The actors of Ray job `job_id` (a submission's `job_id`), the dead ones included."""
        path, params = protocol.actors_query(job_id)
        return protocol.state_rows(self._request("GET", path, params=params).json())

    def logs(self) -> str:
        """The driver's whole log (Jobs API), for tools that need every line (`make curve`).
        The job's provider never calls it: it reads the tail (log_tail)."""
        return self._request("GET", f"/api/jobs/{self.submission_id}/logs").json()["logs"]

    def log_tail(self, lines: int, info: dict[str, Any] | None = None) -> str:
        """The last `lines` lines of the driver's log, read on its node, never the whole log.

        The Jobs API's /logs returns the whole file; Ray's State API serves a tail
        (ray/dashboard/modules/state/state_head.py get_logs, `lines`; the log agent seeks from
        the end of the file, ray/dashboard/modules/log/log_agent.py), which is what
        `ray logs job --submission-id <id> --tail N` calls (ray/util/state/api.py get_log). It
        needs the node the driver runs on (GetLogOptions refuses a query without a node): the
        job's `driver_node_id`, from `info` (the job's JobDetails) or asked for here.
        """
        info = info if info is not None else self.info()
        node_id = (info or {}).get("driver_node_id")
        if not node_id:
            return ""  # not started yet: no driver, no log
        reply = self._request("GET", "/api/v0/logs/file", ok=(200, 404, 500), params={
            "submission_id": self.submission_id, "node_id": node_id, "lines": lines,
        })
        if reply.status_code != 200:
            # A job whose driver has not written yet has no log file; say so, not an error.
            return ""
        return reply.text

    def list_jobs(self) -> list[dict[str, Any]]:
        """Every record of the job table (GET /api/jobs/).

        Ray lists the job table by reading its keys, then each record; a record deleted in
        between (by hand, or the ClusterCheck's resubmission) fails the whole list with a bare
        500 (ray/dashboard/modules/job/common.py `get_all_jobs` returns None for it,
        job_head.py `list_jobs` calls dataclasses.asdict on it). The next listing does not see
        the deleted key, so the list is asked for again, up to `policy.attempts` times.
        """
        for _ in range(self.policy.attempts):
            reply = self._request("GET", "/api/jobs/", ok=(200, 500))
            if reply.status_code == 200:
                break
            time.sleep(self.policy.poll_min_s)
        else:
            self._fail("listing jobs", reply)
        return reply.json()

    def live_jobs(self, metadata: dict[str, str]) -> list[dict[str, Any]]:
        """Every job not yet finished whose metadata holds all of `metadata`, this one included."""
        return [
            job for job in self.list_jobs()
            if job.get("status") not in TERMINAL_STATUSES
            and all((job.get("metadata") or {}).get(k) == v for k, v in metadata.items())
        ]

    def stop_other(self, submission_id: str) -> None:
        """Ask Ray to stop another job of the same Ray cluster."""
        self._stop(submission_id)

    def _stop(self, submission_id: str) -> None:
        reply = self._request("POST", f"/api/jobs/{submission_id}/stop", ok=(200, 404, 500))
        if reply.status_code == 500 and not _deleted_meanwhile(reply):
            self._fail("stopping", reply)

    def info_of(self, submission_id: str) -> dict[str, Any] | None:
        reply = self._request("GET", f"/api/jobs/{submission_id}", ok=(200, 404))
        return None if reply.status_code == 404 else reply.json()

    def where(self) -> str:
        return f"Ray job {self.submission_id} at {self.dashboard.describe()}"

    def _request(
        self, method: str, path: str, ok: tuple[int, ...] = (200,), **kwargs: Any
    ) -> requests.Response:
        delay = self.policy.backoff_s
        for attempt in range(1, self.policy.attempts + 1):
            try:
                url = self.dashboard.address() + path
                reply = self._session.request(
                    method, url, timeout=self.policy.timeout_s, **kwargs
                )
            except (requests.ConnectionError, requests.Timeout) as error:
                last_error = error
                if attempt < self.policy.attempts:
                    time.sleep(delay)
                    delay *= 2
                continue
            if reply.status_code not in ok:
                self._fail(f"{method} {path}", reply)
            return reply
        raise RayUnreachable(
            f"{self.where()}: no answer to {method} {path} after {self.policy.attempts} "
            f"attempts of {self.policy.timeout_s:g}s ({type(last_error).__name__}); "
            f"{self.dashboard.hint()}"
        )

    def _fail(self, action: str, reply: requests.Response) -> None:
        raise RayAccessError(
            f"{self.where()}: {action} answered HTTP {reply.status_code}: "
            f"{reply.text.strip()[-500:]}; fix the cause above, then run `pulumi up` again"
        )
