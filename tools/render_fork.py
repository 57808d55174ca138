"""Run Python commands (`-m module ...`, `-c code ...`) in a tree as a fresh interpreter would,
without paying each time for importing the SDKs: `make diff`'s renders.

A fresh `python -m tools.plan` spends ~5.8 s of CPU importing pulumi, pulumi_gcp and
pulumi_kubernetes (their submodules load lazily, as the program touches them) and ~1.3 s on
the program (bench/plan_bench.py measures both). Here one server process imports those modules
once and forks a child per command, up to one per core at a time:

- The server never runs a command itself. What it imports is learned, not listed: after each
  child's command, the child names the modules it ended up with that came from the
  interpreter's own path (the standard library and site-packages, never a tree), and the server
  imports those before its next fork. So the first command of a session runs alone and cold;
  the others start with the SDKs loaded and in parallel.
- Each child drops every module that did not come from the interpreter's own path (`tools`,
  `components`, ... of any tree, and the server's own module) from `sys.modules`, changes into
  its tree, puts the tree (`-m`) or '' (`-c`) first on `sys.path` as CPython does, gets a new
  `__main__`, and runs the command as `python <argv>` would (`runpy._run_module_as_main` is
  what `-m` calls: CPython Modules/main.c pymain_run_module), its stdout and stderr on files.
  Its exit code follows the interpreter's rules for SystemExit and uncaught exceptions.
- A forked child shares only what a fresh interpreter would have had too: third-party modules
  right after their import. The server never runs a program, whose state would leak (pulumi's
  `serialize_provider` patches the standard `pickle` module, its settings hold the run's
  config). tests/test_plan_diff.py checks plan.json, manifests.yaml and providers.json of the
  work tree and of an older commit byte for byte against a fresh interpreter's.
- Forking a process that has threads is unsafe (only the forking thread survives in the child,
  and locks other threads held stay held). The server checks that it has one OS thread before
  each fork (/proc/self/task) and otherwise answers "not forked". That covers gRPC, which
  pulumi imports: gRPC documents fork as safe when no gRPC object exists before it (grpc/grpc
  doc/fork_support.md, "Alternative: use after fork", at 191d0c3f83d6), and the server creates
  none; a pulumi that sets up tracing on import (pulumi/runtime/_instrumentation.py
  `_initialize_tracing`, when TRACEPARENT is set) starts an exporter thread, which the check
  catches.

Without fork (not POSIX), or when the server cannot fork or dies, commands run as fresh
interpreters (`run_fresh`), concurrently too: slower, the same results. A changed environment
starts a new server, since imported modules may have read it (all but `environment()` leaves out).
"""

from __future__ import annotations

import atexit
import builtins
import functools
import gc
import importlib
import importlib.machinery
import json
import linecache
import locale
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Command:
    """`python <argv>` run in `cwd`: argv starts with "-m" and a module, or "-c" and code."""

    argv: tuple[str, ...]
    cwd: Path


def slots() -> int:
    """How many commands run at once: the cores this process may use (the affinity mask, which
    os.cpu_count() does not consult: Python docs, os.cpu_count)."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return max(1, len(usable) if usable else os.cpu_count() or 1)


def run_fresh(command: Command) -> subprocess.CompletedProcess:
    """The command in a fresh interpreter: the reference a forked run must equal, and the
    fallback."""
    return subprocess.run([sys.executable, *command.argv], cwd=command.cwd, capture_output=True, text=True)


def run_all(commands: Sequence[Command], fresh: bool = False) -> list[subprocess.CompletedProcess]:
    """Every command's result, in the order given; forked from the server where it can (unless
    `fresh`), else in fresh interpreters; at most `slots()` at a time either way."""
    results: list[subprocess.CompletedProcess | None] = [None] * len(commands)
    if commands and not fresh and hasattr(os, "fork"):
        try:
            results = _server().run(commands)
        except (OSError, ValueError, EOFError) as error:  # the server died or answered garbage
            _close_server()
            print(f"note: forked renders unavailable ({error}); running fresh interpreters", file=sys.stderr)
    missing = [i for i, done in enumerate(results) if done is None]
    with ThreadPoolExecutor(max_workers=slots()) as pool:
        for i, done in zip(missing, pool.map(run_fresh, [commands[i] for i in missing])):
            results[i] = done
    return results  # type: ignore[return-value]


# -- the client side ------------------------------------------------------------------------

# Variables that change under a caller that keeps rendering and decide nothing a render imports
# or writes. pytest names the running test and its phase in PYTEST_CURRENT_TEST (pytest docs,
# "PYTEST_CURRENT_TEST environment variable"): compared, it made every test that renders start
# a server of its own and pay for its cold first render, five in tests/test_plan_diff.py.
NOT_COMPARED = frozenset({"PYTEST_CURRENT_TEST"})


def environment() -> dict[str, str]:
    """The environment a server is started with and kept for: this process's, less NOT_COMPARED."""
    return {name: value for name, value in os.environ.items() if name not in NOT_COMPARED}


