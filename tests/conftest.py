"""Shared fixtures: whole-program runs under the mock runtime, cached per stack and mode."""

from __future__ import annotations

import functools

import pytest

from tests.local_ray import local_ray
from tools import plan

STACK_MODES = [("a4", "standard"), ("a4", "autopilot"), ("a3u", "standard"), ("a3u", "autopilot"), ("a4x", "standard")]


@functools.lru_cache(maxsize=None)
def rendered(stack: str, mode: str):
    """(StackInputs, Recording) of the real program for one stack and mode; run once per session."""
    return plan.run_program(stack, mode)


@pytest.fixture(params=STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def program(request):
    stack, mode = request.param
    inputs, recording = rendered(stack, mode)
    return stack, mode, inputs, recording


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One private Ray head for every real-Ray test module (started once: ~8 s)."""
    with local_ray(tmp_path_factory.mktemp("ray")) as head:
        yield head
