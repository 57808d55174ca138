"""Stand-in for a verl run whose workers are Ray actors on GPU nodes (tests/test_preemption_ray.py).

Like verl's driver, it connects to the job's Ray with `ray.init()` and runs its steps on a worker
actor that asks for a GPU; a test head has none (tools/local_ray.py starts it with
--num-gpus=0), so the actor lands on a worker node that has one, and the driver stays on the
head (Ray runs an entrypoint without entrypoint resources on the head node, ray-2.47.0
dashboard/modules/job/job_manager.py _get_scheduling_strategy). Each step is a call to that
actor, followed by a step line as the pinned verl prints it (components/facts/verl.py; the
program reads the step from the log, components/supervisor/protocol.py last_metrics).

--hold-until FILE: after --steps steps, the driver waits on a call to the actor until FILE exists,
as verl's driver waits on its workers; an attempt whose node is lost meanwhile fails there (Ray
raises in the driver once the actor's node is gone), a later attempt that starts after FILE
exists runs straight through. The steps then go on to --steps + 1, and it exits 0, or 1 with
--fail.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for its verl facts

from components.facts import verl  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--hold-until", metavar="FILE")
    parser.add_argument("--fail", action="store_true", help="exit 1 after the steps")
    args = parser.parse_args()

    import ray

    ray.init()

    @ray.remote(num_gpus=1, num_cpus=0)
    class Worker:
        def step(self, number: int) -> float:
            return 0.1 * number

        def wait_for(self, path: str) -> None:
            while not os.path.exists(path):
                time.sleep(0.2)

    worker = Worker.remote()
    last = args.steps + (1 if args.hold_until else 0)
    for step in range(1, last + 1):
        if args.hold_until and step == last:
            ray.get(worker.wait_for.remote(args.hold_until))
        score = ray.get(worker.step.remote(step))
        metrics = {"critic/score/mean": f"{score:.3f}", "actor/lr": "np.float64(1e-05)",
                   verl.TRAINING_STEP_KEY: 0.1}
        print(f"(TaskRunner pid={os.getpid()}) " + verl.step_line(step, metrics), flush=True)
    if args.fail:
        print("CUDA error: out of memory (simulated)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
