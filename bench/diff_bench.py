"""`make diff`'s renders: a fresh interpreter's against one forked from the render server.

    python -m bench.diff_bench [--stack a4] [--warm 3] [--smoke]

A fresh `python -m tools.plan` pays for importing the SDKs every time; tools/render_fork.py
pays for it once (the first render, cold, and the server importing what it loaded), then forks
each render warm. Measured as CPU time (user + system, which a machine shared with other work
disturbs far less than wall time): the fresh render from getrusage of the child, the server and
its forked renders from /proc/<server>/stat (utime, stime; cutime, cstime of the renders it has
waited for), so Linux only. Target: a warm forked render costs at most 0.3x a fresh one, i.e.
the SDK import (about 80 % of a fresh render: bench/plan_bench.py) is not paid again.
`--smoke`: one warm render (`make test` runs it, tests/test_bench.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.plan_bench import measure
from tools import render_fork
from tools.render_plans import RenderRequest

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 0.3


def _cpu(pid: int) -> tuple[float, float]:
    """(the server's own CPU, its waited-for children's CPU) in seconds, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(f) / os.sysconf("SC_CLK_TCK") for f in fields[11:15])
    return utime + stime, cutime + cstime


def _batch(requests: list[RenderRequest]) -> tuple[float, float, float]:
    """Server CPU, renders' CPU and wall time of one batch of forked renders."""
    pid = render_fork._server().process.pid
    (own_before, renders_before), start = _cpu(pid), time.perf_counter()
    results = render_fork.run_all([r.plain() for r in requests])
    wall = time.perf_counter() - start
    own_after, renders_after = _cpu(pid)
    if any(done.returncode for done in results):
        sys.exit(f"a render failed: {next(d.stderr for d in results if d.returncode)}")
    return own_after - own_before, renders_after - renders_before, wall


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="a4")
    parser.add_argument("--warm", type=int, default=3, help="warm renders, one at a time")
    parser.add_argument("--smoke", action="store_true", help="--warm 1 (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.warm = 1
    with tempfile.TemporaryDirectory() as out:
        fresh = measure([sys.executable, "-m", "tools.plan", "--stack", args.stack, "--quiet", "--out", out], ROOT)
        request = RenderRequest(ROOT, args.stack, Path(out))
        render_fork._close_server()  # a cold server, as `make diff` starts with
        learning, cold, cold_wall = _batch([request])
        warm = [_batch([request]) for _ in range(args.warm)]
        render_fork._close_server()
    warm_cpu = statistics.median(renders for _, renders, _ in warm)
    ratio = warm_cpu / fresh.cpu_s
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(f"fresh render ({args.stack}): {fresh.cpu_s:.2f} s CPU, {fresh.wall_s:.2f} s wall")
    print(f"forked, cold (the first of a session): {cold:.2f} s CPU, {cold_wall:.2f} s wall; "
          f"then the server imports what it loaded: {learning:.2f} s CPU")
    print(f"forked, warm, median of {args.warm}: {warm_cpu:.2f} s CPU, "
          f"{statistics.median(w for *_, w in warm):.2f} s wall")
    print(f"ratio warm/fresh {ratio:.2f}x CPU ({verdict} the {TARGET_RATIO}x target)")
    return ratio


if __name__ == "__main__":
    main()
