"""The report of `make diff` (tools/plan_diff.py, two commits; tools/config_diff.py, two
configs of one stack): what changes between two renders of one stack, as Markdown for a
terminal, a job summary or a pull-request comment.

- resources added, removed, replaced and updated, with each changed input and why a change is
  a replacement: the resource's `replaceOnChanges`, or a field the provider itself replaces on
  (tools/force_new.py); `deleteBeforeReplace` says whether the old object goes first. Changes
  to inputs under `ignoreChanges` are left out, as the engine leaves them out. The program's
  own dynamic resources (GrpoRun, ClusterCheckRun, the guards) are judged by their providers'
  own `diff()`, given their pickled providers (the work tree's providers.json), as the engine's
  dynamic provider host does (pulumi/dynamic/__main__.py `Diff`: the new inputs' provider,
  `diff(id, olds, news)`, its `replaces` and `delete_before_replace`);
- changed Kubernetes manifests (manifests.yaml) as a unified diff;
- changed stack outputs.

Both diff tools stand on this module and on tools/render_plans.py; neither imports the other's
report or calls the other's `main`.
"""

from __future__ import annotations

import argparse
import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import yaml

from tools import force_new
from tools.render_plans import Rendered


SHOWN_VALUE_CHARS = 120

@dataclass
class Change:
    urn: str
    type: str
    name: str
    kind: str  # "add", "remove", "replace", "update", "engine" (options or dependencies only)
    fields: list[tuple[str, Any, Any, str | None]] = field(default_factory=list)  # path, old, new, why
    delete_first: bool = False
    retained: bool = False  # retainOnDelete: a replacement leaves the old object in the cloud
    by_provider: bool = False  # decided by the resource's own dynamic provider's diff()

@dataclass(frozen=True)
class ProviderDiff:
    """A dynamic provider's own answer: whether anything changes, which inputs replace, and
    whether the old object goes first."""

    changes: bool
    replaces: tuple[str, ...]
    delete_before_replace: bool

def provider_diff(
    pickled: str, resource_id: str, olds: Mapping[str, Any], news: Mapping[str, Any],
) -> ProviderDiff:
    """Unpickle a dynamic provider and call its `diff`, as the engine's dynamic provider host
    does (pulumi/dynamic/__main__.py get_provider: base64, then dill.loads; Diff)."""
    import base64

    import dill

    from tools.plan_artifacts import DYNAMIC_PROVIDER_KEY

    provider = dill.loads(base64.b64decode(pickled))
    strip = lambda props: {k: v for k, v in props.items() if k != DYNAMIC_PROVIDER_KEY}  # noqa: E731
    result = provider.diff(resource_id, strip(olds), strip(news))
    replaces = tuple(result.replaces or ())
    return ProviderDiff(
        # None is "unknown" to the engine (DIFF_UNKNOWN): then the inputs decide.
        changes=bool(result.changes) if result.changes is not None else olds != news,
        replaces=replaces,
        delete_before_replace=bool(result.delete_before_replace),
    )

def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs: `a.b[0].c`; an empty dict or list is a leaf of its own."""
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and value:
        for index, inner in enumerate(value):
            yield from flatten(inner, f"{prefix}[{index}]")
    else:
        yield prefix, value

def changed_paths(old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    before, after = dict(flatten(old)), dict(flatten(new))
    missing = object()
    return [
        (path, before.get(path), after.get(path))
        for path in sorted(set(before) | set(after))
        if before.get(path, missing) != after.get(path, missing)
    ]

def _ignored(path: str, ignore_changes: list[str]) -> bool:
    segments = force_new._segments(path)
    return any(segments[: len(i.split("."))] == i.split(".") for i in ignore_changes)

def _replace_reason(resource: Mapping[str, Any], path: str) -> str | None:
    options = resource.get("options") or {}
    top = force_new._segments(path)[0] if path else ""
    if "*" in options.get("replaceOnChanges", []) or top in options.get("replaceOnChanges", []):
        return f"replaceOnChanges: {top}"
    provider_field = force_new.replacing_field(resource["type"], path)
    return f"provider replaces on {provider_field}" if provider_field else None

# Components a provider implements (pulumi-kubernetes' YAML and Helm v4): no cloud object.
_REMOTE_COMPONENTS = ("kubernetes:yaml/v2:", "kubernetes:helm.sh/v4:", "kubernetes:kustomize/v2:")

def _custom(resource: Mapping[str, Any]) -> bool:
    """For a plan from before plan.json recorded `custom` (and a URN the other plan does not
    know), the type says it: a provider's module has a path (`gcp:container/cluster:Cluster`),
    a component's does not (`verl-gke:index:GkeCluster`)."""
    type_ = resource["type"]
    package, module, _ = type_.split(":", 2)
    return ("/" in module or package == "pulumi") and not type_.startswith(_REMOTE_COMPONENTS)

