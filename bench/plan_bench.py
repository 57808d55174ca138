"""Offline-plan time against the floor of merely importing the SDK modules the program uses.

    python -m bench.plan_bench [--stack a4] [--repeat 5] [--tree PATH] [--smoke]

Both are timed as fresh interpreters (what `make plan` costs a user). The floor imports exactly
the third-party modules a plan run ends up with in `sys.modules` (pulumi_gcp and
pulumi_kubernetes load their submodules lazily, so importing the packages alone would measure
almost nothing), in the order the plan first imported them. Runs alternate (floor, plan, floor,
plan, ...) so that both see the same machine, and each is measured twice: wall time, and CPU
time (user + system of the child, from getrusage), which a machine shared with other work
disturbs far less; the verdict is on the median CPU ratio. Target: the plan within 1.2x of the
floor, i.e. the program itself adds at most a fifth of what Python spends loading the SDKs.

The run that lists the modules also warms the page cache and writes the byte code of the
timed tree's own modules (components/, tools/), as a user's first `make plan` does: Python reads
`__pycache__` from then on. It writes it even where PYTHONDONTWRITEBYTECODE is set (some CI
images and sandboxes set it), which would otherwise have every timed plan compile about 70 of
our modules from source, about 0.1 s CPU that no second `make plan` of a user pays, while the
floor's modules come byte-compiled from the venv (the Makefile runs compileall on it).

`--tree` times another checkout's `tools.plan` (e.g. `git archive <ref> | tar -x -C /tmp/base`)
with this interpreter, for a before/after comparison on the same machine. `--smoke` times one
of each (`make test` runs it, tests/test_bench.py, so that the benchmark cannot rot unseen).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.2
# Run one plan in-process and print the third-party modules it loaded, in load order (dicts
# keep insertion order, and sys.modules gains each module when its import starts).
_LIST_MODULES = """
import json, sys, sysconfig
from tools import plan
plan.main(["--stack", sys.argv[1], "--quiet", "--out", sys.argv[2]])
site = sysconfig.get_paths()["purelib"]
print(json.dumps([
    name for name, module in list(sys.modules.items())
    if (getattr(module, "__file__", None) or "").startswith(site)
]))
"""


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float


def sdk_modules(stack: str, out: str, tree: Path) -> list[str]:
    """The third-party modules one plan of `tree` loads, in load order; that plan run writes
    byte code for the modules it imports (see the module docstring)."""
    writes_bytecode = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run(
        [sys.executable, "-c", _LIST_MODULES, stack, out],
        cwd=tree, check=True, capture_output=True, text=True, env=writes_bytecode,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(command: list[str], cwd: Path) -> Sample:
    """Wall and CPU time of one run of `command` (CPU: user + system of that child alone)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, cpu)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="a4")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose plan is timed")
    parser.add_argument("--smoke", action="store_true", help="--repeat 1 (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeat = 1
    with tempfile.TemporaryDirectory() as out:
        plan_cmd = [sys.executable, "-m", "tools.plan", "--stack", args.stack, "--quiet", "--out", out]
        modules = sdk_modules(args.stack, out, args.tree)
        floor_cmd = [sys.executable, "-c",
                     "import importlib\nfor m in %r: importlib.import_module(m)" % modules]
        floors, plans = [], []
        for _ in range(args.repeat):
            floors.append(measure(floor_cmd, args.tree))
            plans.append(measure(plan_cmd, args.tree))
    cpu_ratio = statistics.median(p.cpu_s / f.cpu_s for p, f in zip(plans, floors))
    wall_ratio = statistics.median(p.wall_s / f.wall_s for p, f in zip(plans, floors))
    verdict = "within" if cpu_ratio <= TARGET_RATIO else "OVER"
    median = lambda samples, kind: statistics.median(getattr(s, kind) for s in samples)  # noqa: E731
    label = "" if args.tree == ROOT else f" of {args.tree}"
    print(f"offline plan{label} ({args.stack}), median of {args.repeat}: "
          f"{median(plans, 'cpu_s'):.2f} s CPU, {median(plans, 'wall_s'):.2f} s wall")
    print(f"SDK import floor ({len(modules)} third-party modules the plan loads): "
          f"{median(floors, 'cpu_s'):.2f} s CPU, {median(floors, 'wall_s'):.2f} s wall")
    print(f"ratio {cpu_ratio:.2f}x CPU ({verdict} the {TARGET_RATIO}x target), {wall_ratio:.2f}x wall")
    return cpu_ratio


if __name__ == "__main__":
    main()
