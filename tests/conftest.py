"""Shared fixtures: whole-program runs under the mock runtime, cached per stack and mode."""

from __future__ import annotations

import functools
import gc
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tools import plan, stacks

# Every shipped stack and mode, from the one list (tools/stacks.py).
STACK_MODES = list(stacks.STACK_MODES)


@functools.lru_cache(maxsize=None)
def rendered(stack: str, mode: str):
    """(StackInputs, Recording) of the real program for one stack and mode; run once per session."""
    return plan.run_program(stack, mode)


@pytest.fixture(params=STACK_MODES, ids=[f"{s}-{m}" for s, m in STACK_MODES])
def program(request):
    stack, mode = request.param
    inputs, recording = rendered(stack, mode)
    return stack, mode, inputs, recording


# The directory where the session's one Ray head is recorded (tools/local_ray.py shared_head).
# The first pytest process creates it (the xdist controller, or a run without xdist), and its
# workers, started after pytest_configure, inherit the variable.
RAY_SHARE_ENV = "VERL_GKE_TEST_RAY_SHARE"
_RAY_SHARE = pytest.StashKey[Path]()


def pytest_configure(config):
    if RAY_SHARE_ENV not in os.environ:
        # A short directory, not tmp_path_factory's: Ray's Unix sockets live under it, and a
        # path past the 107-byte socket limit (/tmp/pytest-of-<user>/pytest-<n>/... once n has
        # three digits) makes the dashboard's modules fail to start ("MetricsHead ... EOF").
        share = Path(tempfile.mkdtemp(prefix="ray-share-", dir="/tmp"))
        os.environ[RAY_SHARE_ENV] = str(share)
        config.stash[_RAY_SHARE] = share


def pytest_unconfigure(config):
    share = config.stash.get(_RAY_SHARE, None)
    if share is not None:
        from tools.local_ray import stop_shared

        stop_shared(share)
        shutil.rmtree(share, ignore_errors=True)
        del os.environ[RAY_SHARE_ENV]


@pytest.fixture(scope="session")
def shared_ray_head():
    """One private local Ray head for every test that runs jobs on a real Ray, in every xdist
    worker: the training log patterns and curve, the job provider and its lifecycle, the
    supervisor, the cluster check, the metrics. Starting a head costs ~8 s and ~15 CPU-s;
    each test uses its own submission ids and resource names, and reads only its own jobs."""
    from tools.local_ray import shared_head

    return shared_head(Path(os.environ[RAY_SHARE_ENV]))


@pytest.fixture(scope="session")
def ray_head(shared_ray_head):
    """The job provider's tests call it ray_head."""
    return shared_ray_head


# The offline file that takes longest (make diff's renders, ~22 s alone), handed out right after
# the real-Ray files so that it is not the one left running alone at the end. At -n 3 on two
# cores: 158, 160 and 168 s (median 160 s), against 158-171 s (median 169 s, five runs) in its
# alphabetical place.
LONGEST_OFFLINE_FILE = "test_plan_diff.py"


def pytest_collection_modifyitems(items):
    """Files with tests on the real Ray head first: they are the suite's longest (they wait for
    real jobs), and `make test` has pytest-xdist hand out files in collection order
    (--no-loadscope-reorder; its default, most tests first, sent them last and left one worker
    running them alone at the end: 221 s against 212 s at -n 3). Then LONGEST_OFFLINE_FILE, then
    the rest in their order. Files stay whole."""
    on_ray = {item.path for item in items if "shared_ray_head" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: (item.path not in on_ray, item.path.name != LONGEST_OFFLINE_FILE))


def pytest_runtest_setup(item):
    """Move what is alive when a test starts (the SDKs' ~400k objects once imported, the cached
    renders) into the permanent generation that the cyclic collector skips (gc.freeze). A render
    allocates enough to trigger full collections, and each one walked that whole heap again:
    test_baseline, day_two, observability, program and config took 41.1 CPU-s, 34.8 with the
    freeze (24.8 with the mock runtime's stack traces off as well). The price is the cyclic
    garbage a test leaves behind, frozen with the rest: ~100 MB more peak RSS per worker."""
    gc.freeze()