class _Server:
    """The server process, spoken to in JSON lines over its stdin and stdout."""

    def __init__(self) -> None:
        self.environment = environment()
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from tools.render_fork import serve; serve()"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def run(self, commands: Sequence[Command]) -> list[subprocess.CompletedProcess | None]:
        with tempfile.TemporaryDirectory(prefix="render-fork-") as scratch:
            request = {"scratch": scratch, "slots": slots(),
                       "commands": [{"argv": list(c.argv), "cwd": str(c.cwd)} for c in commands]}
            assert self.process.stdin and self.process.stdout
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
            if not answer:
                raise EOFError(f"the render server exited ({self.process.poll()})")
            codes = json.loads(answer)["returncodes"]
            out = lambda i, stream: _text(Path(scratch, f"{i}.{stream}"))  # noqa: E731
            return [
                None if code is None
                else subprocess.CompletedProcess([sys.executable, *c.argv], code, out(i, "out"), out(i, "err"))
                for i, (c, code) in enumerate(zip(commands, codes))
            ]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin
            self.process.stdin.close()  # the server ends at the end of its input
            self.process.wait()


def _text(path: Path) -> str:
    """A file's bytes as `subprocess.run(text=True)` decodes a pipe: the locale's encoding,
    universal newlines (subprocess._translate_newlines)."""
    data = path.read_bytes() if path.exists() else b""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


_running: _Server | None = None


def _server() -> _Server:
    global _running  # noqa: PLW0603: one server per process, started on first use
    if _running is not None and (_running.environment != environment() or _running.process.poll() is not None):
        _close_server()
    if _running is None:
        _running = _Server()
        atexit.register(_close_server)
    return _running


def _close_server() -> None:
    global _running  # noqa: PLW0603
    if _running is not None:
        atexit.unregister(_close_server)
        _running.close()
        _running = None


# -- the server side ------------------------------------------------------------------------

def serve() -> None:
    """Answer requests from stdin until it closes: fork each command, learn its modules."""
    # The interpreter's own path, without the '' that `-c` put first: the standard library,
    # site-packages and whatever the environment adds. Modules from here are shared.
    own_path = [p for p in sys.path if p]
    sys.path[:] = own_path
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # children read nothing of the requests
    os.close(devnull)
    os.dup2(2, 1)  # and an import that prints cannot corrupt the answers
    gc.disable()  # Python docs, gc.freeze: no collections in the parent (see run_batch)
    state = _ServerState(own_path)
    try:
        for line in requests:
            request = json.loads(line)
            closing = (requests.fileno(), answers.fileno())
            codes = state.run_batch(request["commands"], Path(request["scratch"]), request["slots"], closing)
            answers.write(json.dumps({"returncodes": codes}) + "\n")
            answers.flush()
    except KeyboardInterrupt:
        pass  # Ctrl-C reached the whole process group: the client reports it, not this process


class _ServerState:
    def __init__(self, own_path: list[str]) -> None:
        self.own_path = own_path
        self.warm = False  # whether a command's modules have been imported here yet

    def run_batch(self, commands: list[dict[str, Any]], scratch: Path, width: int,
                  closing: tuple[int, ...]) -> list[int | None]:
        codes: list[int | None] = [None] * len(commands)
        waiting = list(range(len(commands)))
        running: dict[int, int] = {}  # pid -> index
        while waiting or running:
            # Cold, a command runs alone: the others would each import the SDKs again.
            while waiting and len(running) < (width if self.warm else 1) and not _threads():
                index = waiting.pop(0)
                sys.stdout.flush()
                sys.stderr.flush()
                # Python docs, gc.freeze: frozen, the SDKs' objects are not walked by the child's
                # collections, whose writes would copy each page they touch.
                gc.freeze()
                pid = os.fork()
                if pid == 0:
                    gc.enable()
                    _child(commands[index], scratch, index, self.own_path, closing)
                running[pid] = index
            if not running:
                break  # threads appeared: the rest are left to fresh interpreters (None)
            pid, status = os.wait()
            index = running.pop(pid)
            codes[index] = os.waitstatus_to_exitcode(status)
            self.learn(scratch / f"{index}.modules", codes[index] == 0)
        return codes

    def learn(self, listing: Path, complete: bool) -> None:
        """Import the shared modules a child loaded, in its order, so later children have them;
        after a command that succeeded (`complete`), the server is warm."""
        try:
            names = json.loads(listing.read_text())
        except (OSError, ValueError):
            return
        for name in names:
            try:
                # Each package runs before its submodules, as when the program used it: importing
                # `a.b.c` while lazy `a.b` has not run would set the module as attribute `c` of
                # `a.b` after `a.b` ran (pulumi/_utils.py _LazyModule re-applies attributes set
                # meanwhile), hiding what `a.b` binds to that name: pulumi_kubernetes.apiextensions
                # exports the class CustomResource from its submodule CustomResource.
                parts = name.split(".")
                for depth in range(1, len(parts) + 1):
                    module = sys.modules.get(".".join(parts[:depth]))
                    if module is not None and _pending(module):
                        getattr(module, "_render_fork_runs_it", None)  # any other attribute runs it
                if name not in sys.modules:
                    importlib.import_module(name)
            except Exception:  # noqa: BLE001: one that cannot be imported alone stays unloaded
                continue
        self.warm = self.warm or complete


