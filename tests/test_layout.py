"""The house's shape (issue 37): which room may import which, no import circle, no Python file
outside tests/ over 500 lines; docs/design.md's Layout table says the same in words.

A room is a folder of components/ (`components/run`), a file at components/' top
(`components/guards.py`), `__main__.py`, or a top-level folder (`tools`, `bench`, `policy`,
`tests`). Every import counts, also those under `if TYPE_CHECKING:` and those inside a function:
each is an arrow a reader must follow, and a circle through them is a circle of the code."""

from __future__ import annotations

import ast
import subprocess
from functools import lru_cache
from pathlib import Path

from tools.plan import ROOT

# The floors, lowest first. A room imports only rooms on a lower floor (or itself). On one floor
# the rooms are side by side and import none of each other.
FLOORS: list[set[str]] = [
    {"components/facts", "components"},  # `components`: the package's empty __init__.py
    {"components/messages.py", "components/options.py", "components/secrets.py",
     "components/unknowns.py", "components/provider_home.py"},
    {"components/forms"},
    {"components/runspec"},
    {"components/schema"},
    {"components/guards.py", "components/network", "components/registry", "components/cluster",
     "components/storage", "components/observability", "components/supervisor"},
    {"components/preflight", "components/raycluster", "components/run"},
    {"components/check"},
    {"components/ray"},  # the providers' old module names, for state pickled before the move
    {"__main__.py"},
    {"policy"},  # the CrossGuard pack: its own venv, imports nothing of the project
    {"tools"},
    {"bench"},
    {"tests"},
]
# Rooms that may not import a room below them all the same: the policy pack runs in its own
# virtualenv with its own SDK pins, and reads plans, not the program (policy/README.md).
ISOLATED = {"policy"}

@lru_cache(maxsize=1)
def _python_files() -> tuple[str, ...]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return tuple(p for p in listed if (ROOT / p).is_file())


def _module(path: str) -> str:
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


@lru_cache(maxsize=1)
def _graph() -> dict[str, set[str]]:
    """module -> the project's modules it imports (a name resolved to its longest module)."""
    modules = {_module(p): p for p in _python_files()}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Import):
                found |= {resolve(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                found |= {resolve(f"{base}.{alias.name}") for alias in node.names}
        graph[module] = {m for m in found if m and m != module}
    return graph


def _room(module: str) -> str:
    path = module.replace(".", "/")
    parts = path.split("/")
    if parts[0] == "components" and len(parts) >= 2:
        folder = "/".join(parts[:2])
        return folder if (ROOT / folder).is_dir() else folder + ".py"
    if module == "__main__":
        return "__main__.py"
    return parts[0]


def _floor(room: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


def _circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_room_has_a_floor():
    """Each module of the project lives in a room the floors name: a new folder comes with its
    place in the layering (and a row in docs/design.md's Layout table)."""
    rooms = {_room(m) for m in _graph()}
    placed = set().union(*FLOORS)
    assert rooms - placed == set()


def test_no_arrow_goes_up_or_sideways():
    """Every import from one room to another goes to a lower floor; the policy pack imports
    nothing of the project. (Before: components/cluster/gke_version.py imported
    components/preflight, which imports components/cluster; bench/ imported tests/.)"""
    wrong = []
    for module, imported in sorted(_graph().items()):
        source = _room(module)
        for other in sorted(imported):
            target = _room(other)
            if target == source:
                continue
            if source in ISOLATED or _floor(target) >= _floor(source):
                wrong.append(f"{module} ({source}) -> {other} ({target})")
    assert wrong == []


def test_no_import_circle():
    """No module reaches itself through the imports of others. (Before: schema/config.py <->
    config_checks.py, tools/config_diff.py <-> plan_diff.py, schema/run.py <-> its run_*.py.)"""
    assert _circles(_graph()) == set()


def test_circles_are_found():
    """The circle finder sees a circle through three modules and none in a chain."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()


LINE_LIMIT = 500


def test_no_python_file_outside_tests_is_over_500_lines():
    """A file over LINE_LIMIT lines is split by concern. (Before: schema/run.py 606, tools/plan.py
    511, ray/supervisor.py 504.)"""
    long = sorted(
        path for path in _python_files()
        if not path.startswith("tests/")
        and len((ROOT / path).read_text().splitlines()) > LINE_LIMIT
    )
    assert long == []


def test_the_design_doc_gives_every_room_its_floor():
    """docs/design.md's Layout table puts each room on the floor FLOORS puts it on, so that a
    newcomer reads there what each folder holds and what it may import (`components`, the
    package's empty __init__.py, aside)."""
    layout = (ROOT / "docs" / "design.md").read_text().split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for row in layout.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if row.startswith("| ") and cells[0].isdigit():
            for name in cells[1].replace(",", " ").split():
                documented[name.strip("`").rstrip("/")] = int(cells[0])
    expected = {room: floor for floor, rooms in enumerate(FLOORS) for room in rooms
                if room != "components"}
    assert documented == expected


# A folder's files a newcomer scans at once: past this, a room holds more than one concern.
MAX_FILES_PER_FOLDER = 12


def test_no_folder_of_components_holds_more_than_twelve_python_files():
    """Every folder under components/ holds at most MAX_FILES_PER_FOLDER Python files (its
    __init__.py counted), so a concern that grows gets a room of its own instead of sharing one
    (before issue 38: components/ray held 19, components/schema 22)."""
    counts = {}
    for path in _python_files():
        if path.startswith("components/"):
            folder = path.rpartition("/")[0]
            counts[folder] = counts.get(folder, 0) + 1
    assert {f: n for f, n in counts.items() if n > MAX_FILES_PER_FOLDER} == {}


def test_every_folder_of_components_says_what_lives_there():
    """Each package under components/ opens, in its __init__.py, with a docstring that says what
    the room holds and which rooms may import it; a folder of in-cluster scripts, which nothing
    imports, opens with its script's docstring."""
    files = [p for p in _python_files() if p.startswith("components/")]
    missing = []
    for folder in sorted({p.rpartition("/")[0] for p in files} - {"components"}):
        init = ROOT / folder / "__init__.py"
        first = init if init.is_file() else ROOT / min(p for p in files if p.startswith(folder + "/"))
        doc = ast.get_docstring(ast.parse(first.read_text()))
        if not doc or (init.is_file() and "import" not in doc):
            missing.append(folder)
    assert missing == []


def test_the_supervisors_pod_runs_the_standard_library_and_its_own_files_only():
    """What components/run/supervision.py ships into the supervisor's pod is exactly
    components/supervisor/ (its __init__.py aside, which the pod never imports) plus the verl
    facts, and those files import nothing but the standard library and each other: the pod's
    image is a bare Python. A new file in the room must be shipped; an import of pulumi, of the
    config or of any unshipped module fails here, not in the cluster at 3 a.m."""
    import sys

    from components.run.supervision import CODE_PATHS

    room = {p for p in _python_files() if p.startswith("components/supervisor/")
            and not p.endswith("__init__.py")}
    assert room <= set(CODE_PATHS), "a file of components/supervisor/ the pod does not get"
    shipped = {_module(p) for p in CODE_PATHS}
    foreign = []
    for path in CODE_PATHS:
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: a relative import the pod's layout may not resolve"
                base = node.module or ""
                names = [base] if base != "components" and not base.startswith("components.") \
                    else [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "components":
                    if not any(name == m or name.startswith(m + ".") or m.startswith(name + ".")
                               for m in shipped):
                        foreign.append((path, name))
                elif top != "__future__" and top not in sys.stdlib_module_names:
                    foreign.append((path, name))
    assert foreign == []
