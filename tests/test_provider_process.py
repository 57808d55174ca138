"""Every dynamic provider of the program in the SDK's real provider process.

The process is started and driven as the engine does it by tests/provider_process.py.

The inputs are the program's own registrations: the a4 stack rendered under the mock runtime,
where the SDK's `dynamic.Resource` made each `__provider` pickle. They are fed unchanged but for
the two entrypoints, which need a GKE cluster: the GrpoRun runs the stand-in trainer, the
ClusterCheck prints a measurement that meets the stack's floors (the measurement itself, on
gloo ranks, is tests/test_cluster_check.py). The registered `access` is kept: the kubeconfig,
port-forwarded by tests/fakes/kubectl to the session's Ray head under the registered Service.

One provider process per command, as the engine starts them. The commands run in order in one
module fixture (a stack's life: up, up, a preview with unknowns, refresh, up, a re-check that
replaces, destroy); each test asserts what one of them must have done.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from pulumi.dynamic import Resource
from pulumi.output import Unknown

from components import provider_home
from components.unknowns import is_unknown
from components.guards import BucketIdentityProvider, moves
from components.check import cluster_check
from components.run import job_provider
from components.run.grpo_job import deterministic_id
from components.supervisor.protocol import attempt_id
from tools.local_ray import list_jobs
from tests.provider_process import (
    DIFF_SOME,
    ROOT,
    Deployment,
    Planned,
    ProviderError,
    ProviderProcess,
    Registration,
    first_preview,
    unknown_variants,
)
from tools import mockrun

FAKES = Path(__file__).parent / "fakes"
DYNAMIC = "pulumi-python:dynamic/verl-gke:"
JOB, CHECK = "grpo-run", "cluster-check-run"
IDENTITY, GUARD = "bucket-identity", "to-destroy-set-deletionProtection-false-then-up"
NAMES = [IDENTITY, CHECK, JOB, GUARD]  # the program's registration order
# The inputs whose change each provider's diff answers with a replacement.
REPLACES = {JOB: set(job_provider.REPLACE_KEYS), CHECK: set(cluster_check._REPLACE_KEYS),
            IDENTITY: set(), GUARD: set()}
TRAINER = f"{sys.executable} {FAKES / 'verl_trainer.py'} --steps 600 --sleep 0.5"


def check_stand_in(expected: dict) -> str:
    """A ClusterCheck entrypoint that prints the result line of the check's script, shaped as
    components/check/cluster_check_script.py prints it (:181-185; inventory :116, the
    all-reduce :137-145, the read :163), with values that meet `expected`."""
    world = expected["nodes"] * expected["gpus_per_node"]
    measured = {
        "inventory": [{"node": f"10.0.0.{n}", "gpus": expected["gpus_per_node"],
                       "names": [f"NVIDIA {expected['gpu_name']}"] * expected["gpus_per_node"]}
                      for n in range(expected["nodes"])],
        "allReduce": {"busbw_gbs": 2.0 * expected["min_busbw_gbs"], "world_size": world,
                      "nccl": {"networks": [expected["nccl_network"]],
                               "mnnvl_ranks": world if expected["mnnvl"] else 0,
                               "reporting_ranks": world, "lines": []}},
        "read": {"path": "/data/model", "mbps": 2.0 * expected["min_read_mbps"]},
    }
    line = cluster_check.RESULT_PREFIX + json.dumps(measured)
    return f"{sys.executable} -c {shlex.quote(f'print({line!r})')}"


def stand_ins(registrations: list[Registration]) -> list[Registration]:
    """The registrations as fed: the two entrypoints replaced (module doc)."""
    fed = []
    for registration in registrations:
        if registration.name == JOB:
            registration = registration.but(entrypoint=TRAINER)
        elif registration.name == CHECK:
            expected = registration.inputs["expected"]
            registration = registration.but(entrypoint=check_stand_in(expected))
        fed.append(registration)
    return fed


def rechecked(registrations: list[Registration]) -> list[Registration]:
    """The registrations after a change that re-checks the cluster (a new expectation of what
    the cluster holds: a new `expected` and the submission id the program derives from it,
    components/check/cluster_check.py check_inputs; new floors alone judge the last measurement
    instead) and turns deletion protection off (the guard's `protected`)."""
    changed = []
    for registration in registrations:
        if registration.name == CHECK:
            before = registration.inputs
            expected = {**before["expected"], "gpu_name": "NVIDIA " + before["expected"]["gpu_name"]}
            new_id = deterministic_id("a4", "cluster-check", {
                "entrypoint": before["entrypoint"], "env": before["runtime_env"],
                "expected": expected})
            registration = registration.but(submission_id=new_id, expected=expected)
        elif registration.name == GUARD:
            registration = registration.but(protected=False)
        changed.append(registration)
    return stand_ins(changed)


@dataclass
class Lifecycle:
    """What each command of the module's stack did."""

    deployment: Deployment
    registrations: list[Registration]
    calls: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    done: dict[str, dict[str, str]] = field(default_factory=dict)
    said: dict[str, str] = field(default_factory=dict)
    planned: dict[str, dict[str, Planned]] = field(default_factory=dict)
    # (resource, input, "deployed" | "new") -> Planned, or the provider's error
    unknowns: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)  # outputs by resource
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # inputs by resource
    ray: dict[str, list[dict]] = field(default_factory=dict)  # our jobs after each command

    def record(self, command: str, done: Any = None) -> None:
        deployment = self.deployment
        self.calls[command] = list(deployment.calls)
        self.said[command] = deployment.said
        if done is not None:
            self.done[command] = done
        self.states[command] = {deployment.names[urn]: state.outputs
                                for urn, state in deployment.state.items()}
        self.inputs[command] = {deployment.names[urn]: state.inputs
                                for urn, state in deployment.state.items()}


