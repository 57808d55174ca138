"""A Ray driver with an actor named like verl's (`TaskRunner`), alive for --seconds.

verl's main_ppo runs the whole training loop inside one `TaskRunner` actor; the GPU-idle alert
keys on that actor being ALIVE in Ray's `ray_actors` metric.
"""

import argparse
import time

import ray


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self, seconds: float) -> None:
        time.sleep(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    ray.init()
    runner = TaskRunner.remote()
    ray.get(runner.run.remote(args.seconds))


if __name__ == "__main__":
    main()
