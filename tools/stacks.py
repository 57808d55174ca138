"""The shipped stacks and the cluster modes each is planned in: the one list.

    python -m tools.stacks            # one line per stack and mode: `<stack> <mode>`
    python -m tools.stacks --plan-args  # the same as `tools.plan` arguments (`make plan-all`)

One stack per hardware target (`Pulumi.<target>.yaml`), planned on Standard, and on Autopilot
where the target's row allows it (`autopilot_supported`). Derived from components/facts/hardware.py;
read by the tests (tests/conftest.py STACK_MODES), `make plan-all`, tools/cost.py; the pull-request
workflow's cloud-preview matrix is held to STACKS by tests/test_stack_list.py.
"""

from __future__ import annotations

import argparse
import sys

from components.facts.hardware import PROFILES
from components.schema.choices import ClusterMode

STACK_MODES: tuple[tuple[str, str], ...] = tuple(
    (target.value, mode.value)
    for target, hw in PROFILES.items()
    for mode in ClusterMode
    if mode is ClusterMode.STANDARD or hw.autopilot_supported
)
STACKS: tuple[str, ...] = tuple(dict.fromkeys(stack for stack, _ in STACK_MODES))


def plan_args(stack: str, mode: str) -> str:
    """`tools.plan`'s arguments for one stack and mode: Standard is the stack file's own mode
    (its plan goes to build/<stack>), any other is `--mode` (build/<stack>-<mode>)."""
    return f"--stack {stack}" + ("" if mode == ClusterMode.STANDARD.value else f" --mode {mode}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan-args", action="store_true", help="print tools.plan arguments")
    args = parser.parse_args(argv)
    for stack, mode in STACK_MODES:
        print(plan_args(stack, mode) if args.plan_args else f"{stack} {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