def our_jobs(head) -> list[dict]:
    return [job for job in list_jobs(head.dashboard_url)
            if (job.get("metadata") or {}).get("verl-gke-stack") == "a4"]


def preview_each_unknown(deployment: Deployment, registrations: list[Registration]) -> tuple:
    """One preview (one process) of a stack that holds, for each resource and each of its
    inputs, that resource with that one input unknown: once deployed (Check and Diff against
    its state), once new (Check only); and each resource as a stack's first preview sees it
    (new, every input from another resource unknown). A new resource's Check receives no state
    (olds are empty), so it needs no process of its own before the first `up`."""
    found: dict[tuple[str, str, str], Any] = {}
    with deployment.command("preview") as process:
        first = {r.name: deployment.plan(process, r, first_preview(r), new=True)
                 for r in registrations}
        for registration in registrations:
            for key, news in unknown_variants(deployment.mock_ids(registration)):
                for kind in ("deployed", "new"):
                    try:
                        found[registration.name, key, kind] = deployment.plan(
                            process, registration, news, new=kind == "new")
                    except ProviderError as error:
                        found[registration.name, key, kind] = error
    return first, found


@pytest.fixture(scope="module")
def registered() -> list[Registration]:
    from tests.conftest import rendered

    _, recording = rendered("a4", "standard")
    dynamic = [r for r in recording.resources if r.type.startswith(DYNAMIC)]
    assert [r.name for r in dynamic] == NAMES, "a dynamic resource the harness does not drive"
    # Every dynamic.Resource class of the program (all imported by the render) is among them.
    classes = {f"pulumi-python:{cls._resource_type_name}" for cls in _subclasses(Resource)
               if cls.__module__.startswith("components.")}
    assert classes == {r.type for r in dynamic}
    return [Registration.of(r) for r in dynamic]


def _subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in {direct, *_subclasses(direct)}}


@pytest.fixture(scope="module")
def lifecycle(registered, shared_ray_head, tmp_path_factory) -> Lifecycle:
    logs = tmp_path_factory.mktemp("provider-logs")
    service = next(r for r in registered if r.name == JOB).inputs["access"]["service"]
    deployment = Deployment(logs, {
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "FAKE_KUBECTL_TARGET": f"127.0.0.1:{shared_ray_head.dashboard_port}",
        "FAKE_KUBECTL_SERVICE": service,
        "FAKE_KUBECTL_LOG": str(logs / "kubectl.jsonl"),
        "FAKE_KUBECTL_OBJECTS": str(tmp_path_factory.mktemp("kube-objects")),
    })
    fed = stand_ins(registered)
    run = Lifecycle(deployment, fed)
    try:
        run.record("up", deployment.up(fed))
        run.ray["up"] = our_jobs(shared_ray_head)
        run.record("up again", deployment.up(fed))
        run.planned["first preview"], run.unknowns = preview_each_unknown(deployment, fed)
        run.record("preview with unknowns")
        deployment.refresh()
        run.record("refresh")
        run.record("up after refresh", deployment.up(fed))
        run.record("re-check", deployment.up(rechecked(registered)))
        run.ray["re-check"] = our_jobs(shared_ray_head)
        deployment.destroy()
        run.record("destroy")
        run.ray["destroy"] = our_jobs(shared_ray_head)
    finally:  # a failed command leaves no trainer running on the session's head
        for job in our_jobs(shared_ray_head):
            if job["status"] in ("PENDING", "RUNNING"):
                requests.post(f"{shared_ray_head.dashboard_url}/api/jobs/"
                              f"{job['submission_id']}/stop", timeout=10)
    return run