def _same_kubernetes_name(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether pulumi-kubernetes deletes the old object before it creates the new one when it
    replaces it: the object is named by the program (metadata.name, not generateName or Pulumi's
    autonaming) with the same name in the same namespace, which two objects cannot share
    (pulumi/pulumi-kubernetes@94977969 provider/pkg/provider/provider.go Diff,
    `deleteBeforeReplace`, its conditions 2-5). No resource option says so."""
    if not new["type"].startswith("kubernetes:"):
        return False
    old_meta = (old.get("inputs") or {}).get("metadata") or {}
    new_meta = (new.get("inputs") or {}).get("metadata") or {}
    return bool(new_meta.get("name")) and (old_meta.get("name"), old_meta.get("namespace")) == (
        new_meta.get("name"), new_meta.get("namespace"))

def _dependency_names(resource: Mapping[str, Any], by_urn: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """Names of the resources `resource` explicitly depends on (plans before plan.json recorded
    dependencies have none)."""
    return {by_urn[u]["name"] if u in by_urn else u.rsplit("::", 1)[-1] for u in resource.get("dependsOn") or []}

def resource_changes(
    base: list[Mapping[str, Any]], head: list[Mapping[str, Any]],
    providers: Mapping[str, str] | None = None,
) -> list[Change]:
    """Added, removed, replaced and updated resources between two plans, by URN. Components
    are left out: the engine creates, updates and deletes nothing for them. A dynamic
    resource whose pickled provider is in `providers` (URN -> `__provider`) is judged by that
    provider's `diff`; without one, by tools/force_new.py like any other."""
    providers = providers or {}
    recorded = {r["urn"]: bool(r["custom"]) for r in [*base, *head] if "custom" in r}
    olds = {r["urn"]: r for r in base if recorded.get(r["urn"], _custom(r))}
    news = {r["urn"]: r for r in head if recorded.get(r["urn"], _custom(r))}
    renamed = _renamed(olds, news)
    changes = [Change(u, r["type"], r["name"], "remove") for u, r in olds.items()
               if u not in news and u not in renamed.values()]
    for urn, new in news.items():
        old = olds.get(urn) or olds.get(renamed.get(urn, ""))
        if old is None:
            changes.append(Change(urn, new["type"], new["name"], "add"))
            continue
        ignore = (new.get("options") or {}).get("ignoreChanges", [])
        own = providers.get(urn)
        judged = _judged_by_provider(own, new, old) if own else None
        fields = [
            (path, before, after, _own_reason(judged, path) if judged else _replace_reason(new, path))
            for path, before, after in changed_paths(old.get("inputs"), new.get("inputs"))
            if not _ignored(path, ignore) and not (judged and path.startswith("__provider"))
        ]
        if judged and not judged.changes:
            fields = []
        # Options whole (a list option is one value); they change what the engine does on the
        # next replace or destroy, not the cloud object.
        old_options, new_options = old.get("options") or {}, new.get("options") or {}
        fields += [
            (f"options.{key}", old_options.get(key), new_options.get(key), None)
            for key in sorted(set(old_options) | set(new_options))
            # An option a plan does not record yet is its default (an empty list, false).
            if (old_options.get(key) or None) != (new_options.get(key) or None) and key != "provider"
        ]
        # What the resource waits for (creation) and goes before (destroy): engine-only too.
        old_deps, new_deps = _dependency_names(old, olds), _dependency_names(new, news)
        if old_deps != new_deps:
            fields.append(("dependsOn (removed → added)", sorted(old_deps - new_deps), sorted(new_deps - old_deps), None))
        if fields:
            replace = any(why for *_, why in fields)
            engine_only = all(path.startswith(("dependsOn", "options.")) for path, *_ in fields)
            kind = "replace" if replace else "engine" if engine_only else "update"
            if judged and judged.replaces and not replace:
                # A replacement the provider decides on outputs alone (none of the inputs shown).
                replace, kind = True, "replace"
            changes.append(Change(
                urn, new["type"], new["name"], kind, fields,
                delete_first=bool((new.get("options") or {}).get("deleteBeforeReplace"))
                or bool(judged and judged.delete_before_replace) or _same_kubernetes_name(old, new),
                retained=bool((new.get("options") or {}).get("retainOnDelete")),
                by_provider=judged is not None,
            ))
    order = {"replace": 0, "remove": 1, "add": 2, "update": 3, "engine": 4}
    return sorted(changes, key=lambda c: (order[c.kind], c.type, c.name))

def _renamed(olds: Mapping[str, Any], news: Mapping[str, Any]) -> dict[str, str]:
    """New URN -> the old URN it takes over through an alias by name (`options.aliases`, where
    the plan records them: [{"name": ...}]), as the engine does: same type and parent, the old
    name (pulumi/pulumi source_eval.go, alias specs with the default parent)."""
    found = {}
    for urn, new in news.items():
        if urn in olds:
            continue
        for alias in (new.get("options") or {}).get("aliases") or []:
            name = alias.get("name") if isinstance(alias, Mapping) else None
            candidate = f"{urn.rsplit('::', 1)[0]}::{name}" if name else None
            if candidate in olds and candidate not in news:
                found[urn] = candidate
    return found

def _judged_by_provider(pickled: str, new: Mapping[str, Any], old: Mapping[str, Any]) -> ProviderDiff:
    """The provider's diff of the base plan's inputs (the last deployment's state, as far as an
    offline plan knows it) against the head's."""
    return provider_diff(pickled, f"{new['name']}-id", old.get("inputs") or {}, new.get("inputs") or {})

def _own_reason(judged: ProviderDiff, path: str) -> str | None:
    top = force_new._segments(path)[0] if path else ""
    return f"its provider's diff() replaces on {top}" if top in judged.replaces else None

def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 1] + "…"

