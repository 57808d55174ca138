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

KUBECTL = "kubectl"
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) ->")
# Ray's JobManager.JOB_MONITOR_LOOP_PERIOD_S (ray/dashboard/modules/job/job_manager.py).
_JOB_MONITOR_PERIOD_S = 1.0


@dataclass(frozen=True)
class RequestPolicy:
    """Timeouts and retries of every call to Ray; the defaults suit a remote GKE cluster."""

    timeout_s: float = 15.0  # per HTTP request, connect and read each
    attempts: int = 4  # per request, on connection errors and timeouts
    backoff_s: float = 1.0  # before the 2nd attempt; doubles after each
    forward_timeout_s: float = 30.0  # for kubectl to report its local port
    poll_min_s: float = 0.25  # job status polling starts here and doubles...
    poll_max_s: float = 5.0  # ...up to here, so short waits are quick and long ones are cheap
    stop_timeout_s: float = 120.0  # for a stopped job to reach a terminal state


class RayAccessError(RuntimeError):
    """A call to Ray failed; the message names the job, the address and what to do."""


class RayUnreachable(RayAccessError):
    """No answer from the dashboard at all (as opposed to an answer that is an error)."""


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
        raise RayUnreachable(
            f"kubectl port-forward to {self._target} {failure} (kubectl said: {output}); "
            f"{self.hint()}"
        )

    def _drain(self, process: subprocess.Popen, lines: queue.Queue) -> None:
        for line in process.stdout:
            self._output.append(line.strip())
            lines.put(line)
        lines.put(None)


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

    def __init__(self, dashboard: Dashboard, submission_id: str, policy: RequestPolicy) -> None:
        self.dashboard = dashboard
        self.submission_id = submission_id
        self.policy = policy

    def submit(self, entrypoint: str, runtime_env: dict, metadata: dict[str, str]) -> bool:
        """Submit the job; False if a job with this submission id already exists."""
        body = {
            "entrypoint": entrypoint,
            "submission_id": self.submission_id,
            "runtime_env": runtime_env,
            "metadata": metadata,
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
        self._request("POST", f"/api/jobs/{self.submission_id}/stop", ok=(200, 404))

    def delete(self) -> None:
        """Remove a finished job's record so that its submission id can be submitted again.

        Ray's job monitor (ray/dashboard/modules/job/job_manager.py, _monitor_job_internal)
        pings the job's supervisor actor once a second and, when that actor has died and the
        record is gone, writes a FAILED record back, over a resubmitted job with the same id
        too. So wait until the supervisor is dead and the monitor has had two periods to see it.
        """
        deadline = time.monotonic() + self.policy.stop_timeout_s
        while self._supervisor_alive():
            if time.monotonic() > deadline:
                raise RayAccessError(
                    f"{self.where()}: its supervisor actor is still alive after "
                    f"{self.policy.stop_timeout_s:g}s; stop it with `ray job stop "
                    f"{self.submission_id}` and run `pulumi up` again"
                )
            time.sleep(self.policy.poll_min_s)
        time.sleep(2 * _JOB_MONITOR_PERIOD_S)
        self._request("DELETE", f"/api/jobs/{self.submission_id}", ok=(200, 404))

    def _supervisor_alive(self) -> bool:
        reply = self._request("GET", "/api/v0/actors", params={
            "filter_keys": "name",
            "filter_predicates": "=",
            "filter_values": f"_ray_internal_job_actor_{self.submission_id}",
        })
        actors = reply.json()["data"]["result"]["result"]
        return any(actor["state"] != "DEAD" for actor in actors)

    def logs(self) -> str:
        """The driver's whole log (the Jobs REST API offers no tail)."""
        return self._request("GET", f"/api/jobs/{self.submission_id}/logs").json()["logs"]

    def where(self) -> str:
        return f"Ray job {self.submission_id} at {self.dashboard.describe()}"

    def _request(
        self, method: str, path: str, ok: tuple[int, ...] = (200,), **kwargs: Any
    ) -> requests.Response:
        delay = self.policy.backoff_s
        for attempt in range(1, self.policy.attempts + 1):
            try:
                url = self.dashboard.address() + path
                reply = requests.request(method, url, timeout=self.policy.timeout_s, **kwargs)
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
