"""Config the way Pulumi users write it: forms that are honoured, or refused with the command
that says it right, never silently ignored (components/schema/config.py `load` calls these).

- A YAML list where a list is natural: `job.logger: [console, wandb]` (or `pulumi config set
  --path 'verl-gke:job.logger[0]' console`) is verl's `trainer.logger=[console,wandb]`.
- A flat key that meant a nested one: `pulumi config set verl-gke:job.rolloutN 8` (no
  `--path`) stores one key literally named `job.rolloutN`; the fix is the `--path` command.
- The Google provider's `gcp:region` / `gcp:zone`: the program places every resource by its own
  `verl-gke:region` / `zone` and passes them explicitly, so a provider default that disagrees
  would be ignored; it is refused instead.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # only a type here: tools/plan.py reads PROVIDER_TWINS without pydantic
    from pydantic import BaseModel

NAMESPACE = "verl-gke"

# Fields of the object keys whose model takes a string where users write a list: the string
# form the model takes is Hydra's list syntax, `[a,b]` (verl's `trainer.logger` is a list).
LIST_FIELDS: dict[str, tuple[str, ...]] = {"job": ("logger",)}

# The Google provider's keys that have a twin among this program's keys.
PROVIDER_TWINS = {"gcp:region": "region", "gcp:zone": "zone"}


def normalise_lists(key: str, value: Any) -> Any:
    """`value` of object key `key` with each list of LIST_FIELDS joined into Hydra's `[a,b]`."""
    if not isinstance(value, dict):
        return value
    fields = [f for f in LIST_FIELDS.get(key, ()) if isinstance(value.get(f), list)]
    if not fields:
        return value
    joined = {f: value[f] for f in fields}
    for field in fields:
        items = value[field]
        if all(isinstance(item, str) for item in items):
            joined[field] = "[" + ",".join(item.strip() for item in items) + "]"
    return {**value, **joined}


def flat_key_problem(key: str, value: Any, objects: Mapping[str, type[BaseModel] | None]) -> str | None:
    """The fix for `verl-gke:<object>.<field>` set as one flat key, or None if `key` is not one.

    `objects` maps each object key to its model (None: any field name, as for `labels`).
    """
    head, dot, rest = key.partition(".")
    if not dot or head not in objects:
        return None
    field = re.split(r"[.\[]", rest, maxsplit=1)[0]
    model = objects[head]
    known = sorted(
        (info.alias or name) for name, info in model.model_fields.items()
    ) if model is not None else None
    unknown = ""
    if known is not None and field not in known:
        close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
        unknown = (
            f" ({head} has no field {field!r}"
            + (f"; did you mean {close[0]!r}?" if close else f"; its fields: {', '.join(known)}")
            + ")"
        )
        if close:
            rest = close[0] + rest[len(field):]
    flat, nested = f"{NAMESPACE}:{key}", f"{NAMESPACE}:{head}.{rest}"
    shown = value if isinstance(value, str) and value and " " not in value else repr(value)
    return (
        f"{flat} is one flat key whose name contains a dot, not the field {rest!r} of "
        f"{NAMESPACE}:{head}{unknown}: set the nested field with `pulumi config rm {flat}` and "
        f"`pulumi config set --path '{nested}' {shown}` (in the stack file: `{rest}: ...` "
        f"under `{NAMESPACE}:{head}:`)"
    )


def provider_twin_problems(raw: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """gcp:region / gcp:zone that disagree with the program's own keys (`values`, camelCase)."""
    problems = []
    for provider_key, own in PROVIDER_TWINS.items():
        theirs = raw.get(provider_key)
        if theirs in (None, "") or values.get(own) in (None, theirs):
            continue
        problems.append(
            f"{provider_key} = {theirs!r} but {NAMESPACE}:{own} = {values[own]!r}: this program "
            f"places every resource by {NAMESPACE}:{own} and passes it explicitly, so "
            f"{provider_key} would be ignored; remove it (`pulumi config rm {provider_key}`) or "
            f"set it to {values[own]!r}"
        )
    return problems
