"""The supervisor's ticks (components/supervisor/supervisor.py) against an in-memory Ray job table.

Each test drives `supervisor.tick` with tests/fakes/ray_jobs.py (Ray 2.47's job-table rules,
cited there) and the state ConfigMap and RayCluster in files (tests/fakes/cluster.py), and
checks one rule of the protocol (docs/run-lifecycle.md). Ticks that die half way are made by
failing one call; the next tick must finish what the dead one started. No Ray is started:
tests/test_supervisor_ray.py checks the same client calls against a real head.
"""

from __future__ import annotations

import json

import pytest

from components.facts import verl
from components.supervisor import protocol, supervisor
from components.supervisor.protocol import attempt_id
from tests.fakes.cluster import FileCluster
from tests.fakes.ray_jobs import FakeRay

RUN = "verl-gke-test-grpo-0123456789ab"


def step(number: int) -> str:
    """A training step's line as the pinned verl prints it (components/facts/verl.py)."""
    return "(TaskRunner pid=1) " + verl.step_line(number, {
        "critic/score/mean": 0.5, "actor/lr": "np.float64(1e-05)",
        verl.TRAINING_STEP_KEY: "np.float64(60.0)"})


NCCL = "(WorkerDict pid=1) NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read"


def spec(**overrides) -> dict:
    """run.json as supervision.render_spec writes it."""
    return {
        "submission_id": RUN, "entrypoint": "python3 -m verl.trainer.main_ppo",
        "runtime_env": {"env_vars": {}},
        "metadata": {"verl-gke-stack": "test", "verl-gke-resource": "grpo"},
        "export": None, "max_retries": 2, "stall_s": 600, "deadline_s": 3600,
        "release_gpus": True, "dashboard": "http://head:8265", "namespace": "verl",
        "ray_cluster": "rc", "state": "grpo-supervisor-state", **overrides,
    }


@pytest.fixture
def world(tmp_path):
    return FakeRay(), FileCluster(tmp_path / "objects", "grpo-supervisor-state", "rc")


class Clock:
    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def tick(ray: FakeRay, cluster: FileCluster, run_spec: dict, now: float | None = None) -> dict:
    return supervisor.tick(run_spec, ray, cluster, say=lambda _: None,
                           now=Clock(now if now is not None else ray.clock + 1))


def submit(ray: FakeRay, number: int = 0, run: str = RUN, **metadata) -> str:
    """An attempt as `pulumi up` (or an earlier tick) submits it."""
    sid = attempt_id(run, number)
    assert protocol.submit_attempt(ray, run, number, protocol.Submission.of(spec()),
                                   started=metadata.pop("started", None))
    return sid


def test_a_failed_attempt_is_followed_by_the_next_one_under_its_own_id(world):
    """FAILED: the next tick submits attempt N+1 as `<run>-a<N+1>`, resuming; the record of
    attempt N stays as it is (nothing is deleted), and its step is the failed attempt's own."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    ray.log(a0, step(7))
    ray.finish(a0, "FAILED")
    record = tick(ray, cluster, spec())
    assert ray.submissions == [a0, attempt_id(RUN, 1)]
    assert ray.records[a0]["status"] == "FAILED"
    assert record["attempt"] == 1 and record["last_failure"] == "FAILED at step 7"
    meta = ray.records[attempt_id(RUN, 1)]["metadata"]
    assert meta[protocol.ATTEMPT_KEY] == "1" and meta[protocol.LAST_FAILURE_KEY] == (
        "FAILED at step 7")


def test_a_new_attempts_first_tick_never_takes_the_old_attempts_step(world):
    """Each attempt has its own log: a tick on attempt 1 that has logged no step yet records
    no step, whatever attempt 0 logged (review finding 5)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    ray.log(a0, step(35))
    ray.finish(a0, "FAILED")
    tick(ray, cluster, spec())
    ray.run(attempt_id(RUN, 1))
    ray.finish(attempt_id(RUN, 1), "FAILED")
    record = tick(ray, cluster, spec())
    assert record["last_failure"] == "FAILED before its first step"


