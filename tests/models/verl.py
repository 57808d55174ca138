"""What a job's entrypoint does in the world: verl's training, the model export, the check.

Training (the pinned verl, whose lines and layout come from components/facts/verl.py, as
tests/fakes/verl_trainer.py prints them for the tests): the entrypoint first prunes old
checkpoints with the program's own shell (components/runspec/lifecycle.py prune_command, run here
by bash on a directory that mirrors the bucket), then verl logs its phases (verl.PHASES: the
step count once the data is loaded, then the end of the workers' and the rollout engine's
start), resumes from the step the tracker names (verl.RESUMED, or verl.FROM_SCRATCH), and logs
one step line per training step. Every SAVE_EVERY steps it saves `global_step_<n>/actor`, then
its own window removes the actor directory of saves beyond `max_actor_ckpt_to_keep`
(verl/utils/checkpoint/checkpoint_manager.py:152-180 at the pin), and only then, after data.pt,
writes the tracker (verl/trainer/ppo/v1/trainer_base.py:713-775): a crash in between leaves the
tracker on the previous step.
The export (verl.model_merger, tests/fakes/model_merger.py) reads the tracked step's `actor/`
and fails if it is missing.
The training's actors run on the GPU worker (tests/models/ray_gcs.py lists them): the TaskRunner
(main_ppo.py:80, `ray.remote(num_cpus=1)`, "make sure main_task is not scheduled on head"; the
head starts with num-cpus 0, components/raycluster/ray_cluster_spec.py) and one WorkerDict per GPU
(single_controller/ray/base.py:979-998 create_colocated_worker_cls; placed in placement groups
of GPU bundles, :116-134 get_placement_groups, :516 _init_with_resource_pool). While no worker
runs, the TaskRunner waits to be scheduled and the driver prints nothing more.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from components.facts import verl
from tests.models.ray_gcs import GPUS

STEP_S = 60.0  # one training step (the first comes STEP_S after the phases): scaled down
PHASE_AT = (15.0, 25.0)  # verl.PHASES
SAVE_EVERY = 2
TRACKER_AFTER_S = 20.0  # from a save's actor/ to its tracker write (data.pt in between)
PLACE_RETRY_S = 5.0  # how often the world looks again for a worker to place the TaskRunner on
EXPORT_S = 60.0
CHECK_S = 30.0
TRACKER = verl.CHECKPOINT_TRACKER


# --- What verl prints and writes: for every front (the drivers below, tests/fakes/verl_trainer.py)
def actor(pid: int) -> str:
    """Ray's prefix of an actor's output line (the TaskRunner runs main_task)."""
    return f"(TaskRunner pid={pid}) "


def phase_lines(total_steps: int, stamp: str) -> tuple[str, str]:
    """verl.PHASES' two lines, through verl's logging format ("INFO:<time>:<text>"): the step
    count once the data is loaded, then the end of the workers' and the engine's start."""
    (_, loaded), (_, up) = verl.PHASES
    return f"INFO:{stamp}:{loaded} {total_steps}", f"INFO:{stamp}:{up}"


def resume_line(folder: str | None, step: int | None) -> str:
    """What a start logs once it has looked for its checkpoint (verl.RESUMED, FROM_SCRATCH)."""
    return verl.RESUMED.format(folder=folder, step=step) if step else verl.FROM_SCRATCH


def step_folder(root: str, step: int) -> str:
    """The directory of a saved step (verl.CHECKPOINT_STEP_DIR)."""
    return os.path.join(root, verl.CHECKPOINT_STEP_DIR.format(step))


def training_step_line(step: int, metrics: dict[str, object], step_s: object) -> str:
    """A training step's line: verl.step_line with its timing (verl.TRAINING_STEP_KEY), which
    only a training step carries (a validation's line has none)."""
    return verl.step_line(step, {**metrics, verl.TRAINING_STEP_KEY: step_s})


def export_lines(local_dir: str, target_dir: str) -> tuple[str, str]:
    """What the export (verl.model_merger merge --local_dir <step>/actor --target_dir <dir>)
    prints when the checkpoint is missing, and once the merged model is saved."""
    return f"checkpoint not found: {local_dir}", f"Saved merged model to {target_dir}"


class Bucket:
    """The run's checkpoint directory in the bucket: steps (with or without actor/) and the
    tracker. Pruning runs the program's real shell on a temporary copy."""

    def __init__(self) -> None:
        self.steps: dict[int, bool] = {}  # step -> its actor/ exists
        self.tracker: int | None = None
        self.flaky_reads = 0  # the next N tracker reads of the prune fail (a FUSE error)

    def prune(self, keep: int) -> None:
        root = tempfile.mkdtemp(prefix="sim-ckpt-")
        try:
            for step, actor in self.steps.items():
                os.makedirs(os.path.join(root, f"global_step_{step}", *(["actor"] if actor
                                                                          else [])))
            tracker = os.path.join(root, TRACKER)
            if self.flaky_reads:
                self.flaky_reads -= 1
                os.makedirs(tracker)  # `cat` fails on it, as on a transient FUSE error
            elif self.tracker is not None:
                with open(tracker, "w") as file:
                    file.write(str(self.tracker))
            # Imported here: tests/fakes/verl_trainer.py imports this module in every real job
            # it runs, and lifecycle's pydantic would double its start.
            from components.runspec.lifecycle import prune_command  # noqa: PLC0415

            subprocess.run(["bash", "-c", prune_command(root, keep)], check=False,
                           capture_output=True)
            left = {int(name.rsplit("_", 1)[1]) for name in os.listdir(root)
                    if name.startswith("global_step_")}
            self.steps = {s: a for s, a in self.steps.items() if s in left}
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def tracked_ok(self) -> bool:
        return self.tracker is None or self.steps.get(self.tracker) is True


class Driver:
    """Base: a process the job's supervisor actor runs; ends once."""

    connects = True  # calls ray.init(): gets a Ray job id
    def __init__(self, world: Any, job: Any) -> None:
        self.world, self.job = world, job
        self.alive = False
        self.mode = "healthy"

    def start(self) -> None:
        self.alive = True
        self.t0 = self.world.clock.now
        self.run()

    def at(self, delay: float, action: Any) -> None:
        def fire() -> None:
            if self.alive:
                action()
        self.world.schedule(delay, fire)

    def log(self, line: str) -> None:
        self.world.ray.log(self.job, line)
        self.world.observe_log(self.job, line)

    def exit(self, code: int, stopped: bool = False) -> None:
        if self.alive:
            self.alive = False
            self.world.ray.driver_exited(self.job, code, stopped)

    def stop(self) -> None:  # SIGTERM from the job's supervisor actor
        self.at(0.5, lambda: self.exit(-15, stopped=True))

    def kill(self) -> None:  # the node or the head went away: nothing more is written
        self.alive = False

    def run(self) -> None: ...


class Training(Driver):
    def __init__(self, world: Any, job: Any, run: Any) -> None:
        super().__init__(world, job)
        self.run_ = run
        self.mode = world.plan.next_attempt
        self.fail_in_save = False

    def run(self) -> None:
        bucket, keep = self.run_.bucket, self.run_.keep
        bucket.prune(keep)
        self.world.check_tracker(bucket)
        if self.mode == "crash":
            self.at(0.5, lambda: (self.log("ImportError: cannot import name 'x' (simulated)"),
                                  self.exit(1)))
            return
        self.place()

    def place(self) -> None:
        if not self.world.ray.place(self.job, ["TaskRunner"] + ["WorkerDict"] * GPUS):
            self.at(PLACE_RETRY_S, self.place)
            return
        bucket = self.run_.bucket
        loaded, up = phase_lines(self.run_.total_steps, "sim")
        self.at(PHASE_AT[0], lambda: self.log(actor(1) + loaded))
        resume = bucket.tracker if bucket.tracked_ok() else None
        found = resume_line(step_folder("", resume) if resume else None, resume)
        self.at(PHASE_AT[1], lambda: self.log(f"{actor(1)}INFO:sim:{found}"))
        self.at(PHASE_AT[1], lambda: self.log(actor(1) + up))
        self.step = resume or 0
        self.at(PHASE_AT[1] + STEP_S, self.next_step)

    def next_step(self) -> None:
        if self.mode == "hang":
            return
        self.step += 1
        step = self.step
        self.log(actor(1) + training_step_line(step, {
            "critic/score/mean": f"{step / 100:.3f}", "actor/lr": "np.float64(1e-05)",
            "response_length/mean": 100 + step}, STEP_S))
        if step % SAVE_EVERY == 0:
            self.save(step)
        if step >= self.run_.total_steps:
            self.at(TRACKER_AFTER_S + 1, lambda: self.exit(0))
        else:
            self.at(STEP_S, self.next_step)

    def save(self, step: int) -> None:
        bucket, keep = self.run_.bucket, self.run_.keep
        bucket.steps[step] = True
        saved = self.saved = getattr(self, "saved", []) + [step]
        for old in saved[:-keep]:  # verl's window: what this process saved, beyond keep
            if old in bucket.steps:
                bucket.steps[old] = False
        self.world.check_tracker(bucket)
        if self.fail_in_save:
            self.at(1.0, lambda: self.exit(1))
            return

        def tracker() -> None:
            bucket.tracker = step
            self.world.check_tracker(bucket)
        self.at(TRACKER_AFTER_S, tracker)


class Export(Driver):
    connects = False  # verl.model_merger never calls ray.init (no `import ray` in
    # verl/model_merger/ at the pinned ref): its record's job_id stays null

    def __init__(self, world: Any, job: Any, run: Any) -> None:
        super().__init__(world, job)
        self.run_ = run
        self.mode = world.plan.next_export

    def run(self) -> None:
        self.log("verl model merger: loading shards")
        if self.mode == "hang":
            return
        if self.mode == "fail":
            self.at(EXPORT_S / 2, lambda: (self.log("MemoryError (simulated)"), self.exit(1)))
            return

        def merged() -> None:
            tracker = self.run_.bucket.tracker
            missing, saved = export_lines(os.path.join(
                step_folder("", tracker or 0), verl.CHECKPOINT_ACTOR_DIR), "huggingface")
            if self.run_.bucket.tracked_ok() and tracker is not None:
                self.log(saved)
                self.run_.exported = True
                self.exit(0)
            else:
                self.log(missing)
                self.exit(1)
        self.at(EXPORT_S, merged)


class Check(Driver):
    """The ClusterCheck's script: measures and prints its result line (cluster_check.py)."""

    def run(self) -> None:
        def done() -> None:
            self.log(self.world.check_result_line())
            self.exit(0)
        self.at(CHECK_S, done)


class Stray(Driver):
    """Any other entrypoint (the conformance script's): `echo <text>` prints and exits 0;
    anything else (`sleep N`) runs until stopped."""

    connects = False

    def run(self) -> None:
        if self.job.entrypoint.startswith("echo "):
            self.at(0.1, lambda: (self.log(self.job.entrypoint[5:]), self.exit(0)))
