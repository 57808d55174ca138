"""Validate rendered Kubernetes objects against the schemas the API server would apply.

Core kinds go through kubernetes-validate in strict mode (unknown fields are errors). Custom
resources go through the real upstream CRD schemas kept in tests/schemas/crds/ (its README
names each file's repository and commit), once more with `additionalProperties: false` added to
every object schema that lists properties, because the API server prunes unknown fields silently
and a typo would otherwise vanish without a trace.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

# The GKE minor the program creates clusters at today (components/preflight/gke_version.py asks
# GKE; the mock runtime answers 1.34, tools/mockrun.py). Objects are validated against that
# minor's published schemas.
KUBERNETES_VERSION = "1.34.0"

# The CRDs, in the project (tests/schemas/crds/README.md says where each comes from).
CRD_DIR = Path(__file__).resolve().parent / "schemas" / "crds"
CRD_FILES = {
    ("ray.io", "RayCluster"): "ray.io_rayclusters.yaml",
    ("resource.nvidia.com", "ComputeDomain"): "resource.nvidia.com_computedomains.yaml",
    ("networking.gke.io", "GKENetworkParamSet"): "networking.gke.io_gkenetworkparamsets.yaml",
    ("networking.gke.io", "Network"): "networking.gke.io_networks.yaml",
    ("monitoring.googleapis.com", "PodMonitoring"): "monitoring.googleapis.com_podmonitorings.yaml",
}


def is_custom(obj: dict[str, Any]) -> bool:
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    return (group, obj["kind"]) in CRD_FILES


@functools.lru_cache(maxsize=None)
def _served_versions(path: Path) -> dict[str, Any]:
    """A CRD file's versions by name, read once (the open and closed schemas share it)."""
    # libyaml's loader where PyYAML has it: the RayCluster CRD (930 kB) takes ~5 s in the
    # pure-Python loader and under 1 s in the C one, with the same result.
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {v["name"]: v for v in crd["spec"]["versions"]}


@functools.lru_cache(maxsize=None)
def crd_schema(group: str, kind: str, version: str, closed: bool) -> dict[str, Any]:
    served = _served_versions(CRD_DIR / CRD_FILES[(group, kind)])
    if version not in served:
        raise AssertionError(f"{kind} has no version {version}; CRD serves {sorted(served)}")
    schema = copy.deepcopy(served[version]["schema"]["openAPIV3Schema"])
    return close_schema(schema) if closed else schema


def close_schema(schema: Any) -> Any:
    """Forbid unknown fields in every object schema that declares its properties."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in schema
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            close_schema(value)
    elif isinstance(schema, list):
        for value in schema:
            close_schema(value)
    return schema


def _without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    # metadata is validated by the API server's ObjectMeta rules, not by the CRD schema, which
    # declares it as a bare object; check everything else strictly.
    return {k: v for k, v in obj.items() if k != "metadata"}


def validate_custom(obj: dict[str, Any]) -> None:
    group, version = obj["apiVersion"].split("/")
    for closed in (False, True):
        schema = crd_schema(group, obj["kind"], version, closed)
        jsonschema.Draft7Validator(schema).validate(_without_server_fields(obj))
    name = obj.get("metadata", {}).get("name", "")
    assert name, f"{obj['kind']} has no metadata.name"


def validate_core(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def validate(obj: dict[str, Any]) -> None:
    """Validate one object; raises with the object's kind and name in the message."""
    try:
        if is_custom(obj):
            validate_custom(obj)
        else:
            validate_core(obj)
    except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as error:
        name = obj.get("metadata", {}).get("name")
        raise AssertionError(f"{obj['kind']}/{name} is invalid: {error}") from error
