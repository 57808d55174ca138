"""Hydra overrides as verl's `main_ppo` will read them, and the keys no override may touch.

The program sets where a run checkpoints and how it resumes (`trainer.default_local_dir`,
`trainer.resume_mode`, `trainer.resume_from_path`); `verl-gke:job.extraOverrides` passes any
other key through. Hydra offers many ways to reach a key besides naming it: a whole section as a
value (`trainer={default_local_dir: /tmp}` merges into `trainer`), the `+` / `++` / `~` prefixes
(add, force-add, delete), deleting a parent (`~trainer`), and interpolations (`${...}`) that
resolve to something else at run time. Rather than guess at the grammar, each extra override is
parsed with Hydra's own parser and applied with Hydra's own merge, on a config that holds what
the program sets, and refused if a protected key reads differently afterwards, or if the override
names a protected key or one of its parents at all.

hydra-core is imported only when a run has extra overrides (the import costs about 0.1 s).
"""

from __future__ import annotations

from typing import Any, Mapping

from components.messages import quoted
from components.forms import pulumi_forms

# Keys the program owns. resume_from_path only matters with resume_mode=resume_path, which only
# the program chooses (verl-gke:job.resumeFrom), so it is protected with the other two.
PROTECTED_KEYS = ("trainer.default_local_dir", "trainer.resume_mode", "trainer.resume_from_path")

# verl's own defaults for the trainer keys (verl/trainer/config/ppo_trainer.yaml), the base the
# program's overrides are applied to, as main_ppo's composed config would have them.
_VERL_TRAINER_DEFAULTS = {
    "project_name": "verl_examples",
    "experiment_name": "gsm8k",
    "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
    "resume_mode": "auto",
    "resume_from_path": None,
}


class NestedOverrideError(ValueError):
    """A nested extraOverrides map that cannot be flattened into one override a key."""


