"""The offline plan: run the real program under Pulumi's mock runtime and write what it creates.

    python -m tools.plan --stack a4 [--mode autopilot] [--out build] [--config-file PATH]

Reads Pulumi.yaml and Pulumi.<stack>.yaml as the Pulumi CLI would (project defaults, then the
stack's values), fills site facts the stack file leaves unset with clearly fake example values,
runs __main__.py, and writes (tools/plan_artifacts.py, byte-stable):
  build/<stack>/plan.json       {"stack", "project", "exampleValues", "resources", "outputs"}
  build/<stack>/manifests.yaml  every Kubernetes object
Secret values appear only as "[secret]". A config error prints the problems and exits 2; a
problem that quotes one of the example values says so (the user did not type it).
`--config-file` reads another stack file in place of Pulumi.<stack>.yaml, as the CLI's flag does.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import runpy
import sys
from pathlib import Path
from typing import Any

import yaml

from components.facts.hardware import profile
from components.messages import quoted
from components.forms import pulumi_forms
from tools import cli, mockrun, plan_artifacts
# What a render is written as, re-exported: the plan's public face for the tools and tests.
from tools.plan_artifacts import (  # noqa: F401
    DYNAMIC_PROVIDER_KEY,
    StackInputs,
    by_urn,
    parent_urn,
    example_values,
    kubernetes_objects,
    manifests_text,
    plan_json,
    tree_lines,
)

ROOT = Path(__file__).resolve().parents[1]
# Where `Pulumi.<stack>.yaml` files are looked up: None for the project's directory (ROOT), as
# the CLI does; tests point it at a directory of their own stack files.
STACK_DIR: Path | None = None


def _stack_dir() -> Path:
    return STACK_DIR or ROOT

# Example site facts for keys a stack file leaves unset (plan mode only). Obviously fake. A bare
# key is the project's own (`<name of Pulumi.yaml>:region`), as the CLI reads one.
EXAMPLE_VALUES: dict[str, str] = {
    "gcp:project": "example-project",
    "region": "us-central1",
    "zone": "us-central1-b",
    "reservation": "example-reservation",
    # Fixed so that two renders of the same stack are identical.
    "maintenanceExclusionStart": "2026-12-01T00:00:00Z",
}
EXAMPLE_SECRETS: dict[str, str] = {
    "hfToken": "hf_EXAMPLE_NOT_A_REAL_TOKEN",
}




class StackFileError(cli.UsageError):
    """A project or stack file the Pulumi CLI could not read either; says which and why."""


def read_yaml_file(path: Path) -> dict[str, Any]:
    """A YAML mapping from `path`, or StackFileError naming the file and the problem."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise StackFileError(f"{path.name} does not exist") from None
    except UnicodeDecodeError as error:
        raise StackFileError(
            f"{path.name} is not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x}): "
            "save it as UTF-8"
        ) from None
    try:
        # libyaml's parser (PyYAML's C binding) when present: the same documents, a tenth the time.
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise StackFileError(f"{path.name} is not valid YAML{where}: {problem}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise StackFileError(
            f"{path.name} holds a YAML {type(document).__name__}, not a mapping of keys such as "
            "`config:`"
        )
    return document


