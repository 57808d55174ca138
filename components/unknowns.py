"""Values the engine does not know yet, as a dynamic provider's `check` and `diff` receive them.

In a preview, an input that comes from another resource's output not created yet is unknown.
The provider process deserialises Check's and Diff's inputs with `keep_unknowns=True`
(pulumi 3.272.0 pulumi/dynamic/__main__.py, Check and Diff), which turns each unknown into a
fresh `pulumi.output.Unknown` object (pulumi/runtime/rpc.py deserialize_property: `return
Unknown() if settings.is_dry_run() or keep_unknowns`), not the `rpc.UNKNOWN` string of the
wire. An Unknown equals nothing, not even another Unknown, and is truthy: compared with `==`,
ordered with `>` (a TypeError) or tested for truth, it is judged as a value it is not. A check
leaves unknown inputs alone (the engine calls check again with the real values during `up`),
and a diff counts an unknown input as changed (it may be).
"""

from __future__ import annotations

from typing import Any

from pulumi.runtime import rpc


def is_unknown(value: Any) -> bool:
    """True for a value the engine does not know yet, or a list or dict holding one
    (rpc.contains_unknowns: `known_types.is_unknown`, an isinstance test on Unknown)."""
    return rpc.contains_unknowns(value)


def known(props: dict[str, Any]) -> dict[str, Any]:
    """The inputs whose whole value is known: what a check may judge."""
    return {key: value for key, value in props.items() if not is_unknown(value)}
