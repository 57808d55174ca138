"""The test heads' worker launcher (tests/ray_site/sitecustomize.py) does what Ray's does.

Each case runs Ray's own setup_worker.py (as its `__main__`, with os.execvp caught) and the
launcher on the same command line, and compares what each would exec and the environment it
would exec it with. The command lines are the raylet's, as a Ray 2.47.0 head starts a job's
supervisor actor (read from /proc on a test head), with contexts varied over every field.
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

import pytest

from tests.ray_site import sitecustomize as launcher

def raylet_argv(context: dict | None, language: str = "PYTHON") -> list[str]:
    """setup_worker.py's argv as the raylet builds it (a few of default_worker's flags kept)."""
    import ray

    workers = Path(ray.__file__).parent / "_private" / "workers"
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


CONTEXTS = {
    "a job's supervisor": rays_context(
        py_executable="/work/main/.venv/bin/python",
        env_vars={"HF_HOME": "/tmp/hf", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                  "RAY_worker_niceness": "0"}),
    "variables that name others": rays_context(
        env_vars={"PATH": "/opt/bin:${PATH}", "GONE": "a${VERL_GKE_NOT_SET}b", "Q": "it's \"x\""}),
    "a command prefix and another entrypoint": rays_context(
        command_prefix=["source", "/tmp/env/bin/activate", "&&"],
        override_worker_entrypoint="/srv/default_worker.py", py_executable="/srv/py"),
    "an empty context": {},
}


@pytest.mark.parametrize("context", CONTEXTS.values(), ids=CONTEXTS.keys())
def test_the_launcher_execs_what_ray_execs_with_the_same_environment(context, monkeypatch):
    """Same file, same arguments, same variables (with Ray's ${VAR} expansion and removal)."""
    argv, start = raylet_argv(context), dict(os.environ)
    ours = launchers_exec(argv, start, monkeypatch)
    assert ours is not None
    assert ours == rays_exec(argv, start, monkeypatch)


@pytest.mark.parametrize("argv", [
    raylet_argv(CONTEXTS["a job's supervisor"], language="JAVA"),
    raylet_argv({**CONTEXTS["a job's supervisor"], "container": {"image": "x"}}),
    ["/srv/default_worker.py", "--language=PYTHON"],
    [*raylet_argv(None)[:-1], "--serialized-runtime-env-context={not json"],
], ids=["another language", "a context field it does not know", "not setup_worker.py", "bad json"])
def test_anything_else_is_left_to_rays_own_code(argv, monkeypatch):
    """Where it is not sure to do what Ray does, it does nothing and changes nothing."""
    start = dict(os.environ)
    assert launchers_exec(argv, start, monkeypatch) is None
    assert os.environ == start