def test_a_replaced_run_is_never_exported_resubmitted_or_released_under_the_new_one(world):
    """Run A SUCCEEDED, its export not done; `pulumi up` replaced it with run B (the provider's
    mark names B) while the CronJob still ticks with A's spec: those ticks stop what of A still
    runs and never submit A's export, never resubmit A, never suspend the cluster B runs on
    (review finding 2)."""
    ray, cluster = world
    old = spec(export={"entrypoint": "python3 -m verl.model_merger merge", "resources": None})
    a0 = submit(ray)
    ray.finish(a0, "SUCCEEDED")
    export = protocol.attempt_id(protocol.export_run(RUN), 0)
    assert tick(ray, cluster, old)["export_attempt"] == 0  # A's export started...
    cluster.mark({"run": RUN, "at": ray.clock, "ended": "deleted (destroy or replace)"})
    new_run = "verl-gke-test-grpo-ba9876543210"
    cluster.mark({"run": new_run, "at": ray.clock + 1, "ended": None})  # ...then B's create
    b0 = submit(ray, run=new_run)
    ray.run(b0)
    for _ in range(3):
        record = tick(ray, cluster, old)
    assert ray.records[export]["status"] == "STOPPED"
    assert ray.live() == [b0] and not cluster.suspended() and cluster.suspends == 0
    assert f"superseded by {new_run}" in record["state"]
    assert len(ray.submissions) == 3


def test_a_run_the_provider_ended_is_never_resubmitted(world):
    """`pulumi destroy` or a replace writes "ended" into the provider's mark before it stops
    the run: a FAILED attempt is then never followed by another (review finding 2, 4)."""
    ray, cluster = world
    a0 = submit(ray)
    cluster.mark({"run": RUN, "at": ray.clock, "ended": "deleted (destroy or replace)"})
    ray.finish(a0, "FAILED")
    record = tick(ray, cluster, spec())
    assert ray.submissions == [a0] and not cluster.suspended()
    assert "ended by pulumi" in record["state"]


def test_a_head_restart_resumes_the_run_as_its_next_attempt(world):
    """The head restarts and its job table is gone: the record knows attempt 1 was running,
    so the next tick submits attempt 2 (its checkpoints are on the bucket), never reads the
    missing record as "ended"; the budget still bounds it (review finding 3)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "FAILED")
    tick(ray, cluster, spec())
    ray.run(attempt_id(RUN, 1))
    ray.log(attempt_id(RUN, 1), step(12))
    tick(ray, cluster, spec())
    ray.restart_head()
    record = tick(ray, cluster, spec())
    assert list(ray.records) == [attempt_id(RUN, 2)]
    assert record["attempt"] == 2
    assert ray.records[attempt_id(RUN, 2)]["metadata"][protocol.LAST_FAILURE_KEY] == (
        "lost with the Ray head at step 12")
    ray.restart_head()
    record = tick(ray, cluster, spec())  # attempt 2 was the last the budget of 2 allows
    assert not ray.records and "retry budget of 2 spent" in record["state"]


def test_a_head_loss_before_the_first_tick_keeps_the_runs_first_start(world):
    """The head lost attempt 0 before any tick saw it: the deadline still counts from the run's
    first start, which the provider's note (protocol.SUBMITTED_KEY, as kube.py write_submitted
    writes it) holds. The next attempt carries it, and a tick past the deadline from it stops
    that attempt and ends the run (before, attempt 1's own start began the deadline again)."""
    ray, cluster = world
    begun = ray.clock
    submit(ray)
    note = {"run": RUN, "attempt": 0, "preempted": 0, "first_start": begun}
    cluster.store.write("configmap", cluster.state_name,
                        {"data": {protocol.SUBMITTED_KEY: json.dumps(note)}})
    ray.restart_head()
    ray.clock = begun + 600
    record = tick(ray, cluster, spec(deadline_s=900))
    a1 = attempt_id(RUN, 1)
    assert ray.submissions[-1] == a1 and record["first_start"] == begun
    assert float(ray.records[a1]["metadata"][protocol.FIRST_START_KEY]) == pytest.approx(begun)
    ray.run(a1)
    record = tick(ray, cluster, spec(deadline_s=900), now=begun + 1000)
    assert ray.records[a1]["status"] == "STOPPED"
    assert record["ended"]["cause"] == "deadline" and "deadline of 15 min" in record["state"]


def test_a_tick_that_dies_after_its_stall_stop_is_finished_by_the_next(world, monkeypatch):
    """The stall stop is saved before it is made: a tick that dies right after the stop
    reached Ray leaves a record that says the stop was the supervisor's, so the next tick
    resubmits instead of reading "stopped by someone else" (review finding 4)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    real_stop = supervisor._Tick._stop

    def stop_then_die(self, jobs, reason, ends=None):
        original_save = self.cluster.save
        calls = []

        def save(record):
            calls.append(record)
            if len(calls) > 1:
                raise OSError("the API server timed out")
            original_save(record)

        monkeypatch.setattr(self.cluster, "save", save)
        real_stop(self, jobs, reason, ends)
        self._save()

    monkeypatch.setattr(supervisor._Tick, "_stop", stop_then_die)
    with pytest.raises(OSError):
        tick(ray, cluster, spec(stall_s=5), now=ray.clock + 10)
    monkeypatch.undo()
    assert ray.records[a0]["status"] == "STOPPED"
    record = tick(ray, cluster, spec(stall_s=5), now=ray.clock + 11)
    assert ray.submissions == [a0, attempt_id(RUN, 1)]
    assert record["last_failure"].startswith("no new step for 5 s")


def test_a_tick_that_dies_before_its_submission_is_finished_by_the_next(world, monkeypatch):
    """The submission is saved as an intent before the POST: a tick killed in between leaves
    the intent, and the next tick submits that attempt, once (review finding 4)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "FAILED")
    monkeypatch.setattr(protocol, "submit_attempt",
                        lambda *a, **k: (_ for _ in ()).throw(TimeoutError("pod killed")))
    with pytest.raises(TimeoutError):
        tick(ray, cluster, spec())
    monkeypatch.undo()
    assert cluster.record()["intent"]["attempt"] == 1
    tick(ray, cluster, spec())
    tick(ray, cluster, spec())
    assert ray.submissions == [a0, attempt_id(RUN, 1)]


