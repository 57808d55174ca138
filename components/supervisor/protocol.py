"""The one protocol every submitter of a run follows, and what a verl job log says.

Two actors submit a run's Ray jobs: the Pulumi provider (components/run/job_provider.py),
while a `pulumi up` follows it, and the supervisor in the cluster
(components/supervisor/supervisor.py), at any time after that. Both call only the functions
here and recovery.decide (what follows an attempt that ended without success), so that together
they never run two attempts of a run at once. The state machine and its invariants: docs/run-lifecycle.md.
- One id per attempt. Attempt N of run R is the Ray job `R-a<N>`; attempt N of its export is
  `R-export-a<N>`. Ids are never reused and records are never deleted, so each attempt has its
  own record and its own driver log (Ray names the log by submission id, ray-2.47.0
  python/ray/dashboard/modules/job/common.py:34, and appends to it, job_supervisor.py:174).
- One winner per attempt. Attempt N+1 is submitted only once attempt N is terminal (or lost
  with the head's job table). Ray keeps one record per id (job_manager.py:501-508,
  put_info(overwrite=False) answers "already exists"), so of two actors submitting N+1 at once
  one wins and the other adopts it; an actor that finds a newer attempt than the one it saw
  adopts that one.
- Two budgets, one count. Every ended attempt is classified (`classify`): a preemption if a
  Ray node it ran on died during it (a spot VM reclaimed, a node drained or lost), else a
  failure of the run. Preemptions spend `maxPreemptions` (default: no limit within the
  deadline), failures `maxRetries`. The attempt number travels in the job's metadata
  (`verl-gke-attempt`) and in its id, and so does the number of preemptions before it
  (`verl-gke-preemptions`): the failures before it are the rest, so both actors count the same
  budgets. An explicit `pulumi up` after a refresh found the run FAILED or STOPPED submits once
  more: the user decided.
- "Ended" is written down, never inferred from a missing record: the provider writes its mark
  (which run the stack wants, and whether it ended it) into the supervisor's state before it
  submits, deletes or replaces (MARK_KEY); the supervisor records its own endings (deadline,
  spent budget, a stop it did not make) in its record. A record missing from Ray while the
  supervisor's record knows the attempt was lost with the head (its job table is in the head's
  GCS, ray-2.47.0 common.py:233-252) and the run goes on as its next attempt.

Standard library only: this file is shipped, with supervisor.py and the verl facts it reads the
job log with (components/facts/verl.py), into the supervisor's pod.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from components.facts import verl

# Ray's JobStatus values that never change again (ray/dashboard/modules/job/common.py).
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
RESUBMITTABLE = frozenset({"FAILED", "STOPPED"})
# Metadata keys that name the stack and the resource of a job, the run it is an attempt of, and
# the attempt it is.
STACK_KEY, RESOURCE_KEY = "verl-gke-stack", "verl-gke-resource"
RUN_KEY = "verl-gke-run"
ATTEMPT_KEY = "verl-gke-attempt"
# Epoch seconds of the run's first attempt, carried to every later one: the deadline's start.
FIRST_START_KEY = "verl-gke-first-start"
# Why the attempt before this one ended, e.g. "FAILED at step 12" or "preempted at step 12: ...".
LAST_FAILURE_KEY = "verl-gke-last-failure"
# How many of the attempts before this one ended by a preemption; the others were failures.
PREEMPTIONS_KEY = "verl-gke-preemptions"
ROLE_KEY = "verl-gke-role"
EXPORT_SUFFIX = "-export"


class Jobs(Protocol):
    """Ray's Jobs API for one submission id; ray_access.RayJobs and the supervisor's RayHttp."""

    submission_id: str

    def info(self) -> dict[str, Any] | None: ...

    def submit(
        self, entrypoint: str, runtime_env: dict, metadata: dict[str, str],
        resources: dict[str, Any] | None = None,
    ) -> bool: ...

    def stop(self) -> None: ...

    def log_tail(self, lines: int, info: dict[str, Any] | None = None) -> str: ...

    def list_jobs(self) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def actors_of(self, job_id: str) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Submission:
    """What is submitted for every attempt of a run, but for the attempt's own keys."""

    entrypoint: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str]
    # Ray's entrypoint_num_cpus / _num_gpus / _memory / _resources; {} runs it on the head.
    resources: dict[str, Any] | None = None

    @classmethod
    def of(cls, spec: dict[str, Any]) -> "Submission":
        return cls(spec["entrypoint"], spec["runtime_env"], dict(spec["metadata"]),
                   spec.get("resources") or None)


