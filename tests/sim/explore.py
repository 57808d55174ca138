"""`make explore`: a long exploration of the run's lifecycle; prints the seed, what it explored
(sequences, steps, preempted attempts, sequences in which a tick ran past a run's deadline)
and, for anything it finds, the shortest failing sequence hypothesis shrank it to.

    python -m tests.sim.explore [--examples N] [--steps N] [--seed N] [--without rule,rule]
                                [--setup key=value,...] [--only invariant]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import hypothesis.core
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.sim import machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--without", default="", help="rules to switch off, comma-separated")
    parser.add_argument("--only", default=None, help="check this invariant alone (a name "
                        "of tests/sim/invariants.py INVARIANTS, or its prefix)")
    parser.add_argument("--setup", default="", help="config values to pin, e.g. keep=2,"
                        "max_retries=1 (so that a known failure does not end every sequence)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    hypothesis.core.global_force_seed = seed
    disabled = frozenset(filter(None, args.without.split(",")))
    pinned = {key: _value(raw) for key, _, raw in (
        item.partition("=") for item in filter(None, args.setup.split(",")))}
    counted = {"sequences": 0, "steps": 0, "preempted": 0, "past deadline": 0}

    class Counted(machine.LifecycleMachine):
        DISABLED = disabled
        PINNED = pinned
        PREFER, ONLY = args.only, args.only is not None

        def __init__(self) -> None:
            super().__init__()
            counted["sequences"] += 1

        def check_invariants(self, *a, **k):  # called once per step, and after initialize
            counted["steps"] += 1
            return super().check_invariants(*a, **k)

        def teardown(self) -> None:
            if self.world is not None:
                preempted, past_deadline = machine.met(self.world)
                counted["preempted"] += preempted
                counted["past deadline"] += past_deadline
            super().teardown()

    print(f"seed {seed}; {args.examples} sequences of up to {args.steps} steps"
          + (f"; without {', '.join(sorted(disabled))}" if disabled else "")
          + (f"; pinned {pinned}" if pinned else "")
          + (f"; checking {args.only} only" if args.only else ""), flush=True)
    started = time.process_time()
    found = 0
    try:
        run_state_machine_as_test(Counted, settings=settings(
            max_examples=args.examples, stateful_step_count=args.steps, deadline=None,
            database=None, derandomize=False,  # or the seed is ignored where CI is set
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate, Phase.shrink, Phase.explain][:2], print_blob=False))
    except BaseException as error:  # noqa: BLE001  hypothesis raises what it found
        found = 1
        errors = getattr(error, "exceptions", [error])
        for one in errors:
            print(f"\nFOUND {type(one).__name__}: {one}")
            for note in getattr(one, "__notes__", []):
                # Without the invariant checks between steps (every step is followed by one).
                print("\n".join(line for line in note.splitlines()
                                if line.strip() not in ("state.holds()", "")))
    print(f"\nexplored {counted['sequences']} sequences, {counted['steps']} steps "
          f"({counted['preempted']} attempts preempted; {counted['past deadline']} "
          "sequences with a tick past a run's deadline), "
          f"{time.process_time() - started:.1f} CPU-s (seed {seed})")
    return found


def _value(raw: str):
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(raw.lower(), raw)


if __name__ == "__main__":
    sys.exit(main())
