"""The project's own files as the tools that read them do: Pulumi.yaml as the CLI (and `pulumi
new`) parses it, and the requirements files as the layers the Makefile installs."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
from pathlib import Path

import jsonschema
import yaml

from components.facts import pins
from components.facts.hardware import PROFILES
from components.schema import config

ROOT = Path(__file__).resolve().parents[1]
PROJECT = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
PROJECT_SCHEMA = json.loads((ROOT / "tests/schemas/pulumi-project.json").read_text())


def test_pulumi_yaml_is_a_valid_project_for_the_cli():
    """Pulumi.yaml, template section included, passes the JSON Schema the Pulumi CLI validates
    project files with (pulumi/pulumi sdk/go/common/workspace/project.json)."""
    jsonschema.Draft202012Validator(PROJECT_SCHEMA).validate(PROJECT)


def test_the_schema_refuses_what_the_cli_refuses():
    """The vendored schema is not vacuous: an unknown template field and an unknown config type
    are refused by it, as the CLI refuses them."""
    validator = jsonschema.Draft202012Validator(PROJECT_SCHEMA)
    bad_template = {**PROJECT, "template": {**PROJECT["template"], "prompts": {}}}
    bad_type = {**PROJECT, "config": {**PROJECT["config"], "x": {"type": "map"}}}
    assert not validator.is_valid(bad_template)
    assert not validator.is_valid(bad_type)


def _template_key(key: str) -> str:
    """What `pulumi new` makes of a template config key: a bare key is the project's
    (pkg/cmd/pulumi/project/newcmd/config.go, resolveTemplateConfig)."""
    return key if ":" in key else f"{PROJECT['name']}:{key}"


def test_pulumi_new_asks_for_the_site_facts_and_the_token_as_a_secret():
    """`pulumi new` prompts for exactly the values every stack must set (project, region, zone,
    reservation, token, target), each a key the program reads, and stores the token encrypted:
    the program refuses a plain-text token."""
    asked = {_template_key(k): v for k, v in PROJECT["template"]["config"].items()}
    assert set(asked) == {
        "gcp:project", "verl-gke:target", "verl-gke:region", "verl-gke:zone",
        "verl-gke:reservation", "verl-gke:hfToken",
    }
    for key in asked:
        namespace, _, name = key.partition(":")
        assert key == "gcp:project" or name in config.KEYS, key
    assert asked["verl-gke:hfToken"].get("secret") is True
    assert not any(v.get("secret") for k, v in asked.items() if k != "verl-gke:hfToken")
    assert asked["verl-gke:target"]["default"] in {t.value for t in PROFILES}


def _imported_top_modules(paths: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def _pins(name: str) -> dict[str, str]:
    """`package==version` lines of one requirements file (its own, not the files it includes)."""
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)$", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(3)
    return pins


def _distribution_modules(distribution: str) -> set[str]:
    """The top-level modules an installed distribution provides (its RECORD)."""
    files = importlib.metadata.distribution(distribution).files or []
    tops = {str(f).split("/")[0].removesuffix(".py") for f in files}
    return {t for t in tops if t.isidentifier()}


def test_the_runtime_requirements_are_what_the_program_imports():
    """requirements.txt, what `pulumi up` installs, holds exactly the distributions whose modules
    the program (__main__.py and components/, the in-cluster scripts excepted) imports: nothing
    for the tools or tests, and nothing missing."""
    program = [ROOT / "__main__.py"] + [
        p for p in (ROOT / "components").rglob("*.py")
        if p.name != "cluster_check_script.py" and "staging" not in p.parts[-2:-1]
    ]
    imported = _imported_top_modules(program)
    runtime = _pins("requirements.txt")
    provided = {dist: _distribution_modules(dist) for dist in runtime}
    unused = [dist for dist, modules in provided.items() if not modules & imported]
    assert not unused, f"requirements.txt pins {unused}, which the program never imports"
    third_party = {
        m for m in imported
        if m not in {"components", "__future__"} and m not in __import__("sys").stdlib_module_names
    }
    covered = set().union(*provided.values())
    # omegaconf comes with hydra-core (its own dependency), which is pinned for it.
    assert third_party - covered <= {"omegaconf"}, third_party - covered


def test_tests_run_the_ray_release_the_clusters_run():
    """The Ray the tests start is a release a RayCluster of this program runs, so the job's
    provider is tested against the Jobs API it talks to; and it is a test dependency only."""
    ray = _pins("requirements-dev.txt")["ray"]
    assert ray == pins.RAY_VERSION
    assert "ray" not in _pins("requirements.txt") | _pins("requirements-tools.txt")


# Targets that are steps of others (virtualenvs, Node tools) or housekeeping, not commands.
INTERNAL_TARGETS = {"venv", "dev", "policy-venv", "node", "clean"}


def _make_commands() -> set[str]:
    """The Makefile's commands: its .PHONY targets but the internal ones."""
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    return set(phony) - INTERNAL_TARGETS


