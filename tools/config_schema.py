"""The JSON Schema of a stack file (Pulumi.<stack>.yaml), generated from the config's models.

    python -m tools.config_schema            # rewrite schemas/stack-config.schema.json
    python -m tools.config_schema --check    # exit 1 if the file is not what the models say

Editors that speak JSON Schema (VS Code's YAML extension, JetBrains) then complete and check
the keys while one types: put `# yaml-language-server: $schema=schemas/stack-config.schema.json`
at the top of a stack file. The schema is pydantic's own (StackConfig.model_json_schema, field
descriptions and defaults included), reshaped to what a stack file holds:
- keys as the CLI writes them: `<project>:<camelCase>`, and `gcp:project`, where <project> is
  the `name:` of Pulumi.yaml: a project renamed by `pulumi new` runs this once to get a schema of
  its own keys (the program reads them under that name; components/forms/pulumi_forms.py).
  Named keys rather than a pattern such as `^[^:]+:zone$`: a pattern cannot make `target`
  required, nor refuse a misspelt key of the project's own namespace;
- numbers and booleans also as the strings `pulumi config set` writes ("4", "true"), which the
  program accepts; "" for an optional key means unset, as in Pulumi.yaml's defaults;
- secrets only as `{secure: <ciphertext>}` (the program refuses a plain-text one);
- the list forms of components/forms/pulumi_forms.LIST_FIELDS (`job.logger: [console, wandb]`);
- other namespaces (gcp:, kubernetes:) allowed, and an unknown key of the project's refused.
It checks forms, not meaning: zone-in-region, capacity and names are the program's checks.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from components.forms import pulumi_forms
from components.schema.config import CONFIG_SCHEMA_PATH, KEYS, StackConfig
from tools import plan

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / CONFIG_SCHEMA_PATH

_SECURE = {
    "type": "object",
    "description": "A secret: set it with `pulumi config set --secret`, which writes the ciphertext.",
    "properties": {"secure": {"type": "string"}},
    "required": ["secure"],
    "additionalProperties": False,
}
_CLI_STRINGS = {
    "integer": {"type": "string", "pattern": r"^-?[0-9]+$"},
    "number": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"},
    "boolean": {"type": "string", "enum": ["true", "false"]},
}


def _reshape(node: Any) -> Any:
    """Pydantic's schema, made to accept what a stack file holds (see the module docstring)."""
    if isinstance(node, list):
        return [_reshape(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _reshape(value) for key, value in node.items()}
    node.pop("title", None)  # pydantic's "Gpunodes" titles say less than the descriptions
    if node.get("writeOnly") and node.get("format") == "password":
        return {**_SECURE, **({"description": node["description"]} if "description" in node else {})}
    if "anyOf" in node:
        # Optional fields: absent or "" is unset; null cannot be written with `pulumi config set`.
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) < len(node["anyOf"]):
            options.append({"const": ""})
        node["anyOf"] = options
        if node.get("default") is None:
            node.pop("default", None)
    if node.get("type") in _CLI_STRINGS:
        typed = {k: node.pop(k) for k in list(node) if k not in ("description", "default")}
        node["anyOf"] = [typed, _CLI_STRINGS[typed["type"]]]
    return node


def _list_form(field: dict[str, Any]) -> dict[str, Any]:
    """A field that takes Hydra's `[a,b]` string, also accepting a YAML list of strings."""
    described = {k: field[k] for k in ("description", "default") if k in field}
    string = {k: v for k, v in field.items() if k not in described}
    return {**described, "anyOf": [string, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}


def _literal(project: str) -> str:
    """`project` as a regex matching itself: a project name is letters, digits, '-', '_' and
    '.' (Pulumi's project file reference), of which only '.' means something in a pattern (and
    an escaped hyphen is not valid ECMAScript outside a class, which JSON Schema patterns follow)."""
    return project.replace(".", r"\.")


def stack_config_schema(project: str | None = None) -> dict[str, Any]:
    """The schema of Pulumi.<stack>.yaml, from StackConfig and its nested models, its keys
    under `project` (default: the `name:` of Pulumi.yaml)."""
    project = project or plan.project_name()
    generated = copy.deepcopy(StackConfig.model_json_schema(by_alias=True, mode="validation"))
    definitions = generated.get("$defs", {})
    for key, fields in pulumi_forms.LIST_FIELDS.items():
        ref = generated["properties"][key]["$ref"].rsplit("/", 1)[-1]
        for field in fields:
            properties = definitions[ref]["properties"]
            properties[field] = _list_form(properties[field])
    config_properties = {"gcp:project": _reshape(generated["properties"]["project"])}
    for alias in KEYS:
        config_properties[f"{project}:{alias}"] = _reshape(generated["properties"][alias])
    required = [f"{project}:{key}" for key in generated.get("required", []) if key == "target"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"{project} stack file (Pulumi.<stack>.yaml)",
        "description": "Generated by `python -m tools.config_schema` from components/schema "
        "(StackConfig); do not edit by hand.",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": config_properties,
                "required": required,
                # Other namespaces (gcp:, kubernetes:) belong to their providers.
                "patternProperties": {rf"^(?!{_literal(project)}:)[A-Za-z0-9_.-]+:.+$": {}},
                "additionalProperties": False,
            },
            "environment": {
                "description": "Pulumi ESC environments to import (`pulumi preview` resolves "
                "them; the offline plan refuses them).",
                "type": "array",
                "items": {"type": "string"},
            },
            "secretsprovider": {"type": "string"},
            "encryptedkey": {"type": "string"},
            "encryptionsalt": {"type": "string"},
        },
        "$defs": _reshape(definitions),
    }


def rendered(project: str | None = None) -> str:
    return json.dumps(stack_config_schema(project), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    text = rendered()
    if args.check:
        if not SCHEMA.is_file() or SCHEMA.read_text() != text:
            print(f"{CONFIG_SCHEMA_PATH} is out of date: run `python -m tools.config_schema`",
                  file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(text)
    print(f"wrote {CONFIG_SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
