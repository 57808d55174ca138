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
        if "checks" not in p.parts and "staging" not in p.parts[-2:-1]
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
    assert ray in {profile.ray_version for profile in PROFILES.values()}
    assert "ray" not in _pins("requirements.txt") | _pins("requirements-tools.txt")