def test_a_first_preview_checks_every_resource_with_its_unknowns(lifecycle):
    """Nothing exists yet, so every input that comes from another resource is unknown: each
    provider's check accepts them and keeps them unknown; no diff, as nothing exists."""
    planned = lifecycle.planned["first preview"]
    assert list(planned) == NAMES
    assert lifecycle.calls["preview with unknowns"][:4] == [("check", name) for name in NAMES]
    for name, plan in planned.items():
        assert plan.failures == [] and plan.diff is None, name
    job = planned[JOB].checked
    assert all(isinstance(job[key], Unknown)
               for key in ("access", "checked", "staged", "checkpoint_uri", "model_uri"))


def test_up_creates_every_resource_through_the_process(lifecycle):
    """Check then Create, in the program's order; the check ran on Ray and passed, the job is
    RUNNING with its first step seen, their progress reached the engine (the provider's
    stderr), and every Ray call went through a port-forward with the registered kubeconfig."""
    assert lifecycle.done["up"] == dict.fromkeys(NAMES, "create")
    assert lifecycle.calls["up"] == [(call, name) for name in NAMES for call in ("check", "create")]
    outputs = lifecycle.states["up"]
    assert outputs[CHECK]["status"] == "PASSED" and outputs[CHECK]["world_size"] == 16.0
    assert outputs[JOB]["status"] == "RUNNING" and outputs[JOB]["metrics"]["step"] >= 1
    assert outputs[JOB]["checked"] == outputs[CHECK]["submission_id"]  # the check's real id
    said = lifecycle.said["up"]
    assert "cluster check passed: 2 nodes, 16 GPUs" in said and "first step after" in said
    jobs = {job["submission_id"]: job["status"] for job in lifecycle.ray["up"]}
    assert jobs == {outputs[CHECK]["submission_id"]: "SUCCEEDED",
                    attempt_id(outputs[JOB]["submission_id"], 0): "RUNNING"}
    forwards = [json.loads(line) for line in
                (lifecycle.deployment.logs / "kubectl.jsonl").read_text().splitlines()]
    service = next(r for r in lifecycle.registrations if r.name == JOB).inputs["access"]["service"]
    assert forwards and all(f["argv"][-2:] == [f"svc/{service}", ":8265"] and f["mode"] == "0o600"
                            for f in forwards)


@pytest.mark.parametrize("command", ["up again", "up after refresh"])
def test_an_unchanged_up_only_checks_and_diffs(lifecycle, command):
    """With nothing changed (and after a refresh of the running job), every diff says no
    change: the numbers that came back as floats, the refresh's inputs without `access`."""
    assert lifecycle.done[command] == dict.fromkeys(NAMES, "same")
    assert lifecycle.calls[command] == [(call, name) for name in NAMES
                                        for call in ("check", "diff")]


def test_a_preview_with_any_one_input_unknown_judges_nothing_and_says_what_may_replace(lifecycle):
    """For every input of every provider, and every value of an object input, unknown as the
    process hands it over (an Unknown object): no check raises or fails, a new resource's check
    keeps it unknown, and against the deployed state the diff says it may change, replacing
    exactly when that input replaces."""
    found = lifecycle.unknowns
    registered_keys = {(r.name, key) for r in lifecycle.registrations for key in r.inputs
                       if key != "__provider"}
    assert {(name, path.split(".")[0]) for name, path, _ in found} == registered_keys
    assert (JOB, "access.service", "deployed") in found
    wrong = {}
    for (name, path, kind), plan in found.items():
        key = path.split(".")[0]
        if isinstance(plan, ProviderError):
            wrong[name, path, kind] = str(plan)[-300:]
        elif plan.failures:
            wrong[name, path, kind] = plan.failures
        elif kind == "new" and not is_unknown(plan.checked.get(key)):
            wrong[name, path, kind] = f"check made it {plan.checked.get(key)!r}"
        elif kind == "deployed":
            replaces = [key] if key in REPLACES[name] else []
            if plan.diff.changes != DIFF_SOME or list(plan.diff.replaces) != replaces:
                wrong[name, path, kind] = (plan.diff.changes, list(plan.diff.replaces))
    assert wrong == {}


