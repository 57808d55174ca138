"""Providers pickled before a move still load: a stack's state keeps each dynamic resource's
`__provider` as the SDK pickled it (by reference to its module, components/provider_home.py), and
the engine's provider process unpickles the state's copy to delete or read the resource. A
resource whose provider's diff finds nothing to change is never rewritten, so a destroy long
after a move still meets the old module names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.plan import ROOT

BEFORE = json.loads((Path(__file__).parent / "data" / "providers-before-rooms.json").read_text())

# What each old pickle must load as: the provider class where it lives now.
NOW = {
    "grpo-run": "components.run.job_provider.GrpoJobProvider",
    "cluster-check-run": "components.check.cluster_check.ClusterCheckProvider",
}

# What the provider process does with a state's `__provider` (pulumi 3.272.0
# pulumi/dynamic/__main__.py get_provider, which cannot be imported: the module starts the
# server): base64, then dill under the SDK's own _deserialize.
_LOAD = """
import base64, sys
import dill
from pulumi.runtime._serialization import _deserialize
pickled = sys.stdin.read()
provider = _deserialize(lambda: dill.loads(base64.b64decode(pickled)))
print(f"{type(provider).__module__}.{type(provider).__qualname__}")
"""


@pytest.mark.parametrize("resource", sorted(NOW))
def test_a_provider_pickled_before_the_rooms_loads_as_the_provider_now(resource):
    """The pickle of 4411090 (components.ray.job_provider, components.ray.cluster_check and
    components.ray.ray_access by reference) loads as the provider process loads it for a delete, in a fresh interpreter started in the project root
    as the engine starts it, and it is today's provider class."""
    loaded = subprocess.run([sys.executable, "-c", _LOAD], input=BEFORE["providers"][resource],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip() == NOW[resource]


def test_a_program_run_leaves_pickle_as_it_found_it():
    """The SDK's serialize_provider wraps pickle._Pickler._batch_setitems at every dynamic
    resource and never unwraps it (pulumi 3.272.0 pulumi/dynamic/dynamic.py); tools/mockrun.py
    puts it back after each run, or a test worker that renders the program a few hundred times
    fails with RecursionError inside pickle (seen in the suite at 4ee7976)."""
    import pickle

    from tools import plan

    before = pickle._Pickler._batch_setitems  # noqa: SLF001
    for _ in range(2):
        plan.run_program("a4", "standard")
    assert pickle._Pickler._batch_setitems is before  # noqa: SLF001