def attempt_id(run_id: str, number: int) -> str:
    """The Ray submission id of attempt `number` of run `run_id` (or of its export)."""
    return f"{run_id}-a{number}"


def export_run(run_id: str) -> str:
    """The id the export's attempts are numbered under: `<run id>-export-a<N>`."""
    return run_id + EXPORT_SUFFIX


def attempts(listing: list[dict[str, Any]], run_id: str) -> dict[int, dict[str, Any]]:
    """The records of run `run_id` in a job listing (Ray's GET /api/jobs/), by attempt number.

    Only ids of the exact form `<run id>-a<N>`: the export's `<run id>-export-a<N>` is another
    run."""
    pattern = re.compile(re.escape(run_id) + r"-a(\d+)")
    found = {}
    for job in listing:
        match = pattern.fullmatch(job.get("submission_id") or "")
        if match:
            found[int(match.group(1))] = job
    return found


def attempt(info: dict[str, Any] | None) -> int:
    """The attempt a record is, 0 for the first submission."""
    return _count(info, ATTEMPT_KEY)


def preemptions(info: dict[str, Any] | None) -> int:
    """How many attempts before this record's ended by a preemption (0 for a record from before
    this key): the other attempts before it were failures."""
    return _count(info, PREEMPTIONS_KEY)


def _count(info: dict[str, Any] | None, key: str) -> int:
    raw = ((info or {}).get("metadata") or {}).get(key, "0")
    return int(raw) if str(raw).isdigit() else 0


def first_start(info: dict[str, Any]) -> float | None:
    """Epoch seconds of the run's first attempt: carried in the metadata, else this record's
    own start (Ray sets start_time at submission, job_manager.py:493)."""
    carried = (info.get("metadata") or {}).get(FIRST_START_KEY)
    if carried:
        try:
            return float(carried)
        except ValueError:
            pass
    return info["start_time"] / 1000 if info.get("start_time") else None


def failure(info: dict[str, Any], step: float | None, reason: str | None = None) -> str:
    """How an attempt ended, in words safe to show anywhere: status (or reason) and step.

    Ray's message is left out: it quotes the driver's last log lines, which may hold anything.
    """
    where = f" at step {int(step)}" if step is not None else " before its first step"
    return f"{reason or info['status']}{where}"


def submit_attempt(
    jobs_for: Callable[[str], Jobs], run_id: str, number: int, job: Submission,
    why: str | None = None, started: float | None = None, preempted: int = 0,
) -> bool:
    """Submit attempt `number` of the run; False if it already exists (another actor won: adopt
    it). `started` is the run's first start, carried for the deadline; `preempted` how many of
    the attempts before it were preemptions."""
    metadata = {**job.metadata, RUN_KEY: run_id, ATTEMPT_KEY: str(number),
                PREEMPTIONS_KEY: str(preempted)}
    if why:
        metadata[LAST_FAILURE_KEY] = why
    if started is not None:
        metadata[FIRST_START_KEY] = f"{started:.3f}"
    return jobs_for(attempt_id(run_id, number)).submit(
        job.entrypoint, job.runtime_env, metadata, job.resources)


def advance(
    jobs_for: Callable[[str], Jobs], run_id: str, seen: int, job: Submission, why: str,
    started: float | None, say: Callable[[str], None], preempted: int = 0,
) -> int:
    """The attempt after `seen` (which is terminal, or lost): submitted, or adopted when another
    actor already submitted it or a later one. Returns the attempt now current; never raises
    for a lost race, never deletes anything."""
    found = attempts(jobs_for(attempt_id(run_id, seen)).list_jobs(), run_id)
    newest = max(found, default=seen)
    if newest > seen:
        say(f"adopted attempt {newest}, {found[newest]['status']} (submitted by another actor)")
        return newest
    if submit_attempt(jobs_for, run_id, seen + 1, job, why, started, preempted):
        say(f"attempt {seen + 1} submitted after {why}")
    else:
        say(f"adopted attempt {seen + 1} (submitted by another actor)")
    return seen + 1


