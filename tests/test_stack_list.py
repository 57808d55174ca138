"""The stacks and modes are one list (tools/stacks.py): the tests, `make plan-all`, the
pull-request workflow and tools/cost.py read it or are held to it here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests import conftest
from tools import cost, plan, stacks

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_is_every_shipped_stack_in_every_mode_its_target_runs_in():
    """One stack file per target, each planned on Standard and, where the row allows it, on
    Autopilot: a4 and a3u in both modes, a4x on Standard only; and no stack file is left out."""
    assert stacks.STACK_MODES == (
        ("a4", "standard"), ("a4", "autopilot"), ("a3u", "standard"), ("a3u", "autopilot"),
        ("a4x", "standard"),
    )
    assert sorted(stacks.STACKS) == plan.known_stacks()
    for stack in stacks.STACKS:
        assert plan.stack_target(stack) == stack


def test_the_tests_plan_all_the_workflow_and_cost_read_the_one_list():
    """tests/conftest.py's STACK_MODES is the list; `make plan-all` plans each of its entries
    through tools.stacks (no stack named in the recipe); the cloud preview's matrix is its
    stacks; `make cost` defaults to them."""
    assert conftest.STACK_MODES == list(stacks.STACK_MODES)
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nplan-all:", 1)[1].split("\n\n", 1)[0]
    assert "tools.stacks --plan-args" in recipe and not re.search(r"\ba4x?\b|\ba3u\b", recipe)
    dry_run = subprocess.run(["make", "-n", "plan-all"], cwd=ROOT, capture_output=True, text=True)
    assert "tools.stacks --plan-args" in dry_run.stdout, dry_run.stderr
    printed = subprocess.run([sys.executable, "-m", "tools.stacks", "--plan-args"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert printed == ["--stack a4", "--stack a4 --mode autopilot", "--stack a3u",
                       "--stack a3u --mode autopilot", "--stack a4x"]
    workflow = yaml.safe_load((ROOT / ".github/workflows/pull-request.yml").read_text())
    assert workflow["jobs"]["preview"]["strategy"]["matrix"]["stack"] == list(stacks.STACKS)
    assert cost.STACKS is stacks.STACKS
