"""`make diff STACK=<stack> CONFIG_BASE=<file>|<git ref>:<file> [CONFIG=<file>]`: what a config
change of one stack does (tools/plan_report.py's report; `python -m tools.plan_diff
--base-config` hands its parsed arguments to `main` here).

Both plans are rendered by the work tree's program (tools/render_plans.py), the base from the
stack file CONFIG_BASE names (a path, or the file at a commit, read with `git show`), the head from
CONFIG or the stack's own Pulumi.<stack>.yaml, and compared as tools/plan_diff.py compares two
commits' plans (tools/plan_report.py): a reviewer of a config change sees what it replaces, not every resource created.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from tools import cli
from tools.plan_report import emit, stack_report
from tools.render_plans import ROOT, RenderRequest, render_all, split_stack


def config_at(spec: str, scratch: Path, stack: str = "<stack>") -> tuple[Path, str]:
    """The stack file `spec` names, and how to show it: a path that exists, else `<git ref>:<path>`
    (the file at that commit, read with `git show` into `scratch`); a UsageError naming the
    value and the fix for neither."""
    from tools import plan

    if Path(spec).is_file():
        return Path(spec), spec
    ref, colon, path = spec.partition(":")
    if not colon or not ref or not path:
        raise plan.StackFileError(
            f"CONFIG_BASE={spec!r} (--base-config): no such file; pass a stack file's path "
            "(e.g. Pulumi.dev.yaml.orig) or <git ref>:<path> (e.g. HEAD:Pulumi.dev.yaml)"
        )
    # A ref git cannot resolve: git's own reason, and the generic fix (another ref).
    cli.git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            key="CONFIG_BASE", value=spec, cwd=ROOT)
    if subprocess.run(["git", "cat-file", "-e", f"{ref}:{path}"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        raise plan.StackFileError(_not_at(spec, ref, path, stack))
    text = cli.git(["show", f"{ref}:{path}"], key="CONFIG_BASE", value=spec, cwd=ROOT)
    copy = scratch / "base-config" / Path(path).name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(text)
    return copy, spec


def _not_at(spec: str, ref: str, path: str, stack: str) -> str:
    """Why `<ref>:<path>` names no file, and the fix. A stack file that was never committed
    (a new stack's) has no earlier version in git at all: another ref cannot help, a copy of it
    as it was before the change can (RE-12 of the fourth ecosystem review)."""
    if (ROOT / path).is_file():
        return (
            f"CONFIG_BASE={spec!r} (--base-config): {path} is not committed at {ref} (a new "
            f"stack's file has no earlier version in git): pass a copy of it as it was before "
            f"your change instead, CONFIG_BASE=<file> (e.g. `cp {path} {path}.orig` before you "
            f"edit it, then `make diff STACK={stack} CONFIG_BASE={path}.orig`), or commit it "
            f"first and pass CONFIG_BASE=HEAD:{path}"
        )
    return (
        f"CONFIG_BASE={spec!r} (--base-config): there is no {path} at {ref}: pass a stack "
        f"file that exists there (`git ls-tree --name-only {ref}` lists them), or a file's path"
    )


def diff_configs(stack: str, base: Path, head: Path | None, scratch: Path,
                 shown: tuple[str, str]) -> tuple[str, bool]:
    """The Markdown report of one stack's two configs, both planned by the work tree's program,
    and whether the head failed to render."""
    base_render, head_render = render_all([
        RenderRequest(ROOT, stack, scratch / "plans-base", config_file=base),
        RenderRequest(ROOT, stack, scratch / "plans-head", providers=True, config_file=head),
    ])
    lines = ["## Offline plan diff of a config change", "",
             f"Base config: `{shown[0]}`; head config: `{shown[1]}`; both planned by the work "
             "tree's program.", ""]
    lines += stack_report(stack, base_render, head_render)[0]
    return "\n".join(lines), head_render.plan is None


def main(args: argparse.Namespace) -> int:
    """`make diff CONFIG_BASE=`: one stack's two configs, each stack file checked before any
    render; the report written where plan_diff's --output and --comment say."""
    from tools import plan

    if not args.stack or len(args.stack) != 1:
        raise cli.UsageError("--base-config (CONFIG_BASE=) compares one stack: pass one --stack (STACK=)")
    [stack] = args.stack
    name, _ = split_stack(stack)
    head = plan.stack_file(name, args.head_config)  # StackFileError: names the file and the fix
    with tempfile.TemporaryDirectory(prefix="plan-diff-") as scratch:
        base, shown = config_at(args.base_config, Path(scratch), stack)
        report, failed = diff_configs(
            stack, base.resolve(), args.head_config.resolve() if args.head_config else None,
            Path(scratch), (shown, str(args.head_config or head.name)))
    return emit(report, failed, args)