def test_a_tick_that_dies_after_its_release_is_finished_without_ray(world, monkeypatch):
    """The release is saved as an intent before the suspend: when the tick dies after the
    PATCH, the next one records the release without asking Ray (whose head is gone), instead of
    failing on the dead head for ever (review finding 4)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "SUCCEEDED")
    real_suspend = cluster.suspend

    def suspend_then_die():
        real_suspend()
        raise OSError("the reply was lost")

    monkeypatch.setattr(cluster, "suspend", suspend_then_die)
    with pytest.raises(OSError):
        tick(ray, cluster, spec())
    monkeypatch.undo()
    ray.down = True  # KubeRay deleted the head with every other pod
    record = tick(ray, cluster, spec())
    assert record["released"] and cluster.suspended()


@pytest.mark.parametrize("how", ["budget", "deadline", "export"])
def test_a_given_up_run_releases_the_gpus_with_the_reason(world, how):
    """With releaseGpus, giving up (retry budget spent, deadline passed, export failed for good)
    releases the GPUs too, and the record says why (review finding 6)."""
    ray, cluster = world
    run_spec = spec(max_retries=0)
    a0 = submit(ray)
    now = None
    if how == "export":
        run_spec["export"] = {"entrypoint": "python3 -m verl.model_merger merge"}
        ray.finish(a0, "SUCCEEDED")
        tick(ray, cluster, run_spec)
        ray.finish(protocol.attempt_id(protocol.export_run(RUN), 0), "FAILED")
    elif how == "deadline":
        ray.run(a0)
        now = ray.clock + 3601
    else:
        ray.finish(a0, "FAILED")
    record = tick(ray, cluster, run_spec, now)
    if not record.get("released"):  # the deadline's stop: released on the next tick
        record = tick(ray, cluster, run_spec, now)
    assert record["released"] and cluster.suspended()
    reason = {"budget": "retry budget of 0 spent", "deadline": "deadline of 1 h reached",
              "export": "export failed; retry budget of 0 spent"}[how]
    assert record["released_reason"] == reason and reason in record["state"]


def test_a_run_stopped_by_a_person_is_left_alone_and_keeps_its_gpus(world):
    """A stop the supervisor did not make is a person's decision: no retry, no release."""
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "STOPPED")
    record = tick(ray, cluster, spec())
    assert ray.submissions == [a0] and not cluster.suspended()
    assert "stopped by someone else" in record["state"]


