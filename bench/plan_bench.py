"""Offline-plan time against the floor of merely importing the SDK modules the program uses.

    python -m bench.plan_bench [--stack a4] [--repeat 5]

Both are timed as fresh interpreters (what `make plan` costs a user), median of --repeat runs.
Target: the plan within 1.5x of the import floor, i.e. the program itself adds at most half
again what Python spends loading pulumi, pulumi_gcp and pulumi_kubernetes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.5
# Everything __main__.py imports from outside the project, as the program imports it.
SDK_IMPORTS = "import pulumi, pulumi.dynamic, pulumi_gcp, pulumi_kubernetes, pydantic, yaml"


def _time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_time(command: list[str], repeat: int) -> float:
    return statistics.median(_time(command) for _ in range(repeat))


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="a4")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as out:
        plan_cmd = [sys.executable, "-m", "tools.plan", "--stack", args.stack, "--quiet", "--out", out]
        _time(plan_cmd)  # warm the page cache and __pycache__ once
        floor = median_time([sys.executable, "-c", SDK_IMPORTS], args.repeat)
        plan = median_time(plan_cmd, args.repeat)
    ratio = plan / floor
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(f"offline plan ({args.stack}), median of {args.repeat}: {plan:.2f} s")
    print(f"SDK import floor ({SDK_IMPORTS}): {floor:.2f} s")
    print(f"ratio {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")
    return ratio


if __name__ == "__main__":
    main()