def _config_section(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """The `config:` mapping of a stack file, its keys checked the way the CLI parses them."""
    section = document.get("config")
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise StackFileError(
            f"{path.name}: `config` must be a mapping of `<namespace>:<key>: value`, not a YAML "
            f"{type(section).__name__}"
        )
    for key, value in section.items():
        if not isinstance(key, str) or key.count(":") != 1 or key.startswith(":") or key.endswith(":"):
            raise StackFileError(
                f"{path.name}: config key {quoted(key)} is not of the form <namespace>:<key> "
                f"(e.g. {project_name()}:zone)"
            )
        if isinstance(value, dict) and "secure" in value and not isinstance(value["secure"], str):
            raise StackFileError(f"{path.name}: {key}.secure must be the ciphertext string")
    return section


def _project_document() -> dict[str, Any]:
    return _read_project(ROOT / "Pulumi.yaml")


@functools.lru_cache(maxsize=4)
def _read_project(path: Path) -> dict[str, Any]:
    """Pulumi.yaml, read once per run (every tool asks for it several times)."""
    document = read_yaml_file(path)
    if not isinstance(document.get("name"), str) or not isinstance(document.get("config") or {}, dict):
        raise StackFileError(f"{path.name} needs a `name` string and a `config` mapping")
    return document


def project_name() -> str:
    """The project's name (Pulumi.yaml's `name:`): the namespace of every key of the program
    (components/forms/pulumi_forms.py), verl-gke unless `pulumi new` renamed it."""
    return _project_document()["name"]


def _as_cli_string(value: Any) -> str:
    """The Pulumi CLI hands config to the program as strings; objects as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class MissingConfig(StackFileError):
    """Keys the Pulumi CLI would refuse to run without (declared, no default, not set)."""


def known_stacks() -> list[str]:
    """The stacks of this directory: one per `Pulumi.<stack>.yaml`."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in _stack_dir().glob("Pulumi.*.yaml"))


def stack_file(stack: str, config_file: Path | None = None) -> Path:
    """The stack file the CLI would read for `stack` (or `config_file`), or StackFileError."""
    if config_file is not None:
        if not config_file.is_file():
            raise StackFileError(
                f"--config-file {str(config_file)!r} does not exist: pass the path of a stack "
                "file such as Pulumi.a4.yaml"
            )
        return config_file
    path = _stack_dir() / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise StackFileError(
            f"STACK={stack!r} (--stack): no stack file {path.name} here; the stacks are "
            f"{', '.join(known_stacks())}: pass one of them (e.g. `make plan STACK=a4`), or "
            f"create this one with `pulumi stack init {stack}` and "
            f"`pulumi config set {project_name()}:target a4` (or a3u, a4x)"
        )
    return path


def stack_target(stack: str, config_file: Path | None = None) -> str:
    """The `<project>:target` of any stack's file (`Pulumi.<stack>.yaml`, or `config_file`), as
    the tools that model a stack without running the program need it; StackFileError for a
    stack file that does not exist or sets no known target, naming the file and the fix."""
    from components.facts.hardware import PROFILES

    path = stack_file(stack, config_file)
    key = f"{project_name()}:target"
    target = _config_section(path, read_yaml_file(path)).get(key)
    known = sorted(t.value for t in PROFILES)
    if target not in known:
        raise StackFileError(
            f"{path.name}: {key} is {quoted(target) if target is not None else 'not set'}: set it "
            f"with `pulumi config set {key} a4 --stack {stack}` (one of {', '.join(known)})"
        )
    return target


def _refuse_environments(path: Path, document: dict[str, Any]) -> None:
    """A stack file that imports Pulumi ESC environments holds only part of its config: the
    rest comes from Pulumi Cloud, which an offline plan cannot open. Refused, not half-read."""
    environments = document.get("environment")
    if not environments:
        return
    names = environments if isinstance(environments, list) else [environments]
    raise StackFileError(
        f"{path.name} imports the Pulumi ESC environment(s) "
        f"{', '.join(quoted(n) for n in names)} (`environment:`), which the offline plan cannot "
        "open (it has no Pulumi Cloud session), so any config they provide would be missing "
        "here: plan from a copy of the stack file without `environment:` that sets those keys "
        "(`--config-file <copy>`), or run `pulumi preview`, which resolves them"
    )


def stack_inputs(
    stack: str,
    mode: str | None = None,
    overrides: dict[str, str] | None = None,
    config_file: Path | None = None,
) -> StackInputs:
    """The config the CLI would pass for `stack`, with example values for unset site facts.

    Mirrors the CLI's merge: the stack file's values (or `config_file`'s), else the project's
    declared defaults; a declared key with neither is an error. `overrides` count as set in the
    stack file (as `pulumi config set` would write them). Plan mode fills site facts
    (EXAMPLE_VALUES) before that check, and never over a value that is set, nor where the user
    set the Google provider's own key for it (gcp:region, gcp:zone): the program reads its own
    keys, and the CLI would ask for them.
    """
    project = _project_document()
    path = stack_file(stack, config_file)
    document = read_yaml_file(path)
    _refuse_environments(path, document)
    ns = project["name"]
    declared = {
        _qualified(key, ns): spec for key, spec in (project.get("config") or {}).items()
    }
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in _config_section(path, document).items():
        if isinstance(value, dict) and "secure" in value:
            # Ciphertext cannot be read offline; stand in an example value, still secret.
            config[key] = EXAMPLE_SECRETS.get(key.removeprefix(f"{ns}:"), "EXAMPLE-SECRET")
            secret_keys.append(key)
        else:
            config[key] = _as_cli_string(value)
    if mode:
        config[f"{ns}:clusterMode"] = mode
    config.update(overrides or {})  # as `pulumi config set` would, before anything is derived
    inputs = StackInputs(config=config, secret_keys=secret_keys)
    # Autopilot brings its own capacity, spot and flex-start consume none: a reservation would
    # be an error there.
    no_reservation = config.get(f"{ns}:clusterMode") == "autopilot" or config.get(
        f"{ns}:provisioning", "reservation"
    ) != "reservation"
    twins = provider_twins(ns)
    for bare, value in {**EXAMPLE_VALUES, **EXAMPLE_SECRETS}.items():
        key = _qualified(bare, ns)
        if no_reservation and bare == "reservation":
            continue
        if key in twins and twins[key] in config:
            continue  # the user chose a place: an example one would contradict it
        if key not in config:
            config[key] = value
            inputs.example_keys.append(key)
            if bare in EXAMPLE_SECRETS:
                secret_keys.append(key)
    missing = []
    for key, spec in declared.items():
        if key in config:
            continue
        if isinstance(spec, dict) and "default" in spec:
            config[key] = _as_cli_string(spec["default"])
        else:
            missing.append(key)
    if missing:
        set_twins = [
            f"{twins[key]} is set, but this program reads {key}: "
            f"`pulumi config set {key} {config[twins[key]]}`"
            for key in sorted(missing) if twins.get(key) in config
        ]
        raise MissingConfig(
            f"Stack '{stack}' is missing configuration values: {', '.join(sorted(missing))}; "
            "set them with `pulumi config set <key> <value>`"
            + "".join(f"; {twin}" for twin in set_twins)
            + _template_keys_hint(path, ns, missing, config)
        )
    return inputs


def _template_keys_hint(path: Path, ns: str, missing: list[str], config: dict[str, str]) -> str:
    """Where a project renamed from the template (`pulumi new` with another name) meets a
    shipped stack file, whose keys are `verl-gke:...`: the command that renames them all."""
    template = pulumi_forms.TEMPLATE_PROJECT
    if ns == template or not any(f"{template}:{key.partition(':')[2]}" in config for key in missing):
        return ""
    return (
        f"; {path.name} is written for the project {template} (`{template}:target`), but this "
        f"project is {ns} (Pulumi.yaml's `name:`), which reads `{ns}:<key>`: rename its keys, "
        f"`sed -i.bak 's/{template}:/{ns}:/g' {path.name}` (the shipped "
        "Pulumi.a4.yaml, Pulumi.a3u.yaml and Pulumi.a4x.yaml are all written so)"
    )


def provider_twins(ns: str) -> dict[str, str]:
    """The program's keys (under project `ns`) that the Google provider has a twin of (the
    program refuses a twin that disagrees with its own key: components/forms/pulumi_forms.py)."""
    return {f"{ns}:{own}": theirs for theirs, own in pulumi_forms.PROVIDER_TWINS.items()}


def _qualified(key: str, project: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def example_invokes(config: dict[str, str]) -> dict[str, Any]:
    """What a project fit for the stack would answer its capacity invokes: a ready reservation
    of the target's machine type with room for the nodes, and enough preemptible GPU quota.

    None for config the program will refuse (an unknown target, a node count that is not a
    whole number): the program reports it, with the key and the fix, before any invoke.
    """
    ns = project_name()
    try:
        hw = profile(config[f"{ns}:target"])
        nodes = int(config.get(f"{ns}:gpuNodes") or 0) or hw.default_nodes
    except (KeyError, ValueError):
        return {}
    reservation = config.get(f"{ns}:reservation") or EXAMPLE_VALUES["reservation"]
    return {
        mockrun.GET_RESERVATION: {
            "name": reservation.split("/")[0],
            "status": "READY",
            "blockNames": [reservation.split("/")[-1]] if "/" in reservation else [],
            "specificReservations": [
                {"count": nodes, "inUseCount": 0,
                 "instanceProperties": [{"machineType": hw.machine_type}]}
            ],
        },
        mockrun.GET_RESERVATION_BLOCK: {"blockCount": nodes, "inUseCount": 0, "status": "READY"},
        mockrun.QUOTA_INFOS: {"quotaInfos": [{
            "quotaId": hw.preemptible_gpu_quota or "",
            "dimensionsInfos": [
                {"dimensions": {"region": config[f"{ns}:region"]},
                 "details": [{"value": str(nodes * hw.gpus_per_node)}]}
            ],
        }, {
            # The system pool's C2 vCPUs at its most (components/preflight/capacity.py).
            "quotaId": "C2-CPUS-per-project-region",
            "dimensionsInfos": [{"dimensions": {}, "details": [{"value": "96"}]}],
        }]},
    }


def run_program(
    stack: str,
    mode: str | None = None,
    overrides: dict[str, str] | None = None,
    invokes: dict[str, Any] | None = None,
    recording: mockrun.Recording | None = None,
    config_file: Path | None = None,
) -> tuple[StackInputs, mockrun.Recording]:
    """Run __main__.py under mocks with the stack's config, `overrides` (fully qualified keys)
    applied on top, and `invokes` answered instead of the example answers. Raises ConfigError
    on bad config, each problem that quotes an example value saying so."""
    from components.schema.config import ConfigError

    inputs = stack_inputs(stack, mode, overrides, config_file)
    try:
        recording = mockrun.run(
            lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__pulumi_main__"),
            project=project_name(),
            stack=stack,
            config=inputs.config,
            secret_keys=inputs.secret_keys,
            invokes={**example_invokes(inputs.config), **(invokes or {})},
            recording=recording,
        )
    except ConfigError as error:
        raise ConfigError([note_examples(p, inputs) for p in error.problems]) from None
    return inputs, recording


def note_examples(problem: str, inputs: StackInputs) -> str:
    """`problem`, with a note for each example value it quotes (or a name derived from one):
    the user never typed those, and the fix is to set the real one."""
    notes = [
        f"{key} = {inputs.config[key]!r} is the offline plan's example value, not yours: set "
        f"yours with `pulumi config set {key} <value>`"
        for key in inputs.example_keys
        if key not in inputs.secret_keys and inputs.config[key] in problem
    ]
    return problem + "".join(f" (note: {note})" for note in notes)
























def plan_document(stack: str, inputs: StackInputs, recording: mockrun.Recording) -> dict[str, Any]:
    """plan.json's document of one render of `stack` (tools/plan_artifacts.py)."""
    return plan_artifacts.plan_document(stack, project_name(), inputs, recording)


def write_artifacts(
    directory: Path, stack: str, inputs: StackInputs, recording: mockrun.Recording
) -> list[dict[str, Any]]:
    """plan.json and manifests.yaml of one render into `directory`; the Kubernetes objects."""
    return plan_artifacts.write_artifacts(
        directory, plan_document(stack, inputs, recording), recording)


def write_plan(
    stack: str, mode: str | None, out: Path, quiet: bool, config_file: Path | None = None
) -> int:
    from components.schema.config import ConfigError

    # This process ends when the plan is written, and nothing alive now (the interpreter,
    # pulumi's core, these tools) is ever garbage: frozen, the collector's full passes skip it.
    # Measured on all five stack/modes (gc.callbacks, docs/ci.md): the full passes while the
    # SDKs import cost what they cost the floor (0.5-0.67 s), and the one more full pass the
    # registrations used to trigger over the ~400k objects of the imported SDKs (0.23-0.3 s)
    # no longer falls within the run. Not in mockrun: a test session would keep what it froze.
    gc.freeze()
    try:
        inputs, recording = run_program(stack, mode, config_file=config_file)
    except StackFileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ConfigError as error:
        print(f"pulumi:pulumi:Stack {project_name()}-{stack}: config error", file=sys.stderr)
        print(str(error), file=sys.stderr)
        return 2
    target = out / (stack if not mode else f"{stack}-{mode}")
    objects = write_artifacts(target, stack, inputs, recording)
    if not quiet:
        print(f"Previewing update ({stack}, offline, Pulumi mock runtime):\n")
        print(f"    + pulumi:pulumi:Stack{'':<36} {project_name()}-{stack}")
        print("\n".join(tree_lines(recording)))
        examples = example_values(inputs, recording)
        if examples:
            print("\nExample values stand in for site facts and for what the project would answer:")
            for key, shown in examples.items():
                text = shown if isinstance(shown, str) else json.dumps(shown)
                print(f"    {key} = {text if len(text) <= 100 else text[:99] + '…'}")
    print(
        f"\n{stack}{'/' + mode if mode else ''}: {len(recording.resources) + 1} to create "
        f"({len(objects)} Kubernetes objects); wrote {target}/plan.json and manifests.yaml"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="a4, a3u or a4x")
    parser.add_argument("--mode", choices=["standard", "autopilot"], help="override clusterMode")
    parser.add_argument("--out", type=Path, default=ROOT / "build")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    parser.add_argument("--config-file", type=Path,
                        help="read this stack file instead of Pulumi.<stack>.yaml (as the CLI's flag)")
    parser.add_argument("--model-config", type=Path,
                        help="the run's model's config.json, or its directory (with "
                        "model.safetensors.index.json): check its shape offline")
    args = parser.parse_args(argv)
    if args.model_config:
        from components.preflight import model_shape

        model_shape.set_local_files(args.model_config)
    return write_plan(args.stack, args.mode, args.out, args.quiet, args.config_file)


if __name__ == "__main__":
    sys.exit(cli.run(main))