def test_the_release_waits_while_another_job_runs_on_the_cluster(world):
    """The GPUs are never taken from a job that runs: a new run's ClusterCheck, or anything
    else live on the cluster, defers the release to a later tick (review finding 2)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "SUCCEEDED")
    assert ray("verl-gke-test-cluster-check-0123").submit("check", {}, {})
    assert not tick(ray, cluster, spec()).get("released")
    ray.finish("verl-gke-test-cluster-check-0123", "SUCCEEDED")
    assert tick(ray, cluster, spec())["released"]


def test_the_deadline_counts_from_the_runs_first_attempt(world):
    """The deadline starts at the run's first attempt, carried in every later attempt's
    metadata, even when the supervisor first sees a later attempt (review finding 9)."""
    ray, cluster = world
    a0 = submit(ray)
    first = ray.records[a0]["start_time"] / 1000
    ray.finish(a0, "FAILED")
    a1 = submit(ray, 1, started=first)
    ray.clock += 3000
    ray.run(a1)
    record = tick(ray, cluster, spec(), now=first + 3601)  # 601 s after a1 started
    assert record["first_start"] == first
    assert "deadline of 1 h reached" in record["state"] and ray.records[a1]["status"] == "STOPPED"


def test_a_flood_of_log_lines_does_not_hide_the_last_step(world):
    """More NCCL lines after the last step than one tail holds: the tick asks once more with a
    larger tail and finds the step, so a healthy run is not stopped as stalled (review
    finding 9)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    ray.log(a0, step(3))
    tick(ray, cluster, spec(stall_s=60), now=ray.clock + 1)
    ray.log(a0, step(4))
    for _ in range(supervisor._LOG_LINES + 10):
        ray.log(a0, NCCL)
    record = tick(ray, cluster, spec(stall_s=60), now=ray.clock + 50)
    record = tick(ray, cluster, spec(stall_s=60), now=ray.clock + 100)
    assert record["step"] == 4 and ray.records[a0]["status"] == "RUNNING"


def test_a_suspend_that_does_not_read_back_true_fails_the_tick():
    """A RayCluster CRD without spec.suspend prunes the field silently: the PATCH reply must
    say suspend is true, or the tick fails instead of recording "GPUs released" (review
    finding 9)."""
    cluster = supervisor.InCluster.__new__(supervisor.InCluster)
    cluster._cluster = "/apis/ray.io/v1/namespaces/verl/rayclusters/rc"
    cluster._call = lambda method, path, body=None: {"metadata": {"name": "rc"}, "spec": {}}
    with pytest.raises(RuntimeError, match="spec.suspend did not read back true"):
        cluster.suspend()
    cluster._call = lambda method, path, body=None: {"spec": {"suspend": True}}
    cluster.suspend()


def test_two_actors_never_run_the_same_attempt_twice(world):
    """Both actors saw attempt 0 FAILED; the other one already submitted attempt 1, which
    failed at once. This actor adopts attempt 1 (never deletes it, never runs it again) and the
    next attempt is 2, once (review finding 8)."""
    ray, _ = world
    a0 = submit(ray)
    ray.finish(a0, "FAILED")
    job = protocol.Submission.of(spec())
    assert protocol.advance(ray, RUN, 0, job, "FAILED", None, lambda _: None) == 1  # other
    ray.finish(attempt_id(RUN, 1), "FAILED")
    assert protocol.advance(ray, RUN, 0, job, "FAILED", None, lambda _: None) == 1  # stale
    assert protocol.advance(ray, RUN, 1, job, "FAILED", None, lambda _: None) == 2
    assert protocol.advance(ray, RUN, 1, job, "FAILED", None, lambda _: None) == 2
    assert ray.submissions == [a0, attempt_id(RUN, 1), attempt_id(RUN, 2)]



