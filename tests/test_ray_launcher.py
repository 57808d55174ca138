"""The test heads' worker launcher (tools/ray_site/sitecustomize.py) does what Ray's does, and
their dashboard loads the modules tools/local_ray.py names, and only those.

Each case runs Ray's own setup_worker.py (as its `__main__`, with os.execvp caught) and the
launcher on the same command line, and compares what each would exec and the environment it
would exec it with. The command lines are the raylet's, as a Ray 2.47.0 head starts a job's
supervisor actor (read from /proc on a test head), with contexts varied over every field.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
from pathlib import Path

import pytest

from tools.ray_site import sitecustomize as launcher

# Found, not imported: collecting this file in every xdist worker should not cost an `import ray`.
RAY = Path(importlib.util.find_spec("ray").submodule_search_locations[0])


def raylet_argv(context: dict | None, language: str = "PYTHON") -> list[str]:
    """setup_worker.py's argv as the raylet builds it (a few of default_worker's flags kept)."""
    workers = RAY / "_private" / "workers"
    argv = [str(workers / "setup_worker.py"), str(workers / "default_worker.py"),
            # A temp dir that needs the shell's quoting, as any path may.
            "--node-ip-address=127.0.0.1", "--temp-dir=/tmp/ray dir's", "--startup-token=0",
            "--runtime-env-hash=963354124", f"--language={language}"]
    if context is not None:
        argv.append(f"--serialized-runtime-env-context={json.dumps(context)}")
    return argv + ["--enable-resource-isolation=false"]


class Exec(Exception):
    pass


def rays_exec(argv: list[str], start: dict[str, str], monkeypatch) -> tuple[str, list[str], dict[str, str]]:
    """What Ray's setup_worker.py execs for argv, and with which environment, from `start`."""
    environment = dict(start)
    monkeypatch.setattr(os, "environ", environment)
    seen = []

    def execvp(file, args):
        seen.append((file, list(args)))
        raise Exec

    monkeypatch.setattr(os, "execvp", execvp)
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(Exec):
        runpy.run_path(argv[0], run_name="__main__")
    return (*seen[0], environment)


def launchers_exec(argv: list[str], start: dict[str, str], monkeypatch) -> tuple[str, list[str], dict[str, str]] | None:
    environment = dict(start)
    monkeypatch.setattr(os, "environ", environment)
    target = launcher.launch(argv)
    return None if target is None else (*target, environment)


def rays_context(**fields) -> dict:
    """A context as Ray's runtime env agent serializes it (RuntimeEnvContext.serialize): every
    field Ray has, so that one it adds fails these tests instead of quietly sending every
    worker back through setup_worker.py."""
    from ray._private.runtime_env.context import RuntimeEnvContext

    return json.loads(RuntimeEnvContext(**fields).serialize())


# Each case's RuntimeEnvContext fields; None: the empty context the raylet may pass.
CONTEXTS = {
    "a job's supervisor": dict(
        py_executable=sys.executable,
        env_vars={"HF_HOME": "/tmp/hf", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                  "RAY_worker_niceness": "0"}),
    "variables that name others": dict(
        env_vars={"PATH": "/opt/bin:${PATH}", "GONE": "a${VERL_GKE_NOT_SET}b", "Q": "it's \"x\""}),
    "a command prefix and another entrypoint": dict(
        command_prefix=["source", "/tmp/env/bin/activate", "&&"],
        override_worker_entrypoint="/srv/default_worker.py", py_executable="/srv/py"),
    "an empty context": None,
}


@pytest.mark.parametrize("case", CONTEXTS)
def test_the_launcher_execs_what_ray_execs_with_the_same_environment(case, monkeypatch):
    """Same file, same arguments, same variables (with Ray's ${VAR} expansion and removal)."""
    fields = CONTEXTS[case]
    argv, start = raylet_argv({} if fields is None else rays_context(**fields)), dict(os.environ)
    ours = launchers_exec(argv, start, monkeypatch)
    assert ours is not None
    assert ours == rays_exec(argv, start, monkeypatch)


def _supervisor() -> dict:
    return rays_context(**CONTEXTS["a job's supervisor"])


# Command lines the launcher must leave to Ray, built when a test runs (no `import ray` at
# collection).
OTHERS = {
    "another language": lambda: raylet_argv(_supervisor(), language="JAVA"),
    "a context field it does not know": lambda: raylet_argv({**_supervisor(), "container": {"image": "x"}}),
    "not setup_worker.py": lambda: [str(RAY / "_private/workers/default_worker.py"), "--language=PYTHON"],
    "bad json": lambda: [*raylet_argv(None)[:-1], "--serialized-runtime-env-context={not json"],
}


@pytest.mark.parametrize("case", OTHERS)
def test_anything_else_is_left_to_rays_own_code(case, monkeypatch):
    """Where it is not sure to do what Ray does, it does nothing and changes nothing."""
    start = dict(os.environ)
    assert launchers_exec(OTHERS[case](), start, monkeypatch) is None
    assert os.environ == start


DASHBOARD = str(RAY / "dashboard" / "dashboard.py")


@pytest.mark.parametrize("argv, modules, expected", [
    ([DASHBOARD, "--port=8265"], "JobHead,NodeHead", [DASHBOARD, "--port=8265", "--modules-to-load=JobHead,NodeHead"]),
    ([DASHBOARD, "--port=8265"], None, None),
    ([DASHBOARD, "--modules-to-load=UsageStatsHead", "--disable-frontend"], "JobHead", None),
    ([str(RAY / "dashboard" / "agent.py"), "--node-ip-address=127.0.0.1"], "JobHead", None),
], ids=["the dashboard", "the variable unset", "a list of its own", "another process"])
def test_only_rays_dashboard_is_told_which_modules_to_load(argv, modules, expected, monkeypatch):
    """The list is added to dashboard.py's command line when the variable names one, and to
    nothing else: not to another of Ray's processes, not over the list `ray start` passes when
    the dashboard is off."""
    if modules is None:
        monkeypatch.delenv(launcher.DASHBOARD_MODULES_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(launcher.DASHBOARD_MODULES_VARIABLE, modules)
    assert launcher.dashboard_argv(argv) == expected


def test_the_test_heads_dashboard_runs_the_modules_it_was_given(shared_ray_head):
    """The session's head runs, of the dashboard's module processes (Ray names each
    `ray-dashboard-<module>-0`), exactly the subprocess modules local_ray names: the trim is in
    effect, and none the program needs is missing. (NodeHead, JobHead and StateHead are all
    subprocess modules in Ray 2.47.0.)"""
    from tools import local_ray

    head = local_ray._descendants(shared_ray_head.pid)
    # A process that is exiting (a job's worker) has an empty command line.
    names = {command.split()[0] for pid, (_, command) in local_ray._proc_table().items()
             if pid in head and command.strip()}
    modules = {name.removeprefix("ray-dashboard-").rsplit("-", 1)[0]
               for name in names if name.startswith("ray-dashboard-")}
    assert modules == set(local_ray.DASHBOARD_MODULES)
