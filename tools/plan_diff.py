"""What a change does, offline: `make diff BASE=<git ref> [STACK=a4|a4-autopilot|...]`, or what
a config change does: `make diff STACK=dev CONFIG_BASE=<file>|<git ref>:<file> [CONFIG=<file>]`.

Renders the offline plan (tools/plan.py) of the base commit, each tree with its own program,
and of the work tree (tools/render_plans.py; all at once, forked from one process that imported
the SDKs: tools/render_fork.py), then prints, per stack, the report of tools/plan_report.py
(resources added, removed, replaced and updated, and why; changed manifests; changed outputs)
as Markdown, for a terminal, a job summary or a pull-request comment. The work tree's render
keeps each dynamic resource's pickled provider (providers.json), so that the report judges the
program's own dynamic resources by their providers' own `diff()`.

A config change (`--base-config`, tools/config_diff.py): both plans rendered by the work
tree's program, from two stack files of one stack, compared as above.

No cloud credentials: the same mock runtime as `make plan`. Exit 1 when the work tree's plan
cannot be rendered; a base that cannot be rendered (or has no such stack) shows as all-added.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from tools import cli, config_diff
from tools.plan_report import emit, stack_report
from tools.render_plans import PROVIDERS_FILE, RenderRequest, materialize, render_all, split_stack

ROOT = Path(__file__).resolve().parents[1]
DYNAMIC_PREFIX = "pulumi-python:dynamic/"


def all_stacks(root: Path = ROOT) -> list[str]:
    """Every `Pulumi.<stack>.yaml` of `root`, and each with `-autopilot` where its target runs
    on Autopilot too (as `make plan-all` renders them, named as their build/ directories are)."""
    from components.facts.hardware import PROFILES

    stacks = []
    project = _project_name(root)
    for path in sorted(root.glob("Pulumi.*.yaml")):
        stack = path.name[len("Pulumi."):-len(".yaml")]
        stacks.append(stack)
        try:
            config = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
        except yaml.YAMLError:
            continue  # its own plan says what is wrong with it
        target = config.get(f"{project}:target") if isinstance(config, dict) else None
        if any(hw.target.value == target and hw.autopilot_supported for hw in PROFILES.values()):
            stacks.append(f"{stack}-autopilot")
    return stacks


def _project_name(root: Path) -> str:
    """The `name:` of `root`'s Pulumi.yaml, the namespace of its keys (verl-gke unless renamed);
    a file that cannot say so leaves the template's name, and its own plan reports it."""
    try:
        name = (yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        name = None
    return name if isinstance(name, str) else "verl-gke"


def render_with_providers(stack: str, out: str, mode: str = "", config_file: str = "") -> int:
    """What `python -m tools.plan --stack <stack> --out <out> --quiet` writes (tools/plan.py
    write_plan), plus providers.json: each dynamic resource's pickled provider, which plan.json
    shows only as a placeholder. Exit 2 on a config error, as tools/plan.py does."""
    from components.schema.config import ConfigError
    from tools import plan

    try:
        inputs, recording = plan.run_program(
            stack, mode or None, config_file=Path(config_file) if config_file else None)
    except (plan.StackFileError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    directory = Path(out) / (f"{stack}-{mode}" if mode else stack)
    plan.write_artifacts(directory, stack, inputs, recording)
    (directory / PROVIDERS_FILE).write_text(plan.plan_json(pickled_providers(recording)))
    return 0


def pickled_providers(recording) -> dict[str, str]:
    """URN -> the `__provider` input of each dynamic resource: its provider, dill-pickled and
    base64-encoded by the SDK (pulumi/dynamic/dynamic.py serialize_provider), and sent as a
    secret (it may capture values), unwrapped here. `make diff` writes it only into its own
    temporary directory, which it deletes; none of this program's providers captures one."""
    from tools import mockrun
    from tools.plan_artifacts import DYNAMIC_PROVIDER_KEY

    found = {}
    for r in recording.resources:
        pickled = mockrun.unwrap(r.inputs.get(DYNAMIC_PROVIDER_KEY))
        if r.type.startswith(DYNAMIC_PREFIX) and isinstance(pickled, str):
            found[r.urn] = pickled
    return found


def diff_trees(base_tree: Path, head_tree: Path, stacks: list[str], scratch: Path) -> tuple[str, bool]:
    """The whole Markdown report for `stacks`, and whether the head failed to render."""
    lines = ["## Offline plan diff", ""]
    failed = False
    renders = render_all([
        request for stack in stacks for request in (
            RenderRequest(base_tree, stack, scratch / "plans-base"),
            RenderRequest(head_tree, stack, scratch / "plans-head", providers=True),
        )
    ])
    for stack, base, head in zip(stacks, renders[::2], renders[1::2]):
        failed |= head.plan is None
        lines += stack_report(stack, base, head)[0]
    return "\n".join(lines), failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="git ref of the base (e.g. origin/main)")
    parser.add_argument("--base-config",
                        help="compare configs instead: the base stack file, a path or "
                        "<git ref>:<path> (one --stack)")
    parser.add_argument("--head-config", type=Path,
                        help="the head stack file (default: the stack's Pulumi.<stack>.yaml)")
    stacks = all_stacks()
    parser.add_argument("--stack", action="append",
                        help="a stack (repeatable): any Pulumi.<stack>.yaml, `-autopilot` for its "
                        "Autopilot variant; default: every Pulumi.<stack>.yaml, and each on "
                        "Autopilot where its target runs there")
    parser.add_argument("--output", type=Path, help="also write the Markdown report here")
    parser.add_argument("--comment", type=Path,
                        help="also write it as a PR comment: a marker line first, cut to GitHub's limit")
    args = parser.parse_args(argv)
    if args.base_config:
        return config_diff.main(args)
    if not args.base:
        parser.error("give --base <git ref> (BASE=), or --base-config <file> (CONFIG_BASE=) with one --stack")
    from tools import plan

    for stack in args.stack or ():
        plan.stack_file(split_stack(stack)[0])  # StackFileError: names the file and the fix
    # A ref git cannot resolve is the user's to fix: say git's own reason, not a traceback.
    cli.git(["cat-file", "-e", f"{args.base}^{{commit}}"], key="BASE", value=args.base, cwd=ROOT)
    with tempfile.TemporaryDirectory(prefix="plan-diff-") as scratch:
        base_tree = materialize(args.base, Path(scratch) / "base-tree")
        report, failed = diff_trees(base_tree, ROOT, args.stack or stacks, Path(scratch))
    return emit(report, failed, args)


if __name__ == "__main__":
    sys.exit(cli.run(main))