def _export_failed_once(ray, cluster, marked_at: float):
    """A run whose training SUCCEEDED under the provider's mark (at `marked_at`), then whose
    first export attempt FAILED with no retry left: (spec, export run)."""
    run_spec = spec(max_retries=0, export={"entrypoint": "python3 -m verl.model_merger merge"})
    cluster.mark({"run": RUN, "at": marked_at, "ended": None})
    a0 = submit(ray)
    ray.finish(a0, "SUCCEEDED")
    tick(ray, cluster, run_spec)
    export = protocol.export_run(RUN)
    ray.finish(attempt_id(export, 0), "FAILED")
    return run_spec, export


def test_an_explicit_up_after_a_release_is_followed_and_released_again(world):
    """The export failed for good and the GPUs went back; `pulumi up --refresh` then resumed
    the cluster and exported (its mark changed): the supervisor follows the run again and, once
    that export SUCCEEDED, releases the GPUs again (review finding 6). An unchanged mark, a
    later clock or none, never reopens it."""
    ray, cluster = world
    run_spec, export = _export_failed_once(ray, cluster, marked_at=5.0)
    assert tick(ray, cluster, run_spec)["released"]
    assert tick(ray, cluster, run_spec, now=ray.clock + 10**6)["released"]  # nothing changed

    cluster.resume()  # what the provider's update does: resume, mark, export
    cluster.mark({"run": RUN, "at": 1.0, "ended": None})  # the user's clock may be behind
    assert protocol.submit_attempt(ray, export, 1, protocol.Submission.of(run_spec["export"]
                                   | {"runtime_env": {}, "metadata": {}}))
    record = tick(ray, cluster, run_spec)
    assert not record["released"] and record["export_attempt"] == 1
    ray.finish(attempt_id(export, 1), "SUCCEEDED")
    record = tick(ray, cluster, run_spec)
    assert record["released"] and cluster.suspended() and cluster.suspends == 2
    assert record["state"].endswith("export SUCCEEDED, GPUs released")


def test_a_head_restart_before_the_first_tick_submits_the_next_attempt(world):
    """The CronJob gets a run's spec only after its create submitted attempt 0: a first tick
    that finds no attempt at all (the head restarted in between) submits attempt 1, rather than
    waiting for ever (review finding 3); the lost attempt 0 counts against the budget."""
    ray, cluster = world
    record = tick(ray, cluster, spec())
    assert list(ray.records) == [attempt_id(RUN, 1)] and record["attempt"] == 1
    assert tick(ray, cluster, spec())["status"] == "PENDING"
    assert ray.submissions == [attempt_id(RUN, 1)]


def test_a_run_deleted_and_created_again_is_followed_again(world):
    """A re-staging or a re-check replaces the run by itself (same id): while it is deleted the
    ticks stand down (no resubmission while staging rewrites /data), and once `pulumi up` has
    created it again (its mark changed) they follow the new attempt."""
    ray, cluster = world
    a0 = submit(ray)
    cluster.mark({"run": RUN, "at": 1.0, "ended": None})
    ray.finish(a0, "FAILED")  # the provider's delete stops it; FAILED is the worst case
    cluster.mark({"run": RUN, "at": 2.0, "ended": "deleted (destroy or replace)"})
    record = tick(ray, cluster, spec())
    assert ray.submissions == [a0] and "ended by pulumi" in record["state"]

    cluster.mark({"run": RUN, "at": 3.0, "ended": None})  # created again: its next attempt
    a1 = submit(ray, 1)
    ray.run(a1)
    record = tick(ray, cluster, spec())
    assert record["attempt"] == 1 and record["status"] == "RUNNING" and not record["ended"]
    ray.finish(a1, "FAILED")
    assert tick(ray, cluster, spec())["attempt"] == 2  # followed again: retried