# --- How an attempt ended: a preemption or a failure --------------------------------------------

# How long after an attempt's end a node it ran on may still be marked dead. The job can end
# first: a surviving worker's call to the lost one fails on its closed socket at once
# ("ActorUnavailableError ... Socket closed", seen on a local Ray 2.47 whose worker node was
# killed: the job FAILED 3 s after the kill), while the GCS marks the node DEAD only once its
# health checks failed (NodeState's end_time_ms "could be delayed up to 30 seconds",
# ray-2.47.0 util/state/common.py). On a VM that no longer answers at all, each of the
# health_check_failure_threshold (5) checks waits out health_check_timeout_ms (10 s)
# (src/ray/common/ray_config_def.h): about 50 s. 90 s leaves a margin.
SETTLE_S = 90.0


# The State API's queries classify reads (ray-2.47.0 dashboard/modules/state/state_head.py
# list_nodes, list_actors; the reply's rows are body["data"]["result"]["result"]). `detail`
# brings a node's end_time_ms (a detail column of NodeState); an actor's node_id and job_id are
# default columns (ActorState). 10,000 is the most one listing returns
# (util/state/common.py RAY_MAX_LIMIT_FROM_API_SERVER).
STATE_LIMIT = 10_000
NODES_QUERY = ("/api/v0/nodes", {"detail": "true", "limit": STATE_LIMIT})


def actors_query(job_id: str) -> tuple[str, dict[str, Any]]:
    return "/api/v0/actors", {"filter_keys": "job_id", "filter_predicates": "=",
                              "filter_values": job_id, "limit": STATE_LIMIT}


def state_rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["data"]["result"]["result"]


@dataclass(frozen=True)
class Ending:
    """How an attempt ended: `preempted` when a Ray node it ran on died during it, and why, in
    words safe to show anywhere (e.g. "preempted at step 12: Ray node 10.0.0.3 died
    (Unexpected termination: health check failed due to missing too many heartbeats)")."""

    preempted: bool
    reason: str
    known: bool = True  # False: Ray's State API could not say, so it counts as a failure