def test_the_command_lists_are_the_makefiles_commands():
    """docs/ci.md's list of commands, and the README's (its two first commands and the
    sentence that names the others), hold every command of the Makefile and no other: a new
    target is listed where a user looks for it, a removed one is not promised."""
    ci = (ROOT / "docs/ci.md").read_text()
    block = re.search(r"## The offline commands\n\n```sh\n(.*?)```", ci, re.S).group(1)
    listed = {line.split()[1] for line in block.splitlines() if line.startswith("make ")}
    assert listed == _make_commands(), "docs/ci.md"
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Try it offline first")
    section = readme[start:readme.index("\n## ", start + 1)]
    assert set(re.findall(r"`?make ([a-z0-9-]+)", section)) == _make_commands(), "README.md"


def _imports_of(path: Path, seen: set[Path]) -> set[str]:
    """Third-party top modules `path` imports, following this repository's own modules."""
    if path in seen:
        return set()
    seen.add(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                 else [])
        if isinstance(node, ast.ImportFrom) and node.module in ("tools", "components"):
            names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] in ("tools", "components"):
                for candidate in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts, "__init__.py")):
                    if candidate.exists():
                        found |= _imports_of(candidate, seen)
            elif parts[0] != "__future__" and parts[0] not in __import__("sys").stdlib_module_names:
                found.add(parts[0])
    return found


def test_make_curve_needs_no_test_packages():
    """`make curve` (a saved log, or a deployed stack's) installs requirements-curve.txt, not
    the test packages (requirements-dev.txt: torch, Ray), and that file provides every
    third-party module tools/curve.py imports, its own modules' imports followed; its
    matplotlib is the one the tests plot with."""
    makefile = (ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^curve:(.*)$", makefile, re.M).group(1).split()
    assert prerequisites == ["$(VENV)/.curve-installed"]
    recipe = re.search(r"^\$\(VENV\)/\.curve-installed:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "-r requirements-curve.txt" in recipe and "requirements-dev" not in recipe
    layers = ("requirements.txt", "requirements-tools.txt", "requirements-curve.txt")
    assert "-r requirements-tools.txt" in (ROOT / "requirements-curve.txt").read_text()
    provided = set().union(*(_distribution_modules(d) for layer in layers for d in _pins(layer)))
    needed = _imports_of(ROOT / "tools/curve.py", set())
    # omegaconf comes with hydra-core (its own dependency), which is pinned for it.
    assert needed - provided <= {"omegaconf"}, needed - provided
    assert "matplotlib" in needed
    assert _pins("requirements-curve.txt")["matplotlib"] == _pins("requirements-dev.txt")["matplotlib"]


def test_the_outputs_table_names_every_output_and_field_of_the_schema():
    """docs/observability.md's outputs table has a row per output of
    schemas/stack-outputs.schema.json, and an object output's row names each of its fields
    (`attempts`, `lastFailure`, ... of `job`): the page a user reads is the contract."""
    schema = json.loads((ROOT / "schemas/stack-outputs.schema.json").read_text())
    page = (ROOT / "docs/observability.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|[^|]*\|(.*)\|$", page, re.M)}
    for name, spec in schema["properties"].items():
        assert name in rows, f"docs/observability.md: no row for the output `{name}`"
        missing = [f for f in spec.get("properties", {}) if f"`{f}`" not in rows[name]]
        assert not missing, f"docs/observability.md: `{name}` does not name {missing}"


# Files outside the repository that docs still cite, each owned by a change under way; the
# list only shrinks (the test fails when an entry is no longer cited).
CITED_OUTSIDE = {
    ("docs/design.md", "TRAINING-REVIEW.md"),
    ("docs/cost.md", "TRAINING-REVIEW.md"),
}


def test_the_docs_cite_no_review_file_outside_the_repository():
    """A review the docs cite by file name (`KUBERAY-RAYJOB-REVIEW.md`) is a file a reader of
    the repository can open: what it says is kept in docs/ (docs/kuberay-rayjob.md), not in a
    directory of the machine it was written on."""
    found = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in re.findall(r"[A-Z][A-Z0-9-]+\.md", page.read_text()):
            if not any((ROOT / d / name).exists() for d in (".", "docs")) and name != "README.md":
                found.add((str(page.relative_to(ROOT)), name))
    assert found == CITED_OUTSIDE, found ^ CITED_OUTSIDE
