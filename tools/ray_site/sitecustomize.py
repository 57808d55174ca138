"""Test heads only: Ray's worker launcher without importing Ray when all it does is set variables,
and a dashboard that loads only the modules the program talks to.

The raylet starts every worker whose runtime env is not empty as `python setup_worker.py
default_worker.py <args> --language=PYTHON --serialized-runtime-env-context=<json>`, and a job's
supervisor actor always has one (job_manager.py `_get_supervisor_runtime_env` adds env vars).
setup_worker.py (ray/_private/workers/setup_worker.py, Ray 2.47.0) imports Ray, ~0.7 CPU-s, only
to set the context's variables and exec `bash -c "exec <python> default_worker.py <args>"`
(ray/_private/runtime_env/context.py `RuntimeEnvContext.exec_worker`, with
ray/_private/utils.py `update_envs`); the worker then imports Ray again. That is ~40% of the CPU
of every job a test submits. tools/local_ray.py puts this directory on a test head's PYTHONPATH,
so Python imports this module at start-up (the `site` module) in every process of the head.

In a setup_worker process whose context holds nothing but these fields, it does the same as Ray's
code and execs the same command, never importing Ray; in any other case (another language, a
context field it does not know, another platform) it does nothing and Ray's own code runs.
tests/test_ray_launcher.py holds it to Ray's code: the same command and the same environment,
and it fails when Ray's context gains a field (which would send every worker back to Ray's path).

In Ray's dashboard.py process it adds `--modules-to-load=<the modules named by the variable
DASHBOARD_MODULES_VARIABLE, which tools/local_ray.py sets>`: `ray start` has no such option, and
otherwise loads every module (ray/_private/services.py start_api_server passes the flag only
with --include-dashboard=false).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys

# The variable that names the dashboard modules to load, comma-separated (unset: all of them).
DASHBOARD_MODULES_VARIABLE = "VERL_GKE_TEST_DASHBOARD_MODULES"
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


def dashboard_argv(argv: list[str]) -> list[str] | None:
    """Ray's dashboard.py command line with the modules to load that DASHBOARD_MODULES_VARIABLE
    names, or None where nothing changes: another process, the variable unset, or a command
    that already has a list."""
    modules = os.environ.get(DASHBOARD_MODULES_VARIABLE)
    if (not modules or not argv or argv[0].split(os.sep)[-2:] != ["dashboard", "dashboard.py"]
            or any(arg.startswith("--modules-to-load") for arg in argv)):
        return None
    return [*argv, f"--modules-to-load={modules}"]


if hasattr(sys, "argv"):
    _target = launch(sys.argv)
    if _target is not None:
        os.execvp(*_target)
    _dashboard = dashboard_argv(sys.argv)
    if _dashboard is not None:
        sys.argv[:] = _dashboard