def _shown_change(before: Any, after: Any) -> str:
    """`old → new`; for two long strings (a command line), only the words that differ."""
    if isinstance(before, str) and isinstance(after, str) and max(len(before), len(after)) > SHOWN_VALUE_CHARS:
        old_words, new_words = before.split(), after.split()
        matcher = difflib.SequenceMatcher(a=old_words, b=new_words, autojunk=False)
        parts = [
            f"{' '.join(old_words[i1:i2]) or '∅'} → {' '.join(new_words[j1:j2]) or '∅'}"
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
        ]
        return "words changed: " + "; ".join(f"`{p}`" for p in parts)
    return f"{_shown(before)} → {_shown(after)}"

def _change_lines(change: Change) -> list[str]:
    label = {"add": "+ create", "remove": "- delete", "replace": "+- replace", "update": "~ update",
             "engine": "~ engine only"}[change.kind]
    how = ""
    if change.kind == "replace":
        how = " (delete first, then create)" if change.delete_first else " (create first, then delete)"
        if change.retained:
            how = " (create the new one; the old one stays in the cloud: retainOnDelete)"
    lines = [f"- **{label}** `{change.type}` `{change.name}`{how}"]
    if change.kind == "engine":
        lines[0] += " (no cloud change: options or dependencies, which order replacements and destroy)"
    if change.kind == "update" and not change.by_provider and not force_new.known(change.type):
        lines[0] += " (provider not in tools/force_new.py: could also be a replacement)"
    for path, before, after, why in change.fields:
        reason = f" — **{why}**" if why else ""
        lines.append(f"  - `{path}`: {_shown_change(before, after)}{reason}")
    return lines

