"""Test heads only: Ray's worker launcher without importing Ray when all it does is set variables.

The raylet starts every worker whose runtime env is not empty as `python setup_worker.py
default_worker.py <args> --language=PYTHON --serialized-runtime-env-context=<json>`, and a job's
supervisor actor always has one (job_manager.py `_get_supervisor_runtime_env` adds env vars).
setup_worker.py (ray/_private/workers/setup_worker.py, Ray 2.47.0) imports Ray, ~0.7 CPU-s, only
to set the context's variables and exec `bash -c "exec <python> default_worker.py <args>"`
(ray/_private/runtime_env/context.py `RuntimeEnvContext.exec_worker`, with
ray/_private/utils.py `update_envs`); the worker then imports Ray again. That is ~40% of the CPU
of every job a test submits. tests/local_ray.py puts this directory on a test head's PYTHONPATH,
so Python imports this module at start-up (the `site` module) in every process of the head.

In a setup_worker process whose context holds nothing but these fields, it does the same as Ray's
code and execs the same command, never importing Ray; in any other case (another language, a
context field it does not know, another platform) it does nothing and Ray's own code runs.
tests/test_ray_launcher.py holds it to Ray's code: the same command and the same environment,
and it fails when Ray's context gains a field (which would send every worker back to Ray's path).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys

# RuntimeEnvContext.__init__'s fields (ray/_private/runtime_env/context.py).
_KNOWN = {"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint", "java_jars"}


def launch(argv: list[str]) -> tuple[str, list[str]] | None:
    """The (file, args) that setup_worker.py would exec for `argv` after setting the context's
    variables in os.environ, or None, having changed nothing, where Ray's own code must run."""
    if not argv or os.path.basename(argv[0]) != "setup_worker.py" or not sys.platform.startswith("linux"):
        return None
    # setup_worker.py's own parser, so that its arguments split exactly as there.
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--serialized-runtime-env-context", type=str)
    parser.add_argument("--language", type=str)
    try:
        args, passthrough = parser.parse_known_args(argv[1:])
        context = json.loads(args.serialized_runtime_env_context or "{}")
    except (SystemExit, ValueError):
        return None
    if args.language != "PYTHON" or not isinstance(context, dict) or set(context) - _KNOWN:
        return None
    for key, value in (context.get("env_vars") or {}).items():
        expanded = os.path.expandvars(value)
        os.environ[key] = re.sub(r"\$\{[A-Z0-9_]+\}", "", expanded)  # update_envs
    passthrough = list(passthrough)
    if context.get("override_worker_entrypoint"):
        passthrough[0] = context["override_worker_entrypoint"]
    executable = ["exec", context.get("py_executable") or sys.executable]
    command = [*(context.get("command_prefix") or []), *executable, *map(shlex.quote, passthrough)]
    return "bash", ["bash", "-c", " ".join(command)]


_target = launch(sys.argv) if hasattr(sys, "argv") else None
if _target is not None:
    os.execvp(*_target)
