"""The one error path of every command-line tool (`make plan`, `policy`, `outputs`, `diff`,
`critical-path`, `curve`, `logs`, `training-stack`): a mistake the user can fix ends in exit 2
and one message that names the key, the bad value and the fix, never in a traceback.

Each tool's entry point is `sys.exit(cli.run(main))`. Errors that reach `run`:
- UsageError (and tools.plan.StackFileError, a subclass): a missing stack file, a git ref git
  cannot resolve, a missing Pulumi CLI, a stack without outputs yet;
- any `pulumi.RunError`, which the program raises for bad config (ConfigError) and preflight
  findings: the Pulumi CLI prints those without a traceback too.
Anything else is a bug of this repository and keeps its traceback.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Callable, Sequence

USAGE_EXIT = 2  # argparse's own exit code for a bad command line


class UsageError(Exception):
    """A problem the user fixes (a key, its value, the fix); printed as `error: <message>`."""


def run(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """`main(argv)`, with every user-fixable error turned into its message and exit 2."""
    try:
        return main(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_EXIT
    except Exception as error:
        if not _is_run_error(error):
            raise
        print(str(error), file=sys.stderr)
        return USAGE_EXIT


def _is_run_error(error: Exception) -> bool:
    # Only a loaded SDK can have raised one; a tool that never imported pulumi does not pay for it.
    pulumi = sys.modules.get("pulumi")
    return pulumi is not None and isinstance(error, pulumi.RunError)


def git(args: Sequence[str], *, key: str, value: str, cwd: str | None = None) -> bytes:
    """stdout of `git <args>`; when git refuses, a UsageError that quotes git's own reason."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise UsageError("git is not on PATH: install git to compare against a commit") from None
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise UsageError(
            f"{key}={value!r}: git cannot use it ({reason}); pass a commit, branch or tag that "
            f"exists here (`git fetch origin` first for origin/main), e.g. {key}=HEAD~1"
        )
    return done.stdout
