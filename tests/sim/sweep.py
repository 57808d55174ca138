"""A sweep of when `up --refresh` starts against the CronJob's tick, after a failed attempt
whose next attempts crash at once: the race of review finding 8 (a delete removes the other
actor's fast-failing next attempt) is open for well under a second, which random sequences
rarely meet. One run of the state machine per offset; prints each offset that breaks an
invariant, with the attempt numbers Ray saw.

    python -m tests.sim.sweep [--from 118] [--to 128] [--step 0.05] [--linger 3.0]
"""

from __future__ import annotations

import argparse
import sys

from tests.sim.machine import LifecycleMachine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="start", type=float, default=118.0)
    parser.add_argument("--to", type=float, default=128.0)
    parser.add_argument("--step", type=float, default=0.05)
    parser.add_argument("--linger", type=float, default=3.0)
    args = parser.parse_args(argv)
    hits, runs = 0, 0
    offset = args.start
    while offset <= args.to:
        machine = LifecycleMachine()
        machine.setup(max_retries=2, export=False, release=False, keep=2,
                      wait_for="first-step", linger=args.linger, phase=7.0)
        try:
            machine.up()
            machine.next_attempts("crash")
            machine.attempt_does("fail")
            machine.world.clock.sleep(offset)
            machine.up_refresh()
            machine.world.clock.sleep(600)
            broken = [v for v in machine.world.observer.violations
                      if v.startswith(("[budget]", "[one-live-attempt]"))]
            if broken:
                hits += 1
                attempts = [j.metadata.get("verl-gke-attempt")
                            for j in machine.world.ray.submissions
                            if machine.world.kind_of(j) == "train"]
                print(f"offset {offset:.2f}s: attempts {attempts}; {broken[0]}", flush=True)
        finally:
            machine.teardown()
        runs += 1
        offset = round(offset + args.step, 6)
    print(f"{hits} of {runs} offsets break an invariant")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
