"""Whether the engine's provider process can import this program's dynamic providers.

The SDK pickles a dynamic provider with dill (pulumi 3.272.0 pulumi/dynamic/dynamic.py
serialize_provider), which writes a class from an importable module by reference:
`components.guards BucketIdentityProvider`, not its code. The provider process (`python -m
pulumi.dynamic`, which the engine starts through the pulumi-resource-pulumi-python shim) imports
that module again when it unpickles a call's `__provider`. Its sys.path is its working
directory (`-m` puts it first), PYTHONPATH, and the virtualenv's site-packages; the engine starts
it in the program's directory, the project root or the directory of Pulumi.yaml's `main:`
(pulumi/pulumi pkg/engine/project.go getPwdMain; sdk/go/common/resource/plugin/plugin.go
newPlugin `cmd.Dir = pwd`), with the engine's own environment.

- Run by the CLI, the program runs in that same directory: the language host passes it as
  `--pwd` and pulumi-language-python-exec changes to it before running the program
  (sdk/python/cmd/pulumi-language-python-exec, `os.chdir(args.pwd)`), and passes
  `--root_directory` (since v3.153.0, #18595; this program needs 3.187).
- Run inline by the Automation API, the program runs in the caller's process, wherever that is,
  while the engine starts the provider in the workspace's work_dir, a fresh temp directory unless
  one is given (pulumi/automation/_local_workspace.py); the inline server sets no root directory
  (pulumi/automation/_server.py Run, reset_options).
- Under the mock runtime no provider process is started.

So `check_home` runs at the first registration of a dynamic resource (components/guards.py
BucketIdentity) and stops the program with what to set, instead of every provider call failing
with `No module named 'components'` once resources are already being created.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import pulumi
from pulumi.runtime import mocks, settings

import components

# The directory that holds the `components` package: what the provider process must import from.
PACKAGE_ROOT = Path(components.__file__).resolve().parent.parent


class ProviderHomeError(pulumi.RunError):
    """The provider process could not import the providers (reported without a traceback)."""


def home_problem(
    package_root: Path, engine_pwd: Path | None, pythonpath: str, site_dirs: list[str]
) -> str | None:
    """Why a provider process started in `engine_pwd` (None: a directory the program cannot
    know) with PYTHONPATH `pythonpath` could not import `package_root`'s `components`; None if
    it can."""
    # A relative PYTHONPATH entry is relative to the process's directory: unknown inline.
    entries = [Path(entry) for entry in pythonpath.split(os.pathsep) if entry]
    reachable = [*map(Path, site_dirs), *(entry for entry in entries if entry.is_absolute())]
    if engine_pwd is not None:
        reachable += [engine_pwd, *(engine_pwd / e for e in entries if not e.is_absolute())]
    if package_root.resolve() in {path.resolve() for path in reachable}:
        return None
    fix = (f"set PYTHONPATH={package_root} in the environment `pulumi` (or the Automation API) "
           "runs in: the engine passes it on to the provider process")
    if engine_pwd is None:
        return (
            "this program runs inline under the Automation API, and its dynamic providers (the "
            "bucket guard, the cluster check, the training job) are pickled by reference to the "
            f"`components` package in {package_root}: the engine starts their provider process "
            "in the workspace's work_dir, which the program cannot see, and with no "
            "PYTHONPATH naming that directory every provider call would fail with `No module "
            f"named 'components'`. Either {fix}, or run the project as a local program "
            f"(`create_or_select_stack(stack_name=..., work_dir=\"{package_root}\")`)"
        )
    return (
        "the dynamic providers (the bucket guard, the cluster check, the training job) are "
        f"pickled by reference to the `components` package in {package_root}, and the engine "
        f"starts their provider process in the program's directory, {engine_pwd}, where it "
        "cannot import them: every provider call would fail with `No module named "
        f"'components'`. Either run the program from {package_root} (Pulumi.yaml there, with no "
        f"`main:` or with `main:` naming that directory), or {fix}"
    )


def mocked() -> bool:
    """True under the mock runtime, which starts no provider process."""
    return isinstance(settings.SETTINGS.monitor, mocks.MockMonitor)


def check_home() -> None:
    """Raise ProviderHomeError if the engine's provider process could not import the providers."""
    if mocked():
        return
    cli = settings.SETTINGS.root_directory is not None  # see the module doc
    problem = home_problem(
        PACKAGE_ROOT, Path.cwd() if cli else None, os.environ.get("PYTHONPATH", ""),
        [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]],
    )
    if problem:
        raise ProviderHomeError(problem)
