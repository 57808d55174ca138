"""What preflight adds to every preview and up, as sequential invoke rounds.

    python -m bench.preflight_bench [--delay 0.5] [--smoke]

Each preflight invoke waits for the provider and the API (the Service Usage reads also wait the
provider's 3 s batching window: terraform-provider-google google/transport/batcher.go), so the
cost of preflight is how many of them wait one after another, not how many there are. The
program runs offline per case with the mocks answering at once, and with each preflight invoke
answered after `--delay` seconds; preflight's extra time over the delay is the number of
sequential rounds. Target: at most 2.

The mock runtime's thread pool is sized as the Pulumi CLI sizes it for a program: 4 x parallel
workers (pulumi/pulumi sdk/python/cmd/pulumi-language-python-exec `_set_default_executor`), with
parallel defaulting to 4 x the CPUs (pkg/cmd/pulumi/operations, defaultParallel; flags_test.go:
`GOMAXPROCS(0) * 4`). Python's default, min(32, CPUs + 4), would hold back invokes on a small
machine that the CLI sends together.

`--smoke`: the first case, each run once, a short delay (`make test` runs it,
tests/test_bench.py, so that the benchmark cannot rot unseen; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import runpy
import time
from concurrent.futures import ThreadPoolExecutor

from components import preflight
from tools import mockrun, plan

TARGET_ROUNDS = 2
# The thread pool a `pulumi preview` gives the program on this machine (see the module doc).
_CLI_EXECUTOR = ThreadPoolExecutor(max_workers=4 * 4 * (os.cpu_count() or 1))
PREFLIGHT_TOKENS = (
    mockrun.PROJECT_SERVICE, mockrun.ENGINE_VERSIONS, mockrun.LIST_BUCKETS, mockrun.GET_BUCKET,
    mockrun.GET_RESERVATION, mockrun.GET_RESERVATION_BLOCK, mockrun.QUOTA_INFOS,
)
# The capacity paths preflight reads differently: a reservation, the preemptible quota, a
# reservation block (read once the reservation lists it: the one second round).
CASES = (
    ("a4", None, {}), ("a4", "autopilot", {}), ("a4x", None, {}),
    ("a4", None, {"verl-gke:reservation": "example-reservation/reservationBlocks/block-1"}),
)


def _run(stack: str, mode: str | None, overrides: dict[str, str], delay: float) -> tuple[float, int]:
    """Seconds preflight took in one offline run of the program, and how many invokes it made.

    Preflight runs before the program registers anything, so its duration is exactly what it
    adds to the run; it is timed around `components.preflight.run`, which __main__.py calls.
    """
    inputs = plan.stack_inputs(stack, mode, overrides)
    counted: list[str] = []
    spent: list[float] = []
    invokes = {**mockrun.EXAMPLE_INVOKES, **plan.example_invokes(inputs.config)}

    def counting(token: str):
        answer = invokes[token]
        return lambda args: (counted.append(token), answer(args) if callable(answer) else answer)[1]

    def timed(config):
        start = time.perf_counter()
        try:
            return checks(config)
        finally:
            spent.append(time.perf_counter() - start)

    asyncio.get_event_loop().set_default_executor(_CLI_EXECUTOR)
    checks, preflight.run = preflight.run, timed
    try:
        mockrun.run(
            lambda: runpy.run_path(str(plan.ROOT / "__main__.py"), run_name="__pulumi_main__"),
            project=plan.project_name(), stack=stack, config=inputs.config,
            secret_keys=inputs.secret_keys,
            invokes={token: counting(token) for token in PREFLIGHT_TOKENS if token in invokes},
            invoke_delay={token: delay for token in PREFLIGHT_TOKENS} if delay else None,
        )
    finally:
        preflight.run = checks
    return spent[0], len(counted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per preflight invoke")
    parser.add_argument("--smoke", action="store_true", help="one case, one run each (make test)")
    args = parser.parse_args(argv)
    cases, tries = (CASES[:1], 1) if args.smoke else (CASES, 3)
    if args.smoke:
        args.delay = 0.05
    worst = 0
    for stack, mode, overrides in cases:
        if not args.smoke:
            _run(stack, mode, overrides, 0)  # warm imports and caches
        quick, count = min(_run(stack, mode, overrides, 0) for _ in range(tries))
        slow, _ = min(_run(stack, mode, overrides, args.delay) for _ in range(tries))
        rounds = round((slow - quick) / args.delay)
        worst = max(worst, rounds)
        label = f"{stack}{'/' + mode if mode else ''}{' (reservation block)' if overrides else ''}"
        print(f"{label}: {count} preflight invokes in {rounds} sequential "
              f"round(s) ({slow:.2f} s at {args.delay} s per invoke, best of {tries}; {quick:.2f} s without)")
    verdict = "within" if worst <= TARGET_ROUNDS else "OVER"
    print(f"preflight adds at most {worst} sequential invoke round(s) "
          f"({verdict} the target of {TARGET_ROUNDS})")
    return worst


if __name__ == "__main__":
    main()
