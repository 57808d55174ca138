"""Shared fixtures: whole-program runs under the mock runtime, cached per stack and mode."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import pytest

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
def shared_ray_head():
    """One private local Ray head for every test module that runs jobs on a real Ray: the
    training log patterns and curve, the job provider and its lifecycle, the cluster check.
    Starting a head costs ~8 s; each module uses its own submission ids and resource names."""
    from tests.local_ray import local_ray

    # A short temp dir, not tmp_path_factory's: Ray's Unix sockets live under it, and a path
    # past the 107-byte socket limit (/tmp/pytest-of-<user>/pytest-<n>/... once n has three
    # digits) makes the dashboard's modules fail to start ("MetricsHead ... EOF from pipe").
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    try:
        with local_ray(temp_dir) as head:
            yield head
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_head(shared_ray_head):
    """The job provider's tests call it ray_head."""
    return shared_ray_head