def lost_nodes(info: dict[str, Any], actors: list[dict[str, Any]],
               nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Ray nodes the attempt ran on that died during it (up to SETTLE_S after its end).

    Ran on: its driver's node (`driver_node_id`) and the nodes of its Ray job's actors (GET
    /api/v0/actors keeps dead actors with their `node_id`, ray-2.47.0 util/state/common.py
    ActorState). An actor of a lost node is not always marked dead by its node: it may die first
    of its owner's exit (reason OWNER_DIED, seen on that local Ray), so its node's own record
    decides: state DEAD and `end_time_ms` (NodeState, GET /api/v0/nodes?detail=true) within the
    attempt. The head is left out: its loss takes the job table with it (see `lost_attempt`).
    """
    used = {info.get("driver_node_id")} | {actor.get("node_id") for actor in actors}
    used.discard(None)
    start = info.get("start_time") or 0
    end = info.get("end_time")
    until = end + SETTLE_S * 1000 if end else math.inf  # the window is SETTLE_S, whatever waited
    return [node for node in nodes
            if node.get("node_id") in used and node.get("state") == "DEAD"
            and not node.get("is_head_node")
            and start <= (node.get("end_time_ms") or 0) <= until]


def classify(
    jobs: Jobs, info: dict[str, Any], why: str, step: float | None,
    settle_s: float = SETTLE_S,
) -> Ending:
    """How the attempt `info` ended (FAILED, or stopped for a stall): a preemption, or the
    failure `why` (e.g. `failure(info, step)`); `step` is its last step.

    An attempt that FAILED less than `settle_s` ago and shows no lost node yet is looked at
    once more when `settle_s` have passed since its end (see SETTLE_S; 0 looks once); a STOPPED
    one was stopped, by a person or for a stall long after any loss, and is looked at once. A
    Ray that cannot say (its State API failing) makes it a failure, which the budget of
    maxRetries bounds, and the reason says so."""
    try:
        lost = _lost(jobs, info)
        ended = (info.get("end_time") or 0) / 1000 if info.get("status") == "FAILED" else 0
        if not lost and ended and time.time() - ended < settle_s:
            time.sleep(max(0.0, min(settle_s, ended + settle_s - time.time())))
            lost = _lost(jobs, info)
    except (OSError, RuntimeError, ValueError) as error:
        return Ending(False, f"{why} (whether a node was lost is unknown: {error})"[:400],
                      known=False)
    if not lost:
        return Ending(False, why)
    node = lost[0]
    cause = node.get("state_message") or "no reason given"
    more = f" and {len(lost) - 1} other node(s)" if len(lost) > 1 else ""
    where = f" at step {int(step)}" if step is not None else " before its first step"
    return Ending(True, f"preempted{where}: Ray node {node.get('node_ip')}{more} died "
                        f"({cause})")


def _lost(jobs: Jobs, info: dict[str, Any]) -> list[dict[str, Any]]:
    actors = jobs.actors_of(info["job_id"]) if info.get("job_id") else []
    return lost_nodes(info, actors, jobs.nodes())


def budget_spent(number: int, preempted_before: int, ending: Ending, max_retries: int,
                 max_preemptions: int | None) -> str | None:
    """Whether an attempt may follow attempt `number` that ended as `ending`, with
    `preempted_before` preemptions among the attempts before it: None, or the budget spent."""
    if ending.preempted:
        if max_preemptions is not None and preempted_before >= max_preemptions:
            return f"preemption budget of {max_preemptions} spent"
        return None
    if number - preempted_before >= max_retries:
        return f"retry budget of {max_retries} spent"
    return None


# --- What a verl job log says -----------------------------------------------------------------

# A step line of verl's console logger, as Ray prints it: "(TaskRunner pid=1) step:12 - k:v - ..."
# (components/facts/verl.py). Values may be numpy reprs such as np.float64(0.5).
_STEP_LINE = re.compile(r"\b" + re.escape(verl.STEP_PREFIX) + r"(\d+) - (.*)$")
_NUMBER = re.compile(r"^(?:np\.\w+\()?([-+0-9.eEinfa]+)\)?$")

# The phases of a verl run before its first step, in order, and the text that marks each.
PHASES = verl.PHASES


def last_metrics(log: str) -> dict[str, float]:
    """The metrics of the last training step in a verl job log; {} before the first one.

    A step line without verl.TRAINING_STEP_KEY is a validation's (before training, or at a
    resume), not a step: it does not count, so the first step is the first trained one."""
    for line in reversed(log.splitlines()):
        match = _STEP_LINE.search(line)
        if match and f" - {verl.TRAINING_STEP_KEY}:" in f" - {match.group(2)}":
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


def phase(log: str) -> int:
    """How many of PHASES the log shows reached (the latest one seen counts its predecessors)."""
    reached = 0
    for index, (_, marker) in enumerate(PHASES, start=1):
        if marker in log:
            reached = index
    return reached


def _finite(text: str) -> float | None:
    """A float for the stack state, which is JSON: NaN and infinities are dropped."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --- The supervisor's state ------------------------------------------------------------------
# Two keys of the state ConfigMap, each with one writer:
# - RECORD_KEY, the supervisor's: submission_id (the run id), attempt (the newest attempt it
#   knows), status, step, step_attempt, last_step_at, first_start, first_step_at, last_failure,
#   preempted (preemptions before the newest attempt), ending ({"attempt", "preempted",
#   "reason"}: how the newest attempt ended, once classified), unknown_ending (the attempt
#   whose classification Ray's State API could not answer once), mark_at (the provider's mark
#   `at` this tick saw: a give-up needs the next tick to see it unchanged),
#   intent ({"action": "submit" | "export" | "release", "attempt": n, "reason": ...}, saved
#   before the action, cleared once its result is saved), stopped ({"attempt", "reason"} of a
#   stop of its own, saved before the stop), ended ({"attempt", "by", "reason", "at", and
#   since run_state.py "cause", an EndReason, and "release" when it releases}),
#   export_attempt, export_status, released, released_at, released_reason, settled_mark (the
#   provider's mark `at` when the run ended or was released here: a later change of the mark is
#   an explicit `pulumi up` acting on the run again), updated (epoch seconds).
# - MARK_KEY, the provider's: {"run": the run id the stack wants, "at": epoch seconds of the
#   provider's last action on it, "ended": why the provider ended it, or null}. Written before
#   the provider submits (create, resubmit, export) and before it stops a run it deletes.
# - SUBMITTED_KEY, the provider's: {"run", "attempt", "preempted", "first_start"}, the newest
#   attempt it submitted, the preemptions before it and the run's first start (epoch seconds,
#   for the deadline; absent in notes from before it), written before the POST. Ray's job table
#   lives in the head and goes with it; this key does not, so an attempt that the head lost
#   still counts against the budget (lost_attempt) and the deadline (known_first_start).
RECORD_KEY = "record"
MARK_KEY = "provider"
SUBMITTED_KEY = "provider-submitted"


