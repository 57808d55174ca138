"""Where the dynamic providers lived until issue 38 split components/ray into rooms.

The SDK pickles a dynamic provider by reference to its module (components/provider_home.py), and
the engine unpickles the `__provider` it finds in a resource's state for delete and read. A stack
that has not updated a dynamic resource since the move still holds `components.ray.cluster_check`,
`components.ray.job_provider` and `components.ray.ray_access` there (the providers' own diff
ignores `__provider`, so an unchanged resource keeps its old state), and `pulumi destroy` would fail
with `No module named 'components.ray.job_provider'`. So those three names stay importable, as the
modules they became (tests/test_provider_process.py unpickles providers pickled before the move).
Nothing else may import this package."""

import importlib
import sys

LEGACY = {
    "cluster_check": "components.check.cluster_check",
    "job_provider": "components.run.job_provider",
    "ray_access": "components.run.ray_access",
}
for _old, _new in LEGACY.items():
    sys.modules[f"{__name__}.{_old}"] = importlib.import_module(_new)