def _objects(manifests: str) -> dict[str, str]:
    """Each Kubernetes object of a manifests.yaml as YAML, keyed `kind namespace/name`.

    Keyed, not compared as one file, and each re-dumped with its keys sorted: a base from
    before renders were stable (tools/plan.py) lists objects in registration order, which
    differed between two renders of one program, with keys in the order they were set.
    """
    found: dict[str, str] = {}
    for obj in yaml.safe_load_all(manifests):
        if obj:
            meta = obj.get("metadata") or {}
            key = f"{obj.get('apiVersion')} {obj.get('kind')} {meta.get('namespace', '-')}/{meta.get('name')}"
            found[key] = yaml.safe_dump(obj, sort_keys=True)
    return found

def manifest_diff(base: str, head: str, stack: str) -> list[str]:
    """A unified diff per added, removed or changed object, in a stable order."""
    olds, news = _objects(base), _objects(head)
    lines: list[str] = []
    for key in sorted(set(olds) | set(news)):
        if olds.get(key) != news.get(key):
            lines += difflib.unified_diff(
                (olds.get(key) or "").splitlines(), (news.get(key) or "").splitlines(),
                fromfile=f"base/{stack}: {key}" if key in olds else "/dev/null",
                tofile=f"head/{stack}: {key}" if key in news else "/dev/null", lineterm="",
            )
    return lines

def stack_report(stack: str, base: Rendered, head: Rendered) -> tuple[list[str], bool]:
    """Markdown lines for one stack, and whether anything changed."""
    lines = [f"### `{stack}`", ""]
    if head.plan is None:
        return lines + [f"The work tree's plan failed to render:\n\n```\n{head.error}\n```", ""], True
    if base.plan is None:
        lines += [f"_The base has no plan for this stack ({(base.error or '').splitlines()[-1:]}); "
                  "everything shows as added._", ""]
    changes = resource_changes((base.plan or {}).get("resources", []), head.plan["resources"], head.providers)
    counts = {k: sum(c.kind == k for c in changes) for k in ("replace", "update", "add", "remove", "engine")}
    manifests = manifest_diff(base.manifests, head.manifests, stack)
    outputs = changed_paths((base.plan or {}).get("outputs", {}), head.plan.get("outputs", {}))
    if not changes and not manifests and not outputs:
        return lines + ["No changes.", ""], False
    lines.append(
        f"**{counts['replace']} to replace, {counts['update']} to update, {counts['add']} to create, "
        f"{counts['remove']} to delete**" + (
            f"; {counts['engine']} with new options or dependencies only (no cloud change)"
            if counts["engine"] else "")
    )
    lines.append("")
    for change in changes:
        lines += _change_lines(change)
    if manifests:
        lines += ["", "<details><summary>Kubernetes manifests</summary>", "", "```diff", *manifests, "```",
                  "", "</details>"]
    if outputs:
        lines += ["", "Outputs:"]
        lines += [f"- `{path}`: {_shown_change(before, after)}" for path, before, after in outputs]
    return lines + [""], True

COMMENT_MARKER = "<!-- verl-gke: offline plan diff -->"

COMMENT_LIMIT = 65536  # characters GitHub accepts in one comment body

def pr_comment(report: str) -> str:
    """The report as a PR comment: the marker the workflow finds it by, cut to fit if needed."""
    body = f"{COMMENT_MARKER}\n{report}\n"
    if len(body) <= COMMENT_LIMIT:
        return body
    note = "\n\n_Cut to fit a comment: the job summary has the whole diff._\n"
    cut = body[: COMMENT_LIMIT - len(note) - 10]
    if cut.count("```") % 2:  # do not leave a code block open
        cut += "\n```"
    return cut + note

def emit(report: str, failed: bool, args: argparse.Namespace) -> int:
    """Print the report, write it to --output and the pull request's comment to --comment;
    the exit status: 1 when a plan failed to render."""
    print(report)
    if args.output:
        args.output.write_text(report + "\n")
    if args.comment:
        args.comment.write_text(pr_comment(report))
    return 1 if failed else 0