def test_refresh_reads_the_running_job_and_hands_back_inputs_without_the_kubeconfig(lifecycle):
    """Read for each resource: the job is still RUNNING with its metrics, and the inputs the
    next diff starts from carry no `access` (it holds the kubeconfig)."""
    assert lifecycle.calls["refresh"] == [("read", name) for name in NAMES]
    job = lifecycle.states["refresh"][JOB]
    assert job["status"] == "RUNNING" and job["metrics"]["step"] >= 1
    assert "access" not in lifecycle.inputs["refresh"][JOB]
    assert lifecycle.inputs["refresh"][CHECK] == lifecycle.inputs["up again"][CHECK]


def test_a_recheck_deletes_the_job_before_the_check_and_creates_both_again(lifecycle):
    """A re-check replaces the ClusterCheck with delete before replace; the engine diffs the
    job with `checked` unknown, which replaces it, so the job is stopped before the old check
    goes and the new one runs, then created again under its own id. The guard's `protected`
    change is an update."""
    assert lifecycle.done["re-check"] == {IDENTITY: "same", CHECK: "replace", JOB: "replace",
                                          GUARD: "update"}
    assert lifecycle.calls["re-check"] == [
        ("check", IDENTITY), ("diff", IDENTITY),
        ("check", CHECK), ("diff", CHECK), ("diff", JOB), ("delete", JOB), ("delete", CHECK),
        ("create", CHECK),
        ("check", JOB), ("diff", JOB), ("create", JOB),
        ("check", GUARD), ("diff", GUARD), ("update", GUARD),
    ]
    outputs = lifecycle.states["re-check"]
    assert outputs[JOB]["checked"] == outputs[CHECK]["submission_id"]
    assert outputs[CHECK]["submission_id"] != lifecycle.states["up"][CHECK]["submission_id"]
    assert outputs[GUARD]["protected"] is False
    jobs = {job["submission_id"]: job for job in lifecycle.ray["re-check"]}
    new_check = jobs[outputs[CHECK]["submission_id"]]
    attempts = _attempts(jobs, outputs[JOB]["submission_id"])
    job = attempts[-1]
    assert new_check["status"] == "SUCCEEDED" and job["status"] == "RUNNING"
    # The run was stopped with the job's delete (every earlier attempt STOPPED, kept: one Ray
    # job per attempt), and its next attempt submitted after the new check.
    assert [a["status"] for a in attempts[:-1]] and {a["status"] for a in attempts[:-1]} == {"STOPPED"}
    assert job["start_time"] >= new_check["end_time"]


def test_destroy_deletes_dependents_first_and_leaves_nothing_running(lifecycle):
    """Delete in reverse order, the guard first; every attempt of the job is stopped (records
    stay: one Ray job per attempt), the checks' records stay (finished measurements), nothing
    is left running on Ray, and no port-forward is left running."""
    assert lifecycle.calls["destroy"] == [("delete", name) for name in reversed(NAMES)]
    assert lifecycle.deployment.state == {}
    left = {job["submission_id"]: job for job in lifecycle.ray["destroy"]}
    run = _attempts(left, lifecycle.states["re-check"][JOB]["submission_id"])
    assert run and {job["status"] for job in run} == {"STOPPED"}
    assert {job["status"] for job in left.values()} <= {"SUCCEEDED", "STOPPED"}
    log = lifecycle.deployment.logs / "kubectl.jsonl"
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs_fake_for(pid, log)]


def _attempts(jobs: dict[str, dict], run_id: str) -> list[dict]:
    """The run's attempts (components/supervisor/protocol.py attempt_id), oldest first."""
    found = {n: jobs[attempt_id(run_id, n)] for n in range(16) if attempt_id(run_id, n) in jobs}
    return [found[n] for n in sorted(found)]


