"""One error path for every tool: a mistake the user can fix ends in exit 2 and a message that
names the key, the value and the fix, never in a traceback.

Every case goes through the real entry point (`python -m tools.<tool>`), as `make` runs it.
The cases that fail before the program runs cost a fraction of a second each; one case runs
the program up to its config check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, **(env or {})},
    )


def assert_user_error(result: subprocess.CompletedProcess, *expected: str) -> None:
    """Exit 2, no traceback, and every expected piece of the message on stderr."""
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 2, result.stderr
    for piece in expected:
        assert piece in result.stderr, result.stderr


@pytest.mark.parametrize("tool", ["tools.plan", "tools.policy_check", "tools.outputs",
                                  "tools.critical_path", "tools.curve", "tools.training_stack"])
def test_a_stack_without_a_stack_file_is_named_with_the_stacks_there_are(tool):
    """`make <target> STACK=nope` under every target that takes a stack: the key, the value,
    the stacks of the directory, and how to create one."""
    assert_user_error(
        run_tool(tool, "--stack", "nope"),
        "STACK='nope' (--stack): no stack file Pulumi.nope.yaml here",
        "the stacks are a3u, a4, a4x", "pulumi stack init nope",
    )


def test_wrong_types_and_unknown_enum_values_are_config_errors(tmp_path):
    """A word for gpuNodes and an unknown target: both reported at once, each with its key, the
    value and the fix, where the plan tool used to fail on int('two') and Target('a5')."""
    stack_file = tmp_path / "Pulumi.bad.yaml"
    stack_file.write_text("config:\n  verl-gke:target: a5\n  verl-gke:gpuNodes: two\n")
    assert_user_error(
        run_tool("tools.plan", "--stack", "a4", "--config-file", str(stack_file), "--quiet"),
        "verl-gke:gpuNodes = 'two' is invalid", "use a whole number of nodes",
        "verl-gke:target = 'a5' is invalid", "use a4 (B200), a3u (H200) or a4x (GB200)",
    )


@pytest.mark.parametrize("value", ["2.5", "two"])
def test_example_answers_never_fail_on_a_value_the_program_will_refuse(value):
    """The plan's example capacity answers are built before the program validates; a bad node
    count or target must leave that to the program (no answer), not raise ValueError."""
    from tools import plan

    config = {"verl-gke:target": "a4", "verl-gke:gpuNodes": value, "verl-gke:region": "r"}
    assert plan.example_invokes(config) == {}
    assert plan.example_invokes({**config, "verl-gke:gpuNodes": "0", "verl-gke:target": "a5"}) == {}


def test_a_missing_config_file_is_named():
    assert_user_error(
        run_tool("tools.plan", "--stack", "a4", "--config-file", "no/such/file.yaml"),
        "--config-file 'no/such/file.yaml' does not exist",
    )


def test_diff_against_a_ref_git_cannot_resolve_shows_gits_reason():
    """`make diff BASE=<ref>` with a ref that does not exist: git's own reason, and the fix."""
    assert_user_error(
        run_tool("tools.plan_diff", "--base", "no-such-ref-20b"),
        "BASE='no-such-ref-20b': git cannot use it (fatal: Not a valid object name "
        "no-such-ref-20b^{commit})", "git fetch origin",
    )


def fake_pulumi(directory: Path, stdout: str, code: int = 0, stderr: str = "") -> dict[str, str]:
    """A `pulumi` on PATH that prints `stdout` (what `pulumi stack output --json` would)."""
    script = directory / "pulumi"
    script.write_text(
        f"#!/bin/sh\nprintf '%s' '{stdout}'\nprintf '%s' '{stderr}' >&2\nexit {code}\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("tool", ["tools.curve", "tools.logs"])
def test_reading_a_deployed_stack_without_a_pulumi_cli_says_so(tool, tmp_path):
    """No `pulumi` on PATH: what is missing, where to get it, and the offline alternative."""
    assert_user_error(
        run_tool(tool, "--stack", "a4", env={"PATH": str(tmp_path)}),
        "STACK='a4': reading a deployed stack needs the Pulumi CLI, and `pulumi` is not on PATH",
    )


@pytest.mark.parametrize("tool", ["tools.curve", "tools.logs"])
def test_a_stack_with_no_outputs_yet_is_told_to_run_up(tool, tmp_path):
    """`pulumi stack output --json` of a stack never deployed prints {}: say that, not KeyError."""
    assert_user_error(
        run_tool(tool, "--stack", "a4", env=fake_pulumi(tmp_path, "{}")),
        "STACK='a4' has no output 'rayCluster' yet", "pulumi up --stack a4",
    )


def test_a_failing_pulumi_cli_is_quoted(tmp_path):
    """Not logged in, or no such stack in the backend: the CLI's own words, and the fix."""
    env = fake_pulumi(tmp_path, "", code=255, stderr="error: no stack named a4 found")
    assert_user_error(
        run_tool("tools.curve", "--stack", "a4", env=env),
        "(error: no stack named a4 found)", "LOG=job.log",
    )


def test_curve_from_a_log_that_does_not_exist(tmp_path):
    assert_user_error(run_tool("tools.curve", "--log", str(tmp_path / "job.log")),
                      f"LOG='{tmp_path / 'job.log'}' (--log) is not a file")
