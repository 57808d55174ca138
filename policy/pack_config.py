"""The pack's config: each policy's enforcement level and settings, in the CLI's own format.

policy/config.json is the pack's default, in the format `pulumi preview --policy-pack-config`
takes: `{"<policy>": "advisory"}` or `{"<policy>": {"enforcementLevel": "...", <settings>}}`
(pulumi-policy's PolicyPack `initial_config`, policy.py `_normalize_config`). An organisation
adopting the pack changes a rule's level there, or per stack with `--policy-pack-config`, or in
its Pulumi Cloud policy group; `make policy` reads the same file and the same overrides, so the
offline check enforces what the CLI would. Levels: mandatory (blocks the update), advisory
(printed), disabled (not run); remediate is refused (no rule of this pack remediates).

Standard library only: the pack's own venv has nothing else of this repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

DEFAULT_CONFIG = Path(__file__).resolve().parent / "config.json"
LEVELS = ("mandatory", "advisory", "disabled")
LEVEL_KEY = "enforcementLevel"


class PackConfigError(ValueError):
    """A pack config the CLI would refuse or misread; names the file, the policy and the fix."""


@dataclass(frozen=True)
class PolicySettings:
    level: str
    properties: dict[str, Any] = field(default_factory=dict)


def read(path: Path = DEFAULT_CONFIG) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise PackConfigError(f"policy config {str(path)!r} does not exist") from None
    except json.JSONDecodeError as error:
        raise PackConfigError(f"policy config {path.name} is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise PackConfigError(f"policy config {path.name} must be an object of policy names")
    return document


def resolve(
    layers: Iterable[Mapping[str, Any]], policy_names: Iterable[str], where: str = "policy config"
) -> dict[str, PolicySettings]:
    """Each policy's level and settings: the layers applied in order (the pack's file, then an
    override), a level given alone or as `enforcementLevel`, settings merged key by key. "all"
    sets the level of every policy not named, as the CLI reads it."""
    names = list(policy_names)
    levels: dict[str, str] = {}
    properties: dict[str, dict[str, Any]] = {name: {} for name in names}
    for layer in layers:
        for name, value in layer.items():
            if name != "all" and name not in properties:
                raise PackConfigError(
                    f"{where}: {name!r} is not a policy of this pack; its policies: {', '.join(names)}"
                )
            level, settings = _split(name, value, where)
            targets = [n for n in names if n not in layer] if name == "all" else [name]
            for target in targets:
                if level is not None:
                    levels[target] = level
                if name != "all":
                    properties[target].update(settings)
    return {name: PolicySettings(levels.get(name, "mandatory"), properties[name]) for name in names}


def _split(name: str, value: Any, where: str) -> tuple[str | None, dict[str, Any]]:
    if isinstance(value, str):
        level, settings = value, {}
    elif isinstance(value, dict):
        settings = {k: v for k, v in value.items() if k != LEVEL_KEY}
        level = value.get(LEVEL_KEY)
    else:
        raise PackConfigError(f"{where}: {name} = {value!r} must be a level or an object")
    if level is not None and level not in LEVELS:
        raise PackConfigError(
            f"{where}: {name}.{LEVEL_KEY} = {level!r} is not a level this pack takes: use "
            f"{', '.join(LEVELS)}"
        )
    return level, settings
