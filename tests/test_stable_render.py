"""One config rendered twice gives the same bytes: plan.json, manifests.yaml and the printed tree
(issue 37). The program registers independent resources concurrently and answers invokes from a
thread pool, so what a render receives comes in a different order each run; these tests hand
the writers one render in two orders and hold them to the same bytes."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from tools import mockrun, plan


def _reversed_keys(value: Any) -> Any:
    """`value` with every mapping's keys in reverse order (lists keep theirs: order is data)."""
    if isinstance(value, dict):
        return {k: _reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(v) for v in value]
    return value


def _another_order(recording: mockrun.Recording) -> mockrun.Recording:
    """The same render as a second run could deliver it: resources registered in another order,
    every input's keys set in another order, the invokes answered in another order."""
    resources = [
        dataclasses.replace(r, inputs=_reversed_keys(r.inputs)) for r in recording.resources
    ]
    random.Random(37).shuffle(resources)
    return mockrun.Recording(
        resources=resources,
        outputs=_reversed_keys(recording.outputs),
        secret_outputs=set(recording.secret_outputs),
        invokes=_reversed_keys(recording.invokes),
    )


def _artifacts(tmp_path, name, stack, inputs, recording) -> dict[str, bytes]:
    directory = tmp_path / name
    plan.write_artifacts(directory, stack, inputs, recording)
    files = {f: (directory / f).read_bytes() for f in ("plan.json", "manifests.yaml")}
    return {**files, "tree": "\n".join(plan.tree_lines(recording)).encode()}


def test_a_render_in_another_order_writes_the_same_bytes(program, tmp_path):
    """plan.json, manifests.yaml and the printed tree of every stack and mode do not depend on
    the order resources were registered, keys set or invokes answered: byte for byte."""
    stack, _, inputs, recording = program
    first = _artifacts(tmp_path, "first", stack, inputs, recording)
    second = _artifacts(tmp_path, "second", stack, inputs, _another_order(recording))
    assert first["plan.json"] == second["plan.json"]
    assert first["manifests.yaml"] == second["manifests.yaml"]
    assert first["tree"] == second["tree"]


def test_an_invoke_answered_per_argument_is_recorded_the_same_whatever_the_order():
    """An invoke whose answer depends on its arguments (getProjectService, once per API) is
    recorded as every distinct answer, sorted: the plan's exampleValues do not depend on which
    API the thread pool asked last."""
    services = ["container.googleapis.com", "compute.googleapis.com", "storage.googleapis.com"]

    def answered(order: list[str]) -> Any:
        cloud = mockrun.FakeCloud("example-project")
        for service in order:
            cloud.call(mockrun.pulumi_mocks.MockCallArgs(
                mockrun.PROJECT_SERVICE, {"project": "example-project", "service": service}, ""))
        return cloud.answered[mockrun.PROJECT_SERVICE]

    forward, backward = answered(services), answered(services[::-1])
    assert forward == backward
    assert sorted(a["service"] for a in forward) == sorted(services)


def test_an_invoke_answered_once_is_recorded_as_its_answer():
    """One answer stays the answer itself (not a list of one), as tests and the plan read it."""
    cloud = mockrun.FakeCloud("example-project")
    args = mockrun.pulumi_mocks.MockCallArgs(mockrun.LIST_BUCKETS, {"project": "p"}, "")
    cloud.call(args)
    cloud.call(args)
    assert cloud.answered[mockrun.LIST_BUCKETS] == {"buckets": []}