def _threads() -> int:
    """OS threads besides this one (gRPC's C core threads are not in `threading`)."""
    try:
        return len(os.listdir("/proc/self/task")) - 1
    except OSError:
        import threading

        return threading.active_count() - 1


class _Shared:
    """Whether a module came from the interpreter's own path (or is built in), not from a tree:
    the test a module passes to stay in a child, and to be learned by the server."""

    def __init__(self, own_path: list[str], trees: set[str]) -> None:
        self.roots = tuple(root + os.sep for root in {os.path.realpath(p) for p in own_path} - trees)
        self._real = functools.lru_cache(maxsize=None)(os.path.realpath)  # per directory

    def __call__(self, module: Any) -> bool:
        # Read from the module's __dict__ as stored: any attribute of a lazily imported module
        # that has not run yet would run it (see _pending).
        attributes = object.__getattribute__(module, "__dict__")
        origin = attributes.get("__file__")
        places = [origin] if origin else list(attributes.get("__path__") or [])
        if not places:
            spec = attributes.get("__spec__")
            return spec is None or spec.origin in ("built-in", "frozen")
        return all((self._real(os.path.dirname(place)) + os.sep).startswith(self.roots) for place in places)


def _pending(module: Any) -> bool:
    """A lazily imported module that nothing has used yet (so it has not run): its type loads it
    on attribute access. The SDKs import each of their ~200 subpackages so (pulumi/_utils.py
    lazy_import and _LazyModule, after importlib.util.LazyLoader; pulumi's lets `__name__`,
    `__file__` and the like through without loading)."""
    return type(module).__getattribute__ is not types.ModuleType.__getattribute__


def _child(command: dict[str, Any], scratch: Path, index: int, own_path: list[str],
           closing: tuple[int, ...]) -> None:
    """In the forked child: become `python <argv>` in the command's tree; never return."""
    code = 1
    try:
        for fd in closing:
            os.close(fd)
        for fd, name in ((1, f"{index}.out"), (2, f"{index}.err")):
            opened = os.open(scratch / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        cwd = os.path.realpath(command["cwd"])
        os.chdir(cwd)
        shared = _Shared(own_path, {cwd, str(ROOT)})
        for name, module in list(sys.modules.items()):
            if name == "__main__" or not shared(module):
                del sys.modules[name]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        linecache.clearcache()
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins  # type: ignore[attr-defined]
        main.__annotations__ = {}
        main.__loader__ = importlib.machinery.BuiltinImporter  # type: ignore[assignment]
        sys.modules["__main__"] = main
        flag, what, *args = command["argv"]
        sys.orig_argv = [sys.executable, *command["argv"]]
        code = _run(flag, what, args, cwd, own_path, main)
        _exit_like_the_interpreter()
        names = [n for n, m in list(sys.modules.items())
                 if n != "__main__" and not _pending(m) and shared(m)]
        (scratch / f"{index}.modules").write_text(json.dumps(names))
    except BaseException:  # noqa: BLE001: a bug of this harness; its traceback is the stderr
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _run(flag: str, what: str, args: list[str], cwd: str, own_path: list[str], main: types.ModuleType) -> int:
    """`python -m what *args` or `python -c what *args`, already in `cwd`; its exit code."""
    sys.argv = [flag, *args]
    # CPython: `-m` puts the working directory first on sys.path, `-c` puts '' (Python docs,
    # sys.path; see the difference with `python -c 'import sys; print(sys.path[0])'`).
    sys.path[:] = [cwd if flag == "-m" else "", *own_path]
    try:
        if flag == "-m":
            runpy._run_module_as_main(what, alter_argv=True)  # type: ignore[attr-defined]
        elif flag == "-c":
            exec(compile(what, "<string>", "exec"), vars(main))  # noqa: S102: the command itself
        else:
            raise ValueError(f"unsupported interpreter flag {flag!r}")
    except SystemExit as exit_:
        # The interpreter's rules (Python docs, SystemExit): None is 0, an int is itself, anything
        # else is printed to stderr and the exit status is 1.
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException as error:  # noqa: BLE001: an uncaught exception, printed as CPython does
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # from the command's first frame on, as in a fresh interpreter
        # The hook prints the exception's own __traceback__ when it has one (CPython
        # pythonrun.c _PyErr_Display), so the shortened one goes onto the exception.
        sys.excepthook(type(error), error.with_traceback(tb), tb)
        return 1
    return 0


def _exit_like_the_interpreter() -> None:
    """What CPython does before it exits (Py_FinalizeEx): wait for non-daemon threads, then the
    atexit handlers, then exit; os._exit afterwards skips nothing a fresh interpreter would run."""
    import atexit as exits
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    exits._run_exitfuncs()
