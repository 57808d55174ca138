"""The schemas the rendered objects are validated against are the project's own: every CRD in
tests/schemas/crds/ with its source repository and commit, and nothing the tests or the code
read from outside the clone (a user's clone has no ../shared beside it)."""

from __future__ import annotations

import ast
import re
import subprocess

import yaml

from tests import k8s_schemas
from tools.plan import ROOT


def _table() -> dict[str, str]:
    """tests/schemas/crds/README.md's rows: file -> its source column."""
    rows = {}
    for line in (k8s_schemas.CRD_DIR / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0].endswith(".yaml"):
            rows[cells[0]] = cells[2]
    return rows


def test_every_crd_in_the_project_says_where_it_comes_from():
    """Each CRD file in tests/schemas/crds/ has a row naming its repository and commit
    (`owner/repo @ <hex>`), each row a file, and each kind the tests validate a file there that
    defines that group and kind."""
    files = {p.name for p in k8s_schemas.CRD_DIR.glob("*.yaml")}
    table = _table()
    assert set(table) == files
    for name, source in table.items():
        assert re.match(r"[\w.-]+/[\w.-]+ @ [0-9a-f]{7,40}\b", source), (name, source)
    for (group, kind), name in k8s_schemas.CRD_FILES.items():
        crd = yaml.load((k8s_schemas.CRD_DIR / name).read_text(),
                        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (group, kind)


def _code_strings(source: str) -> list[str]:
    """The string constants of a module that are not docstrings (what code could open)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_nothing_reads_files_from_beside_the_clone():
    """No tracked Python file names a path outside the project (`../shared`, or a `"shared"`
    path segment), and neither do the Makefile and the workflows: a clone with nothing beside
    it runs every test."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    found = []
    for name in tracked:
        if name == "tests/test_k8s_schemas.py":
            continue  # names the path it looks for
        path = ROOT / name
        if name.endswith(".py"):
            found += [(name, s) for s in _code_strings(path.read_text())
                      if "../shared" in s or s.strip("/") == "shared"]
        elif name == "Makefile" or name.startswith(".github/"):
            found += [(name, line) for line in path.read_text().splitlines() if "../shared" in line]
    assert found == []
