"""What the run's supervisor does once the run has ended (components/supervisor/supervisor.py, whose
tick this is part of): the export of a SUCCEEDED run (its own attempts, `<run id>-export-a<N>`,
within the retry budget) and the release of the GPUs (suspending the RayCluster), each saved as
an intent before it is taken, as every action of a tick (docs/run-lifecycle.md).

Shipped with supervisor.py into the supervisor's pod (components/run/supervision.py CODE), so
standard library only, like it.
"""

from __future__ import annotations

from typing import Any

from components.supervisor import protocol, recovery, run_state
from components.supervisor.protocol import TERMINAL, Ending, Submission
from components.supervisor.recovery import Actor, Ended, GiveUp, LeaveAlone, Submit


class AfterTheRun:
    """The export and the release, mixed into supervisor._Tick: they read and write its
    `record` and use its `spec`, `ray`, `cluster`, `mark`, `mark_seen`, `max_retries`,
    `exports`, `say`, `now`, `_save`, `_give_up` and `_mark_forbids`."""

    def _finish(self) -> None:
        """SUCCEEDED: export (its own attempts, its own budget), then release the GPUs."""
        record = self.record
        export = self.spec.get("export")
        if export and record.get("export_status") != "SUCCEEDED":
            if not self._export(export):
                return
        if self.spec.get("release_gpus") and not record.get("released"):
            self._release("SUCCEEDED" + (", model exported" if export else ""))

    def _export(self, export: dict[str, Any]) -> bool:
        """Whether the export SUCCEEDED; otherwise follow, retry or give it up."""
        record, exports = self.record, self.exports
        run = protocol.export_run(self.run_id)
        job = Submission.of({**export, "runtime_env": self.spec["runtime_env"],
                             "metadata": {**self.spec["metadata"],
                                          protocol.ROLE_KEY: "model-export"}})
        newest, known = max(exports, default=None), record.get("export_attempt")
        intent = record.get("intent") or {}
        if intent.get("action") == "export" and intent["attempt"] not in exports and (
                newest is None or newest < intent["attempt"]):
            return self._submit_export(run, job, intent["attempt"], intent["reason"])
        if newest is None or (known is not None and newest < known):
            if known is None:
                return self._submit_export(run, job, 0, None)
            if record.get("export_status") in (None, "PENDING", "RUNNING", "LOST"):
                return self._retry_export(run, job, known, "LOST",
                                          "export lost with the Ray head")
            info = {"status": record.get("export_status")}
        else:
            info = exports[newest]
            run_state.set_export_seen(record, newest, info["status"])
            if intent.get("action") == "export":
                run_state.clear_intent(record)
        status = info["status"]
        if status == "SUCCEEDED":
            return True
        if status in ("STOPPED", "FAILED"):
            self._retry_export(run, job, record["export_attempt"], status, "export FAILED")
        return False

    def _retry_export(self, run: str, job: Submission, number: int, status: str,
                      why: str) -> bool:
        """Export attempt `number` ended (`status`, `why`): what recovery.decide answers."""
        seen = Ended(Actor.SUPERVISOR, number, status, 0, ending=Ending(False, why),
                     mark_settled=self.mark_seen, export=True)
        decision = recovery.decide(seen, recovery.Budgets(self.max_retries), self.now())
        if isinstance(decision, Submit):
            return self._submit_export(run, job, decision.attempt, decision.reason)
        if isinstance(decision, GiveUp):
            self._give_up(self.record.get("attempt", 0), decision.reason, decision.cause)
        elif isinstance(decision, LeaveAlone):  # a person stopped it
            run_state.set_ended(self.record, self.record.get("attempt"), decision.cause,
                                decision.reason, self.now())
        else:
            self.say(f"export attempt {number} {decision.reason}")
        return False

    def _submit_export(self, run: str, job: Submission, number: int, why: str | None) -> bool:
        record = self.record
        run_state.set_intent(record, "export", why, number)
        self._save()
        if self._mark_forbids():
            return False
        protocol.submit_attempt(self.ray, run, number, job, why)
        self.say(f"export attempt {number} submitted")
        run_state.set_export_submitted(record, number)
        return False

    def _release(self, reason: str) -> None:
        """Suspend the RayCluster, unless a job of anyone else still runs on it, or the provider
        has written its mark since this tick began (another run, an ending, or a `pulumi up`
        acting on this one).

        The release intent is saved only if the state ConfigMap is unchanged since the mark was
        read again (a conditional write): a provider that marks a new run after that sees the
        intent and waits until the release is done before it resumes the cluster and submits
        (GrpoJobProvider._await_release), so a new run is never suspended by an old one."""
        record = self.record
        if run_state.state_of(record) is not run_state.RunState.RELEASING:
            live = [job["submission_id"] for job in self.ray(self.run_id).list_jobs()
                    if job.get("status") not in TERMINAL]
            if live:
                self.say(f"not releasing the GPUs yet: {', '.join(live)} still runs")
                return
            fresh = self.cluster.state()
            mark = fresh.get(protocol.MARK_KEY) or {}
            why_not = protocol.not_ours(self.run_id, mark)
            if not why_not and mark.get("at") != self.mark.get("at"):
                # A `pulumi up` marked the run after this tick read the mark (while the tick
                # waited for a stop, or for a lost node's death to be recorded): it may have
                # submitted an attempt after the live jobs were listed above. The next tick
                # follows what it did (settled_mark).
                why_not = "`pulumi up` acted on the run during this tick"
            if why_not:
                self.say(f"not releasing the GPUs: {why_not}")
                return
            run_state.set_intent(record, "release", reason)
            self._save(version=fresh.get("version"))
        self.say(f"{reason}; suspending the RayCluster")
        self.cluster.suspend()
        run_state.set_released(record, reason, self.now())
