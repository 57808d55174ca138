"""Offline-plan time against the floor of merely importing the SDK modules the program uses.

    python -m bench.plan_bench [--stack a4] [--repeat 5]

Both are timed as fresh interpreters (what `make plan` costs a user), median of --repeat runs.
The floor imports exactly the third-party modules a plan run ends up with in `sys.modules`
(pulumi_gcp and pulumi_kubernetes load their submodules lazily, so importing the packages alone
would measure almost nothing). Target: the plan within 1.5x of that floor, i.e. the program
itself adds at most half again what Python spends loading the SDKs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.5
# Run one plan in-process and print the third-party modules it loaded.
_LIST_MODULES = """
import json, sys, sysconfig
from tools import plan
plan.main(["--stack", sys.argv[1], "--quiet", "--out", sys.argv[2]])
site = sysconfig.get_paths()["purelib"]
print(json.dumps(sorted(
    name for name, module in list(sys.modules.items())
    if (getattr(module, "__file__", None) or "").startswith(site)
)))
"""


def sdk_modules(stack: str, out: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", _LIST_MODULES, stack, out],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


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
        modules = sdk_modules(args.stack, out)  # also warms the page cache and __pycache__
        imports = "import importlib\nfor m in %r: importlib.import_module(m)" % modules
        floor = median_time([sys.executable, "-c", imports], args.repeat)
        plan = median_time(plan_cmd, args.repeat)
    ratio = plan / floor
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(f"offline plan ({args.stack}), median of {args.repeat}: {plan:.2f} s")
    print(f"SDK import floor ({len(modules)} third-party modules the plan loads): {floor:.2f} s")
    print(f"ratio {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")
    return ratio


if __name__ == "__main__":
    main()