def _runs_fake_for(pid: str, log: Path) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kubectl" in cmdline and f"FAKE_KUBECTL_LOG={log}".encode() in environ


# --- where the process starts ----------------------------------------------------------------


def test_from_another_directory_the_process_needs_pythonpath(registered, tmp_path):
    """The providers are pickled by reference (`components.guards BucketIdentityProvider`):
    started elsewhere (a `main:` directory, an Automation API work_dir), the process cannot
    import them; with PYTHONPATH naming the project, as the registration's message says, it
    can."""
    identity = next(r for r in registered if r.name == IDENTITY)
    # The virtualenv absolute, as a `main:` or a workspace elsewhere would have to name it.
    venv = str(ROOT / ".venv")
    with ProviderProcess(cwd=tmp_path, virtualenv=venv, log=tmp_path / "stderr") as process:
        with pytest.raises(ProviderError, match="No module named 'components'"):
            process.check(identity.urn, {}, identity.inputs, preview=True)
    with ProviderProcess(cwd=tmp_path, virtualenv=venv, env={"PYTHONPATH": str(ROOT)}) as process:
        checked, failures = process.check(identity.urn, {}, identity.inputs, preview=True)
    assert failures == [] and checked["name"] == identity.inputs["name"]


def test_a_program_started_elsewhere_stops_at_its_first_registration(monkeypatch, tmp_path):
    """Run by the CLI from a directory where the provider process could not import the
    providers, the program stops at BucketIdentity, its first registration, saying what to
    set; from the project root it goes on."""
    from components.guards import BucketIdentity

    monkeypatch.setattr(provider_home, "mocked", lambda: False)  # as if the engine ran it
    monkeypatch.delenv("PYTHONPATH", raising=False)
    # The CLI passes the project's root (pulumi-language-python-exec --root_directory).
    monkeypatch.setattr(provider_home.settings.SETTINGS, "root_directory", str(ROOT))

    def program():
        BucketIdentity("bucket-identity", "b", "US-CENTRAL1", "p")

    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match="set PYTHONPATH=") as stopped:
        mockrun.run(program)
    assert f"program's directory, {tmp_path}" in str(stopped.value)
    monkeypatch.chdir(ROOT)
    assert len(mockrun.run(program).resources) == 1


def test_where_the_providers_can_be_imported_from():
    """The project root as the provider's directory, on PYTHONPATH, or installed: importable.
    An inline Automation API program (its work_dir unknown) needs PYTHONPATH."""
    root, site = provider_home.PACKAGE_ROOT, ["/nonexistent/site-packages"]
    elsewhere = Path("/tmp")
    assert provider_home.home_problem(root, root, "", site) is None
    assert provider_home.home_problem(root, elsewhere, f"/x{os.pathsep}{root}", site) is None
    assert provider_home.home_problem(root, elsewhere, "", [str(root)]) is None
    assert provider_home.home_problem(root, None, str(root), site) is None
    assert "program's directory, /tmp" in provider_home.home_problem(root, elsewhere, "", site)
    inline = provider_home.home_problem(root, None, "", site)
    assert "inline under the Automation API" in inline and f"PYTHONPATH={root}" in inline


# --- the same, without the process ---------------------------------------------------------


def test_an_unknown_is_never_a_bucket_move_but_a_known_change_is():
    """moves() leaves an unknown name, location or project alone and still refuses a real one."""
    deployed = {"name": "b", "location": "US-CENTRAL1", "project": "p"}
    for field_ in ("name", "location", "project"):
        assert moves(deployed, {**deployed, field_: Unknown()}) == []
    assert [field_ for field_, _ in moves(deployed, {**deployed, "location": "EU"})] == ["location"]
    assert BucketIdentityProvider().check(deployed, {**deployed, "name": Unknown()}).failures == []


def test_the_jobs_check_judges_known_values_only():
    """An unknown timeout or waitFor is not judged; the same inputs known and wrong are."""
    news = {"submission_id": "s", "entrypoint": "e", "wait_for": Unknown(),
            "timeout_s": Unknown(), "access": {"address": Unknown()}}
    assert job_provider._input_problems(news) == []
    wrong = {**news, "wait_for": "never", "timeout_s": 0, "submission_id": Unknown(),
             "entrypoint": ""}
    assert [key for key, _ in job_provider._input_problems(wrong)] == [
        "entrypoint", "wait_for", "timeout_s"]
