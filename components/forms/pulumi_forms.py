"""Config the way Pulumi users write it: forms that are honoured, or refused with the command
that says it right, never silently ignored (components/schema/config.py `load` calls these).

- A YAML list where a list is natural: `job.logger: [console, wandb]` (or `pulumi config set
  --path 'verl-gke:job.logger[0]' console`) is verl's `trainer.logger=[console,wandb]`.
- A flat key that meant a nested one: `pulumi config set verl-gke:job.rolloutN 8` (no
  `--path`) stores one key literally named `job.rolloutN`; the fix is the `--path` command.
- The Google provider's `gcp:region` / `gcp:zone`: the program places every resource by its own
  `verl-gke:region` / `zone` and passes them explicitly, so a provider default that disagrees
  would be ignored; it is refused instead.
- The project's own name: every key of this program is `<project>:<key>`, where <project> is the
  `name:` of Pulumi.yaml (verl-gke unless `pulumi new` renamed it). The CLI qualifies a bare key
  with the project's name ("In cases where a simple name without a colon is used, Pulumi
  automatically uses the current project name from Pulumi.yaml as the namespace":
  https://www.pulumi.com/docs/iac/concepts/config/, "Configuration Keys"): so do the bare keys
  of Pulumi.yaml's `config:` and `template.config:` blocks (see the comment there), which
  therefore follow a renamed project unchanged. `namespace()` is that name; `Key` shows a key
  under it.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import re
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import pulumi
from pulumi.runtime import settings as pulumi_settings

if TYPE_CHECKING:  # only a type here: tools/plan.py reads PROVIDER_TWINS without pydantic
    from pydantic import BaseModel

# The template's project name: the namespace outside a Pulumi program (tools, unit tests) when
# no other is given. Resource type tokens (`verl-gke:index:...`) and labels keep this name
# whatever the project is called: they are not config keys, and renaming a type replaces the
# deployed resource.
TEMPLATE_PROJECT = "verl-gke"

# The project whose keys are being read (components/schema/config.py `load` sets it while it
# validates), so that every message of that pass names the keys as the user's project spells them.
_LOADING: contextvars.ContextVar[str | None] = contextvars.ContextVar("config_namespace", default=None)


def namespace() -> str:
    """The namespace of this program's config keys: the project being loaded, else the running
    Pulumi program's project (`pulumi.get_project()`, the `name:` of Pulumi.yaml), else (no
    program: a tool or a unit test) the template's name."""
    loading = _LOADING.get()
    if loading:
        return loading
    if pulumi_settings.get_monitor() is not None:  # inside a program (the CLI's, or mocks)
        return pulumi.get_project()
    return TEMPLATE_PROJECT


@contextlib.contextmanager
def keys_of(project: str) -> Iterator[None]:
    """Within this block, every key is named under `project`."""
    token = _LOADING.set(project)
    try:
        yield
    finally:
        _LOADING.reset(token)


def key(name: str) -> str:
    """The fully qualified key `name` (`job.totalEpochs`) as the user's project spells it."""
    return f"{namespace()}:{name}"


class Key:
    """A config key of this program, `<project>:<name>` when shown (str() or an f-string): for
    the modules that name a key once at import time, before the project is known."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return key(self.name)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"Key({self.name!r})"

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
    ns = namespace()
    flat, nested = f"{ns}:{key}", f"{ns}:{head}.{rest}"
    shown = value if isinstance(value, str) and value and " " not in value else repr(value)
    return (
        f"{flat} is one flat key whose name contains a dot, not the field {rest!r} of "
        f"{ns}:{head}{unknown}: set the nested field with `pulumi config rm {flat}` and "
        f"`pulumi config set --path '{nested}' {shown}` (in the stack file: `{rest}: ...` "
        f"under `{ns}:{head}:`)"
    )


def provider_twin_problems(raw: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """gcp:region / gcp:zone that disagree with the program's own keys (`values`, camelCase)."""
    problems, ns = [], namespace()
    for provider_key, own in PROVIDER_TWINS.items():
        theirs = raw.get(provider_key)
        if theirs in (None, "") or values.get(own) in (None, theirs):
            continue
        problems.append(
            f"{provider_key} = {theirs!r} but {ns}:{own} = {values[own]!r}: this program "
            f"places every resource by {ns}:{own} and passes it explicitly, so "
            f"{provider_key} would be ignored; remove it (`pulumi config rm {provider_key}`) or "
            f"set it to {values[own]!r}"
        )
    return problems
