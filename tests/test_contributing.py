"""CONTRIBUTING.md names the files a newcomer opens to add a run key or a hardware target, and
the names to look for in them: each file exists and holds each name, so the recipe cannot point
at a file or a table that moved."""

from __future__ import annotations

import re

from tools.plan import ROOT

TEXT = (ROOT / "CONTRIBUTING.md").read_text()
PATH = re.compile(r"`([\w./-]+(?:\.(?:py|yaml|yml|json|md))|Makefile|[\w-]+/[\w./-]*)`")


def _named_paths() -> set[str]:
    return {m for m in PATH.findall(TEXT) if "<" not in m and not m.startswith(("verl-gke", "make"))}


def test_every_file_the_recipes_name_exists():
    """Every path in backticks (a file, or a folder with a slash) is in the repository."""
    paths = _named_paths()
    assert "components/runspec/run_config.py" in paths and "components/facts/hardware.py" in paths
    missing = sorted(p for p in paths if not (ROOT / p.split("#")[0]).exists())
    assert missing == []


def test_every_name_the_recipes_point_at_is_in_a_file_they_name():
    """Each name a step points at (a class, a table: `PROFILES`, `CONTINUATION_FIELDS`) is
    written in one of the files that step names."""
    checked, absent = 0, []
    for step in re.split(r"\n\d+\. ", TEXT)[1:]:
        files = [ROOT / p for p in PATH.findall(step)
                 if "<" not in p and (ROOT / p).is_file() and p.endswith((".py", ".yml", ".yaml"))]
        for name in re.findall(r"`([A-Z_][A-Za-z0-9_]+)`", step):
            checked += 1
            if files and not any(name in f.read_text() for f in files):
                absent.append(name)
    assert checked >= 8
    assert absent == []