def lost_attempt(run_id: str, record: dict[str, Any],
                 submitted: dict[str, Any] | None) -> tuple[int, int] | None:
    """The newest attempt of `run_id` that anyone submitted, and the preemptions before it,
    when Ray's job table has none of them (the head lost it): the supervisor's `record` of the
    run, or the provider's SUBMITTED_KEY for this run, whichever is newer; None when neither
    knows one."""
    found = []
    if record.get("attempt") is not None:
        found.append((record["attempt"], record.get("preempted") or 0))
    if (submitted or {}).get("run") == run_id and submitted.get("attempt") is not None:
        found.append((submitted["attempt"], submitted.get("preempted") or 0))
    return max(found) if found else None


def known_first_start(run_id: str, record: dict[str, Any],
                      submitted: dict[str, Any] | None) -> float | None:
    """The run's first start as the supervisor's `record` or the provider's SUBMITTED_KEY
    knows it, the earlier of the two: when the head lost the attempts before any tick saw one,
    the note alone knows when the run began, and the deadline counts from there."""
    found = [record["first_start"]] if record.get("first_start") is not None else []
    if (submitted or {}).get("run") == run_id and submitted.get("first_start") is not None:
        found.append(float(submitted["first_start"]))
    return min(found, default=None)


def with_lost(run_id: str, record: dict[str, Any],
              submitted: dict[str, Any] | None) -> dict[str, Any]:
    """The supervisor's `record` of `run_id` ({} if none) with the newest attempt anyone
    submitted, the preemptions before it and the run's first start, as the provider's note
    adds to it: what `pulumi up` continues from when Ray's job table went with the head."""
    lost = lost_attempt(run_id, record, submitted)
    if lost is None:
        return record
    return {**record, "attempt": lost[0], "preempted": lost[1],
            "first_start": known_first_start(run_id, record, submitted)}


def counts(attempt: int, preempted: int, ending: dict[str, Any] | None) -> dict[str, int]:
    """The run's ended attempts by kind: `attempt` is the newest, `preempted` the preemptions
    before it, `ending` how it ended ({"attempt", "preempted", "reason"}) once it did."""
    last = ending if ending and ending.get("attempt") == attempt else None
    return {"preemptions": preempted + bool(last and last["preempted"]),
            "failures": attempt - preempted + bool(last and not last["preempted"])}


def not_ours(run_id: str, mark: dict[str, Any] | None) -> str | None:
    """Why the provider's mark forbids acting on run `run_id`, or None: another run is the
    stack's now (superseded), or the provider ended this one. No mark (a stack before this
    protocol, or a provider without the cluster's kubeconfig) forbids nothing."""
    if not mark or not mark.get("run"):
        return None
    if mark["run"] != run_id:
        return f"superseded by {mark['run']}"
    return f"ended by pulumi: {mark['ended']}" if mark.get("ended") else None


def describe(record: dict[str, Any]) -> str:
    """The run's current state in one line, e.g. "SUCCEEDED at step 58, attempt 2, export
    SUCCEEDED, GPUs released"."""
    text = record.get("status") or "UNKNOWN"
    if record.get("step") is not None:
        text += f" at step {int(record['step'])}"
    parts = [text]
    if record.get("attempt"):
        parts.append(f"attempt {int(record['attempt']) + 1}")
    if record.get("preempted"):
        parts.append(f"{int(record['preempted'])} preempted")
    stopped = record.get("stopped")
    if stopped and stopped.get("attempt") == record.get("attempt"):
        parts.append(f"stopped by the supervisor: {stopped['reason']}")
    if record.get("export_status"):
        parts.append(f"export {record['export_status']}")
    if record.get("ended"):
        parts.append(record["ended"]["reason"])
    if record.get("released"):
        parts.append("GPUs released")
    return ", ".join(parts)
