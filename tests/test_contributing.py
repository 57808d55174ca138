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
    assert "components/schema/run.py" in paths and "components/facts/hardware.py" in paths
    missing = sorted(p for p in paths if not (ROOT / p.split("#")[0]).exists())
    assert missing == []


def test_every_name_the_recipes_point_at_is_in_its_file():
    """A name given in parentheses after a file (`file` (`NAME`...) is written in that file."""
    pairs = re.findall(r"`([\w./-]+\.(?:py|yml|yaml))`\s*\(`(\w+)`", TEXT)
    pairs += re.findall(r"`([\w./-]+\.py)`: the [^`]*`(\w+)`", TEXT)
    assert len(pairs) >= 5
    absent = [(path, name) for path, name in pairs if name not in (ROOT / path).read_text()]
    assert absent == []
