"""The engine's calls to a dynamic provider for one resource, in the order `pulumi` makes them.

What each call receives, per pulumi/dynamic/__main__.py (the provider process the engine runs):
- Check(olds, news): olds are the resource's last *inputs*, news the program's new inputs;
- Diff(id, olds, news): olds are the last *outputs* (state), news the checked inputs;
- Update(id, olds, news): the same olds and news as Diff;
- Create(news); Delete(id, outputs); Read(id, outputs) on refresh, whose result replaces the
  outputs, and the inputs too when it returns some (ReadResult.inputs).
A replacement with delete_before_replace deletes first; if the delete fails the engine stops
and the state keeps the old resource, so create is never called. Values cross the process
boundary as protobuf Structs, where every number is a float: the round trip is reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format, struct_pb2


def wire(props: dict[str, Any]) -> dict[str, Any]:
    """What a dict looks like after crossing the gRPC boundary (google.protobuf.Struct)."""
    message = struct_pb2.Struct()
    message.update(props)
    return json_format.MessageToDict(message)


@dataclass
class State:
    id: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]


@dataclass
class Engine:
    provider: Any
    state: State | None = None
    calls: list[str] = field(default_factory=list)

    def preview(self, news: dict[str, Any]):
        """check + diff, as `pulumi preview` (and the first half of `pulumi up`) runs them."""
        checked = self._check(news)
        if self.state is None:
            return None, checked
        self.calls.append("diff")
        return self.provider.diff(self.state.id, wire(self.state.outputs), checked), checked

    def up(self, news: dict[str, Any]) -> str:
        """One `pulumi up` of this resource; returns what the engine did."""
        diff, checked = self.preview(news)
        if self.state is None:
            return self._create(checked)
        if not diff.changes:
            return "same"
        if diff.replaces:
            if diff.delete_before_replace:
                self.calls.append("delete")
                self.provider.delete(self.state.id, wire(self.state.outputs))
                self.state = None
            self._create(checked)
            return "replace"
        self.calls.append("update")
        result = self.provider.update(self.state.id, wire(self.state.outputs), checked)
        self.state = State(self.state.id, checked, wire(result.outs))
        return "update"

    def refresh(self) -> None:
        self.calls.append("read")
        result = self.provider.read(self.state.id, wire(self.state.outputs))
        if not result.id:
            self.state = None
            return
        inputs = wire(result.inputs) if result.inputs is not None else self.state.inputs
        self.state = State(result.id, inputs, wire(result.outs))

    def _check(self, news: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("check")
        olds = self.state.inputs if self.state else {}
        result = self.provider.check(olds, wire(news))
        assert not result.failures, result.failures
        return wire(result.inputs)

    def _create(self, checked: dict[str, Any]) -> str:
        self.calls.append("create")
        result = self.provider.create(checked)
        self.state = State(result.id, checked, wire(result.outs))
        return "create"
