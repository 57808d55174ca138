"""What one offline render is written as (tools/plan.py runs the program; this writes it):

  plan.json       {"stack", "project", "exampleValues", "resources", "outputs"}
  manifests.yaml  every Kubernetes object, one YAML document each
and the `pulumi preview`-like tree `make plan` prints.

Byte-stable: one config rendered twice gives the same bytes (resources and objects in URN
order, every mapping's keys sorted), and the same tree. The program registers independent
resources concurrently, so the order they arrive in differs from run to run; nothing written
here depends on it. Secret values appear only as "[secret]"; a dynamic resource's pickled
provider as a placeholder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools import mockrun

DYNAMIC_PROVIDER_KEY = "__provider"


@dataclass
class StackInputs:
    """The config the CLI would pass for a stack (fully qualified keys, values as strings), the
    keys set as secrets, and the keys the offline plan filled with example values."""

    config: dict[str, str]
    secret_keys: list[str]
    example_keys: list[str] = field(default_factory=list)


def by_urn(resources: list[mockrun.Registered]) -> list[mockrun.Registered]:
    """`resources` in URN order. The program registers independent resources concurrently (the
    mock monitor is called from a thread pool), so registration order differs between two runs
    of one config; every artifact lists them in this order instead."""
    return sorted(resources, key=lambda r: r.urn)


def plan_document(
    stack: str, project: str, inputs: StackInputs, recording: mockrun.Recording
) -> dict[str, Any]:
    """plan.json's document: {"stack", "project", "exampleValues", "resources", "outputs"}."""
    return {
        "stack": stack,
        "project": project,
        "exampleValues": example_values(inputs, recording),
        "resources": [
            {
                "urn": r.urn,
                "type": r.type,
                "name": r.name,
                "parent": parent_urn(r.parent),
                # False for component resources: the engine creates and deletes nothing for them.
                "custom": r.custom,
                "inputs": _plan_inputs(r),
                "options": r.options.as_plan(),
                # What the engine orders `up` and `destroy` by, besides the parent: explicit
                # depends_on, and the resources each input's value comes from.
                "dependsOn": sorted(r.depends_on),
                "inputsFrom": {k: sorted(v) for k, v in sorted(r.input_dependencies.items())},
            }
            for r in by_urn(recording.resources)
        ],
        "outputs": recording.plain_outputs(),
    }


def example_values(inputs: StackInputs, recording: mockrun.Recording) -> dict[str, Any]:
    """Config the stack file leaves unset, and what the mocks answered the program's invokes
    (`invoke:<token>`): everything the plan rests on that a real project would say otherwise."""
    values: dict[str, Any] = {
        k: "[secret]" if k in inputs.secret_keys else inputs.config[k] for k in inputs.example_keys
    }
    values.update({f"invoke:{token}": answer for token, answer in recording.invokes.items()})
    return dict(sorted(values.items()))


def parent_urn(urn: str | None) -> str | None:
    """A resource's parent as plan.json and the tree show it: None for the stack itself."""
    return None if urn is None or urn.split("::")[-2].endswith("pulumi:pulumi:Stack") else urn


def _plan_inputs(resource: mockrun.Registered) -> dict[str, Any]:
    inputs = resource.plain_inputs
    if DYNAMIC_PROVIDER_KEY in inputs:
        # The pickled provider is code, not a setting; show what it is instead of its bytes.
        inputs[DYNAMIC_PROVIDER_KEY] = "[pickled dynamic provider]"
    return inputs


# libyaml's emitter (PyYAML's C binding, in every PyYAML wheel) when present: the same documents
# in a tenth of the time of the pure-Python one (a4's 33 objects: 0.07 s -> 0.006 s CPU). The two
# fold long strings at different points, so the text of manifests.yaml is stable for one PyYAML
# build, not between builds: it loads to the same objects, and `make diff` compares those,
# re-dumped one by one (tools/plan_report.py `_objects`).
_MANIFEST_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def kubernetes_objects(recording: mockrun.Recording) -> list[dict[str, Any]]:
    """Every Kubernetes object the program creates, redacted, in its resource's URN order."""
    return [
        mockrun.k8s_object(r) for r in by_urn(recording.resources)
        if mockrun.is_kubernetes_object(r.type)
    ]


def manifests_text(objects: list[dict[str, Any]]) -> str:
    """manifests.yaml: each object one YAML document, keys sorted (as `kubectl get -o yaml`)."""
    return yaml.dump_all(objects, Dumper=_MANIFEST_DUMPER, sort_keys=True)


def plan_json(document: dict[str, Any]) -> str:
    """plan.json's text: keys sorted, so that it does not depend on the order anything was set."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def write_artifacts(
    directory: Path, document: dict[str, Any], recording: mockrun.Recording
) -> list[dict[str, Any]]:
    """plan.json (`document`) and manifests.yaml of one render into `directory`; the
    Kubernetes objects."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plan.json").write_text(plan_json(document))
    objects = kubernetes_objects(recording)
    (directory / "manifests.yaml").write_text(manifests_text(objects))
    return objects


def tree_lines(recording: mockrun.Recording) -> list[str]:
    """`pulumi preview`-like lines: type and name, indented by parent, siblings in URN order."""
    children: dict[str | None, list[mockrun.Registered]] = {}
    for r in by_urn(recording.resources):
        children.setdefault(parent_urn(r.parent), []).append(r)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for r in children.get(parent, []):
            lines.append(f"{'    ' * depth}+ {r.type:<55} {r.name}")
            walk(r.urn, depth + 1)

    walk(None, 1)
    return lines
