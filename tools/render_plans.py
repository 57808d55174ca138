"""Rendering trees' offline plans for `make diff` (tools/plan_diff.py): each tree by its own
program, all of a diff's renders at once (tools/render_fork.py), read back in request order."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import render_fork

ROOT = Path(__file__).resolve().parents[1]
MODES = ("standard", "autopilot")
PROVIDERS_FILE = "providers.json"  # written by plan_diff.render_with_providers


@dataclass
class Rendered:
    """One tree's plan of one stack: the plan document and manifests, or why there is none."""

    plan: dict[str, Any] | None = None
    manifests: str = ""
    error: str | None = None
    # URN -> the pickled provider of each dynamic resource (the work tree's plan only).
    providers: dict[str, str] = field(default_factory=dict)


def materialize(ref: str, dest: Path, repo: Path = ROOT) -> Path:
    """The tree of commit `ref` in `dest` (git archive: no worktree bookkeeping left behind)."""
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", ref],
        check=True, capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def split_stack(stack: str) -> tuple[str, str | None]:
    """`a4-autopilot` -> ("a4", "autopilot"); a stack name may itself hold dashes."""
    name, _, mode = stack.rpartition("-")
    return (name, mode) if name and mode in MODES else (stack, None)


@dataclass(frozen=True)
class RenderRequest:
    """One tree's plan of one stack ("a4" or "a4-autopilot") into `out`; `providers` keeps the
    pickled dynamic providers too (the head's)."""

    tree: Path
    stack: str
    out: Path
    providers: bool = False
    config_file: Path | None = None  # a stack file read in place of Pulumi.<stack>.yaml

    def plain(self) -> render_fork.Command:
        """The tree's own `python -m tools.plan`."""
        name, mode = split_stack(self.stack)
        argv = ("-m", "tools.plan", "--stack", name, "--out", str(self.out), "--quiet")
        argv += ("--mode", mode) if mode else ()
        argv += ("--config-file", str(self.config_file)) if self.config_file else ()
        return render_fork.Command(argv, self.tree)

    def own(self) -> render_fork.Command:
        """The tree's tools/plan_diff.py `render_with_providers`."""
        name, mode = split_stack(self.stack)
        code = ("import sys; from tools import plan_diff; "
                "sys.exit(plan_diff.render_with_providers(*sys.argv[1:]))")
        config = (str(self.config_file),) if self.config_file else ()
        return render_fork.Command(("-c", code, name, str(self.out), mode or "", *config), self.tree)


def render_all(requests: list[RenderRequest]) -> list[Rendered]:
    """Run each tree's own program for its stack, all at once (tools/render_fork.py: forked
    from one process that has imported the SDKs, a core each), the results in `requests`' order.
    With `providers`, the tree's `render_with_providers`; a tree from before that function (an
    older commit as the head) is rendered by its tools/plan.py, and its dynamic resources judged
    by the tables."""
    results = render_fork.run_all([r.own() if r.providers else r.plain() for r in requests])
    # Exit 2 is the program's own config error; anything else: no such function in that tree.
    again = [i for i, (r, done) in enumerate(zip(requests, results))
             if r.providers and done.returncode not in (0, 2)]
    for i, done in zip(again, render_fork.run_all([requests[i].plain() for i in again])):
        results[i] = done
    return [_rendered(r, done) for r, done in zip(requests, results)]


def _rendered(request: RenderRequest, result: subprocess.CompletedProcess) -> Rendered:
    directory = request.out / request.stack
    if result.returncode != 0 or not (directory / "plan.json").exists():
        return Rendered(error=(result.stderr or result.stdout).strip() or f"exit {result.returncode}")
    kept = directory / PROVIDERS_FILE
    return Rendered(
        plan=json.loads((directory / "plan.json").read_text()),
        manifests=(directory / "manifests.yaml").read_text(),
        providers=json.loads(kept.read_text()) if request.providers and kept.exists() else {},
    )