def flattened(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Nested maps as dotted keys: `{a: {b: {c: 4}}}` -> `{"a.b.c": 4}`.

    `pulumi config set --path 'verl-gke:job.extraOverrides.a.b.c' 4` stores a nested map (the
    CLI splits the path at every dot), which is what Hydra's dotted key means, so it is
    flattened. A list, or a prefixed key (`+`, `~`) inside a map, has no one override it means:
    refused with the command that stores the override as one dotted key; every such entry in
    one message.
    """
    flat, problems = flattenable(values, where)
    if problems:
        raise NestedOverrideError("; ".join(problems))
    return flat


def flattenable(values: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """The entries of `values` that flatten, dotted, and why each other one does not: what the
    config's checks go on with when some entries are refused (components/schema/config.py), so
    that the others' problems come in the same round."""
    flat: dict[str, Any] = {}
    problems: list[str] = []
    _flatten(values, where, "", flat, problems)
    return flat, problems


def _flatten(values: Mapping[str, Any], where: str, prefix: str, flat: dict[str, Any],
             problems: list[str]) -> None:
    for key, value in values.items():
        full = f"{prefix}{key}"
        if prefix and str(key)[:1] in "+~":
            problems.append(_retype(where, full, value, f"the prefix {key[0]!r} inside"))
        elif isinstance(value, Mapping):
            if not value:
                problems.append(_retype(where, full, "{}", "an empty map"))
            _flatten(value, where, f"{full}.", flat, problems)
        elif isinstance(value, list):
            text = "[" + ",".join(str(item) for item in value) + "]"
            problems.append(_retype(where, full, text, "a list"))
        else:
            flat[full] = value


def _retype(where: str, key: str, value: Any, what: str) -> str:
    return (
        f"{where}[{quoted(key)}] holds {what}, which is no single Hydra override: store it as "
        f"one dotted key with its value in Hydra's syntax, e.g. `pulumi config set --path "
        f"'{where}[\"{key}\"]' '{value}'`"
    )


def override_text(key: str, value: Any) -> str:
    """The override as written on the command line: `key=value`, or `~key` for a bare delete."""
    if key.startswith("~") and value == "":
        return key  # `~key=` would ask Hydra to delete only if the value is the empty string
    text = repr(value) if isinstance(value, float) else str(value)
    return f"{key}={text}"


def touches(key: str, protected: str) -> bool:
    """Whether writing or deleting `key` can change `protected`: the key, a parent or a child."""
    return key == protected or protected.startswith(key + ".") or key.startswith(protected + ".")


def override_problems(
    extra: Mapping[str, Any], program: Mapping[str, str], where: str
) -> list[str]:
    """Every extra override Hydra would refuse, or that would change a key the program sets.

    `program` holds the program's own overrides, in command-line order (the extras follow them);
    `where` names the config key in messages, e.g. `verl-gke:job.extraOverrides`.
    """
    if not extra:
        return []
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    base = _composed(parser, program)
    problems = []
    for key, value in extra.items():
        line = override_text(key, value)
        label = f"{where}[{quoted(key)}]"
        try:
            override = parser.parse_override(line)
        except HydraException as error:
            first = str(error).strip().splitlines()[0]
            problems.append(
                f"{label} = {quoted(value)} is not an override Hydra accepts ({first}): write "
                "it as `section.key: value`, e.g. actor_rollout_ref.actor.entropy_coeff: 0"
            )
            continue
        problem = _protected_problem(override, base, label, value)
        if problem:
            problems.append(problem)
    return problems


def _protected_problem(override: Any, base: Any, label: str, value: Any) -> str | None:
    changed = _changed_by(override, base)
    named = [key for key in PROTECTED_KEYS if touches(override.key_or_group, key)]
    if changed:
        what = f"would change {', '.join(changed)}"
    elif named:
        what = f"targets {', '.join(named)} (itself or through its section)"
    else:
        return None
    return (
        f"{label} = {quoted(value)} {what}, which the program sets so "
        "that each run checkpoints to its own directory and resumes from it: remove it (set "
        f"{pulumi_forms.key('job.runName')} for a readable name, or "
        f"{pulumi_forms.key('job.resumeFrom')} to continue from "
        "another run's checkpoint)"
    )


def _composed(parser: Any, program: Mapping[str, str]) -> Any:
    """verl's trainer defaults with the program's overrides applied, as main_ppo composes them."""
    from omegaconf import OmegaConf

    config = OmegaConf.create({"trainer": dict(_VERL_TRAINER_DEFAULTS)})
    overrides = parser.parse_overrides([f"{key}={value}" for key, value in program.items()])
    _apply(overrides, config)
    return config


def _changed_by(override: Any, base: Any) -> list[str]:
    """The protected keys that read differently after Hydra applies `override` on `base`."""
    from omegaconf import OmegaConf

    before = {key: _read(base, key) for key in PROTECTED_KEYS}
    config = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
    try:
        _apply([override], config)
    except Exception:  # noqa: BLE001 - Hydra would refuse it on verl's config too, or not: the
        # composition here lacks verl's other keys, so only the protected keys are judged.
        return []
    return [key for key in PROTECTED_KEYS if _read(config, key) != before[key]]


def _apply(overrides: list, config: Any) -> None:
    # Hydra's own merge of command-line overrides into the composed config
    # (hydra/_internal/config_loader_impl.py ConfigLoaderImpl._apply_overrides_to_config, the
    # call _load_configuration makes after composing the defaults list). Struct mode is off:
    # the real config has keys this small one lacks, and adding them must not fail here.
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from omegaconf import OmegaConf

    OmegaConf.set_struct(config, False)
    ConfigLoaderImpl._apply_overrides_to_config(overrides, config)


def _read(config: Any, key: str) -> Any:
    """The key's value as verl would see it, interpolations resolved; a marker if it fails."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(config, key, throw_on_missing=True)
    except Exception as error:  # noqa: BLE001 - an unresolvable interpolation is a change too
        return f"<unresolvable: {type(error).__name__}>"
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