def test_a_tick_that_dies_before_its_deadline_stop_is_finished_by_the_next(world, monkeypatch):
    """The deadline's stop is saved (ended, stopped) before the POST: when the tick dies in
    between, the next one makes the stop and then releases the GPUs, instead of leaving a run
    past its deadline running (review finding 4)."""
    ray, cluster = world
    a0 = submit(ray)
    ray.run(a0)
    from tests.fakes import ray_jobs

    monkeypatch.setattr(ray_jobs.FakeJobs, "stop",
                        lambda self: (_ for _ in ()).throw(OSError("pod killed")))
    with pytest.raises(OSError):
        tick(ray, cluster, spec(), now=ray.clock + 3601)
    monkeypatch.undo()
    assert ray.records[a0]["status"] == "RUNNING"
    tick(ray, cluster, spec(), now=ray.clock + 3700)
    assert ray.records[a0]["status"] == "STOPPED"
    assert tick(ray, cluster, spec(), now=ray.clock + 3800)["released"]


def test_a_mark_written_while_a_tick_releases_never_lets_the_release_hit_the_new_run(
    world, monkeypatch
):
    """The old run's tick reads the mark, then `pulumi up` marks the new run: the tick's
    release intent is written only if the state is unchanged since its last read (a conditional
    write), so it fails, nothing is suspended, and the next tick stands down (review finding 2).
    """
    ray, cluster = world
    a0 = submit(ray)
    ray.finish(a0, "SUCCEEDED")
    real_state, reads = cluster.state, []

    def state_then_new_mark():
        found = real_state()
        reads.append(found)
        if len(reads) == 2:  # the release's own read: the provider marks right after it
            cluster.mark({"run": "verl-gke-test-grpo-ba9876543210", "at": 9.0, "ended": None})
        return found

    monkeypatch.setattr(cluster, "state", state_then_new_mark)
    with pytest.raises(OSError, match="409"):
        tick(ray, cluster, spec())
    monkeypatch.undo()
    assert not cluster.suspended()
    record = tick(ray, cluster, spec())
    assert not cluster.suspended() and "superseded" in record["state"]


def test_the_provider_waits_for_a_release_in_flight_before_it_resumes(world, tmp_path,
                                                                       monkeypatch):
    """A release intent saved before the provider's mark: `up` waits until the supervisor has
    suspended the cluster and recorded it, and only then resumes it for the new run (so the
    suspend cannot land under the new run)."""
    import os
    import threading
    from pathlib import Path

    from components.run.job_provider import GrpoJobProvider
    from components.run.ray_access import RequestPolicy

    ray, cluster = world
    monkeypatch.setenv("PATH", f"{Path(__file__).parent / 'fakes'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_OBJECTS", str(cluster.directory))
    cluster.save({"submission_id": RUN, "status": "SUCCEEDED",
                  "intent": {"action": "release", "reason": "SUCCEEDED"}})

    def supervisor_finishes_its_release():
        cluster.suspend()
        cluster.save({"submission_id": RUN, "status": "SUCCEEDED", "released": True})

    timer = threading.Timer(1.5, supervisor_finishes_its_release)
    timer.start()
    said: list[str] = []
    provider = GrpoJobProvider(RequestPolicy(poll_max_s=0.1), say=said.append)
    props = {"submission_id": "verl-gke-test-grpo-ba9876543210", "timeout_s": 30,
             "access": {"kubeconfig": "apiVersion: v1\n", "namespace": "verl",
                        "ray_cluster": "rc", "state": "grpo-supervisor-state"}}
    provider._await_release(props)
    timer.join()
    assert cluster.suspended()  # the suspend landed before `up` went on
    assert provider._gate(props, resume=True) is False and not cluster.suspended()
    assert any("waiting for the supervisor to finish releasing" in line for line in said)


def test_an_export_is_given_up_only_by_a_tick_that_saw_the_same_mark(world):
    """The export failed with its budget spent while a `pulumi up --refresh` marked the run to
    export it again (update: resume, mark, export): a tick in between must not give the run up
    and release the GPUs under the export about to come, as for a training attempt
    (recovery.decide's mark_settled). It gives up once a tick saw the same mark before."""
    ray, cluster = world
    run_spec, _ = _export_failed_once(ray, cluster, marked_at=1.0)
    cluster.mark({"run": RUN, "at": 2.0, "ended": None})  # `pulumi up --refresh` began
    record = tick(ray, cluster, run_spec)
    assert not record.get("ended") and not cluster.suspended()
    record = tick(ray, cluster, run_spec)  # that up never exported: the run ends now
    assert "export failed; retry budget of 0 spent" in record["state"] and cluster.suspended()
