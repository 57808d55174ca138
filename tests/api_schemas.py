"""Google API request bodies validated offline against the APIs' own discovery documents.

google-api-python-client ships Google's discovery documents
(googleapiclient/discovery_cache/documents/<api>.<version>.json). Their `schemas` section is a
JSON-Schema-like description of every resource; `as_json_schema` turns one into a real JSON
Schema (draft 7) with unknown fields forbidden, as the API's JSON parser forbids them
(an unknown field is a 400 "Invalid JSON payload received. Unknown name").
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import googleapiclient

DOCUMENTS = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@functools.lru_cache(maxsize=None)
def discovery(api: str) -> dict[str, Any]:
    """The discovery document, e.g. discovery("monitoring.v1")."""
    return json.loads((DOCUMENTS / f"{api}.json").read_text())


def as_json_schema(api: str, root: str) -> dict[str, Any]:
    """JSON Schema of resource `root` (e.g. "Dashboard") of `api`."""
    schemas = discovery(api)["schemas"]
    return {
        "$ref": f"#/definitions/{root}",
        "definitions": {name: _convert(schema) for name, schema in schemas.items()},
    }


def _convert(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"$ref": f"#/definitions/{schema['$ref']}"}
    kind = schema.get("type")
    if kind == "object":
        out: dict[str, Any] = {"type": "object"}
        if "properties" in schema:
            out["properties"] = {k: _convert(v) for k, v in schema["properties"].items()}
        if "additionalProperties" in schema:
            out["additionalProperties"] = _convert(schema["additionalProperties"])
        elif "properties" in schema:
            out["additionalProperties"] = False
        return out
    if kind == "array":
        return {"type": "array", "items": _convert(schema.get("items", {}))}
    if kind == "string":
        out = {"type": "string"}
        if "enum" in schema:
            out["enum"] = schema["enum"]
        if schema.get("format") in ("int64", "uint64"):
            # proto3 JSON: 64-bit integers are strings, numbers are accepted too.
            out = {"type": ["string", "integer"]}
        return out
    if kind in ("integer", "number", "boolean"):
        return {"type": kind}
    return {}  # "any"
