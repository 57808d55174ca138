"""The SDK's dynamic-provider process, started and driven over gRPC the way the Pulumi engine does.

What the engine does with a Python dynamic resource, and what this harness copies. Go files are
pulumi/pulumi at 1b5949891b (pkg/v3.259.0-14, the newest read; the program needs a CLI >= 3.187),
Python ones the SDK installed here, pulumi 3.272.0:
- It starts the `pulumi-resource-pulumi-python` shim (sdk/python/dist/pulumi-resource-pulumi-python,
  unchanged since #18126), which runs `"$PULUMI_RUNTIME_VIRTUALENV/bin/python" -u -m
  pulumi.dynamic $@`, the virtualenv made absolute against $PWD, its bin first on PATH and
  PYTHONHOME unset (lines 13-33). `start` runs that command line itself: the shim adds nothing
  else to it, and one process fewer is one fewer to end.
- The environment is the CLI's own plus the project's runtime options as
  `PULUMI_RUNTIME_<OPTION>` (toolchain, virtualenv), `PULUMI_PROJECT` and `PULUMI_CONFIG`, the JSON
  of the stack config in the provider's namespace, `pulumi-python`, of which this project has none
  (sdk/go/common/resource/plugin/provider_plugin.go:248-260; pkg/host/host.go:356-365).
- The working directory is the program's directory: the project root, or the directory of
  Pulumi.yaml's `main:` (pkg/engine/project.go:45-66 getPwdMain; provider_plugin.go:287 passes
  ctx.Pwd to newPlugin, which sets `cmd.Dir`). The argument is the engine's gRPC address, which
  the SDK's provider never reads (pulumi/dynamic/__main__.py main()): ENGINE_ADDRESS is a port
  nothing listens on.
- It reads the port from the first line of stdout (plugin.go:332), then keeps reading stdout and
  stderr as info diagnostics, and ends the plugin by SIGINT to its process group, then SIGKILL
  to the group after 5 s (plugin.go:598 RegisterProcessGroup, :640-661 kill;
  sdk/go/common/util/cmdutil/child_unix.go InterruptChildren, KillChildren): the group, since
  the provider's own children (kubectl port-forward) are in it.
- Values cross as protobuf Structs (every number a float). Secrets are sent as plain values (the
  provider answers Configure with acceptSecrets false), an unknown as the `rpc.UNKNOWN` string,
  which the provider turns into a `pulumi.output.Unknown` object in Check and Diff
  (pulumi/dynamic/__main__.py: `deserialize_properties(request.news, True)`).

`Deployment` keeps a stack's state and runs one command at a time, each in a fresh provider
process as the engine does (one process per command, for all dynamic resources), making the
engine's calls in its order; tests/engine.py says what each call receives.
"""

from __future__ import annotations

import contextlib
import copy
import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import grpc
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from tools import mockrun

ROOT = Path(__file__).resolve().parents[1]
PROVIDER_KEY = "__provider"
ENGINE_ADDRESS = "127.0.0.1:1"
# The project's name and runtime options, which the engine hands to the provider.
_PROJECT_FILE = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
PROJECT = _PROJECT_FILE["name"]
RUNTIME_OPTIONS = {key: str(value) for key, value in _PROJECT_FILE["runtime"]["options"].items()}
# plugin.go newPlugin: SIGINT to the group, up to 5 s, then SIGKILL to the group.
GRACE_S = 5.0
PORT_TIMEOUT_S = 30.0
DIFF_NONE, DIFF_SOME = provider_pb2.DiffResponse.DIFF_NONE, provider_pb2.DiffResponse.DIFF_SOME


class ProviderError(RuntimeError):
    """A provider call failed: the provider's traceback, as the engine would print it."""


class CheckFailed(RuntimeError):
    """Check returned failures: the engine stops the preview or update with them."""

    def __init__(self, name: str, failures: list[tuple[str, str]]) -> None:
        self.failures = failures
        super().__init__(f"{name}: " + "; ".join(f"{key}: {reason}" for key, reason in failures))


# --- values on the wire ------------------------------------------------------------------------


def to_struct(props: dict[str, Any], unknowns: bool) -> struct_pb2.Struct:
    """`props` as the engine sends them: secrets as plain values, unknowns as rpc.UNKNOWN."""

    def plain(value: Any) -> Any:
        if isinstance(value, Unknown):
            assert unknowns, "an unknown value outside a preview: the engine would wait for it"
            return rpc.UNKNOWN
        if rpc.is_rpc_secret(value):
            return plain(rpc.unwrap_rpc_secret(value))
        if isinstance(value, dict):
            return {key: plain(inner) for key, inner in value.items()}
        if isinstance(value, list):
            return [plain(inner) for inner in value]
        return value

    message = struct_pb2.Struct()
    message.update(plain(props))
    return message


def from_struct(message: struct_pb2.Struct) -> dict[str, Any]:
    """A provider's answer as plain data, with each rpc.UNKNOWN back as an Unknown."""

    def back(value: Any) -> Any:
        if value == rpc.UNKNOWN:
            return Unknown()
        if isinstance(value, dict):
            return {key: back(inner) for key, inner in value.items()}
        if isinstance(value, list):
            return [back(inner) for inner in value]
        return value

    return back(json_format.MessageToDict(message))


# --- the process ---------------------------------------------------------------------------------


@dataclass
class ProviderProcess:
    """One provider process, as the engine starts it for one command."""

    cwd: Path = ROOT
    env: dict[str, str] = field(default_factory=dict)  # added to this process's environment
    virtualenv: str = RUNTIME_OPTIONS["virtualenv"]
    log: Path | None = None  # where its stderr goes (the engine's info diagnostics)
    process: subprocess.Popen | None = None
    stub: Any = None
    channel: Any = None

    def start(self) -> ProviderProcess:
        venv = Path(self.virtualenv)
        venv = venv if venv.is_absolute() else self.cwd / venv  # the shim: $PWD/<virtualenv>
        # The CLI's environment (a user's shell sets no PYTHONPATH to the program: tests do
        # that explicitly), then what the engine and the shim add.
        environment = {key: value for key, value in os.environ.items()
                       if key not in ("PYTHONHOME", "PYTHONPATH")}
        environment.update(self.env)
        environment.update({f"PULUMI_RUNTIME_{key.upper()}": value
                            for key, value in {**RUNTIME_OPTIONS,
                                               "virtualenv": self.virtualenv}.items()})
        environment.update(PULUMI_PROJECT=PROJECT, PULUMI_CONFIG="{}")
        environment["PATH"] = f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
        stderr = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [str(venv / "bin" / "python"), "-u", "-m", "pulumi.dynamic", ENGINE_ADDRESS],
                cwd=self.cwd, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=stderr, start_new_session=True,  # its own process group (Setpgid)
            )
        finally:
            if self.log:
                stderr.close()
        port = self._read_port()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        # What the engine asks first (host.go Provider, then the default provider's Configure).
        self.stub.GetPluginInfo(empty_pb2.Empty(), timeout=PORT_TIMEOUT_S)
        self.stub.Configure(provider_pb2.ConfigureRequest(
            args=struct_pb2.Struct(), acceptSecrets=True, acceptResources=True))
        return self

    def _read_port(self) -> int:
        """The first stdout line, as plugin.go newPlugin reads it; later lines are kept."""
        lines: queue.Queue[str] = queue.Queue()

        def drain() -> None:
            for raw in self.process.stdout:
                lines.put(raw.decode().strip())
            lines.put("")

        threading.Thread(target=drain, daemon=True).start()
        try:
            first = lines.get(timeout=PORT_TIMEOUT_S)
        except queue.Empty:
            first = ""
        if not first.isdigit():
            self.close()
            said = self.log.read_text(errors="replace")[-3000:] if self.log else ""
            raise RuntimeError(f"the provider process wrote no port ({first!r}):\n{said}")
        return int(first)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, GRACE_S), (signal.SIGKILL, GRACE_S)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait)
                return

    def __enter__(self) -> ProviderProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    # The calls, as pulumi/dynamic/__main__.py serves them.

    def call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.stub, method)(request)
        except grpc.RpcError as error:
            raise ProviderError(f"{method}: {error.details()}") from None

    def check(self, urn: str, olds: dict, news: dict, preview: bool) -> tuple[dict, list]:
        reply = self.call("Check", provider_pb2.CheckRequest(
            urn=urn, olds=to_struct(olds, True), news=to_struct(news, preview)))
        return from_struct(reply.inputs), [(f.property, f.reason) for f in reply.failures]

    def diff(self, urn: str, id_: str, olds: dict, news: dict, old_inputs: dict) -> Any:
        return self.call("Diff", provider_pb2.DiffRequest(
            urn=urn, id=id_, olds=to_struct(olds, False), news=to_struct(news, True),
            old_inputs=to_struct(old_inputs, False)))

    def create(self, urn: str, news: dict) -> tuple[str, dict]:
        reply = self.call("Create", provider_pb2.CreateRequest(
            urn=urn, properties=to_struct(news, False)))
        return reply.id, from_struct(reply.properties)

    def update(self, urn: str, id_: str, olds: dict, news: dict, old_inputs: dict) -> dict:
        reply = self.call("Update", provider_pb2.UpdateRequest(
            urn=urn, id=id_, olds=to_struct(olds, False), news=to_struct(news, False),
            old_inputs=to_struct(old_inputs, False)))
        return from_struct(reply.properties)

    def read(self, urn: str, id_: str, outputs: dict, inputs: dict) -> Any:
        return self.call("Read", provider_pb2.ReadRequest(
            urn=urn, id=id_, properties=to_struct(outputs, False),
            inputs=to_struct(inputs, False)))

    def delete(self, urn: str, id_: str, outputs: dict, inputs: dict) -> None:
        self.call("Delete", provider_pb2.DeleteRequest(
            urn=urn, id=id_, properties=to_struct(outputs, False),
            old_inputs=to_struct(inputs, False)))


# --- the engine ----------------------------------------------------------------------------------


@dataclass
class Registration:
    """One dynamic resource as the program registered it (tools/mockrun.py Registered)."""

    urn: str
    name: str
    inputs: dict[str, Any]  # secrets unwrapped (the provider receives them so), unknowns kept
    # URNs behind each input (the engine's propertyDependencies).
    input_dependencies: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, registered: mockrun.Registered) -> Registration:
        return cls(registered.urn, registered.name, mockrun.unwrap(registered.inputs),
                   dict(registered.input_dependencies))

    def but(self, **inputs: Any) -> Registration:
        """The same registration with some inputs replaced (a deep copy)."""
        changed = copy.deepcopy(self)
        changed.inputs.update(inputs)
        return changed


@dataclass
class State:
    id: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    input_dependencies: dict[str, frozenset[str]]
    pending_replacement: bool = False  # deleted as a dependent of a replacement


@dataclass
class Planned:
    """What a preview found for one resource."""

    checked: dict[str, Any]
    failures: list[tuple[str, str]]
    diff: Any = None  # the DiffResponse; None for a resource to create


class Deployment:
    """A stack's dynamic resources: their state, and the engine's commands against them."""

    def __init__(self, logs: Path, env: dict[str, str] | None = None) -> None:
        self.logs = logs
        self.env = env or {}
        self.state: dict[str, State] = {}
        self.order: list[str] = []  # registration order: the engine's dependency order here
        self.names: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []  # (method, resource name) of the last command
        self.said: str = ""  # the last command's provider stderr

    @contextlib.contextmanager
    def command(self, name: str) -> Iterator[ProviderProcess]:
        self.calls = []
        log = self.logs / f"{len(list(self.logs.glob('*.log'))):02d}-{name}.log"
        with ProviderProcess(env=self.env, log=log) as process:
            try:
                yield process
            finally:
                self.said = log.read_text(errors="replace")

    def mock_ids(self, registration: Registration) -> dict[str, Any]:
        """Inputs holding another dynamic resource's id (the mocks' `<name>-id`, FakeCloud)
        take its real id, as the engine resolves the output the program passed."""
        news = dict(registration.inputs)
        for key, urns in registration.input_dependencies.items():
            for urn in urns:
                if urn in self.state and news.get(key) == f"{self.names[urn]}-id":
                    news[key] = self.state[urn].id
        return news

    def plan(self, process: ProviderProcess, registration: Registration,
             news: dict[str, Any], new: bool = False) -> Planned:
        """`pulumi preview`'s calls for one resource with inputs `news` (unknowns allowed):
        Check, and Diff if it exists; `new` plans it as if it did not exist yet."""
        old = None if new else self.state.get(registration.urn)
        self.calls.append(("check", registration.name))
        checked, failures = process.check(registration.urn, old.inputs if old else {}, news,
                                          preview=True)
        if old is None or failures:
            return Planned(checked, failures)
        self.calls.append(("diff", registration.name))
        diff = process.diff(registration.urn, old.id, old.outputs, checked, old.inputs)
        return Planned(checked, failures, diff)

    def up(self, registrations: list[Registration]) -> dict[str, str]:
        """`pulumi up` (its update, after the preview): what the engine did to each resource."""
        done = {}
        with self.command("up") as process:
            for registration in registrations:
                self.names[registration.urn] = registration.name
                done[registration.name] = self._step(process, registration)
                if registration.urn not in self.order:
                    self.order.append(registration.urn)
        return done

    def _step(self, process: ProviderProcess, registration: Registration) -> str:
        urn, name = registration.urn, registration.name
        news = self.mock_ids(registration)
        old = self.state.get(urn)
        self.calls.append(("check", name))
        checked, failures = process.check(urn, old.inputs if old else {}, news, preview=False)
        if failures:
            raise CheckFailed(name, failures)
        if old is not None:
            self.calls.append(("diff", name))
            diff = process.diff(urn, old.id, old.outputs, checked, old.inputs)
            if old.pending_replacement:
                assert diff.replaces, f"{name} was deleted as a dependent but is not replaced"
            elif diff.changes == DIFF_NONE:
                return "same"
            elif not diff.replaces:
                self.calls.append(("update", name))
                outputs = process.update(urn, old.id, old.outputs, checked, old.inputs)
                self.state[urn] = State(old.id, checked, outputs,
                                        registration.input_dependencies)
                return "update"
            elif diff.deleteBeforeReplace:
                self._delete_dependents(process, urn)
                self._delete(process, urn)
            else:
                raise NotImplementedError("create-before-delete: no provider here asks for it")
        self.calls.append(("create", name))
        id_, outputs = process.create(urn, checked)
        self.state[urn] = State(id_, checked, outputs, registration.input_dependencies)
        return "replace" if old is not None else "create"

    def _delete_dependents(self, process: ProviderProcess, urn: str) -> None:
        """pkg/resource/deploy/step_generator.go:3268-3400 calculateDependentReplacements: each
        resource with an input from the replaced one is diffed (its old inputs, that input
        unknown); those the diff replaces are deleted first, dependents before what they depend
        on. Direct dependents only: no dynamic resource here depends on one through another."""
        for other in reversed(self.order):
            state = self.state.get(other)
            if state is None or other == urn:
                continue
            keys = [key for key, urns in state.input_dependencies.items() if urn in urns]
            if not keys:
                continue
            guess = {**state.inputs, **{key: Unknown() for key in keys}}
            self.calls.append(("diff", self.names[other]))
            diff = process.diff(other, state.id, state.outputs, guess, state.inputs)
            if diff.replaces:
                self._delete(process, other)
                state.pending_replacement = True
                self.state[other] = state

    def _delete(self, process: ProviderProcess, urn: str) -> None:
        state = self.state.pop(urn)
        self.calls.append(("delete", self.names[urn]))
        process.delete(urn, state.id, state.outputs, state.inputs)

    def refresh(self) -> None:
        """`pulumi refresh`: Read each resource; its answer replaces outputs (and inputs)."""
        with self.command("refresh") as process:
            for urn in list(self.order):
                state = self.state.get(urn)
                if state is None:
                    continue
                self.calls.append(("read", self.names[urn]))
                reply = process.read(urn, state.id, state.outputs, state.inputs)
                if not reply.id:
                    del self.state[urn]
                    continue
                inputs = from_struct(reply.inputs) if reply.HasField("inputs") else state.inputs
                self.state[urn] = State(reply.id, inputs, from_struct(reply.properties),
                                        state.input_dependencies)

    def destroy(self) -> None:
        """`pulumi destroy`: Delete in reverse dependency order (the program registers what a
        resource depends on before it). `protect` is the engine's own check, not modelled."""
        with self.command("destroy") as process:
            for urn in reversed(self.order):
                if urn in self.state:
                    self._delete(process, urn)


def unknown_variants(inputs: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, `inputs` with the value at that path unknown), for every input the program sets
    and every key of an object input (`access.service`: the SDK sends an object whose value is
    an unknown output with that value unknown, the rest known)."""
    for key, value in inputs.items():
        if key == PROVIDER_KEY:
            continue
        yield key, {**inputs, key: Unknown()}
        for inner in value if isinstance(value, dict) else ():
            yield f"{key}.{inner}", {**inputs, key: {**value, inner: Unknown()}}


def first_preview(registration: Registration) -> dict[str, Any]:
    """The inputs of a first preview: every value that comes from another resource is unknown,
    since nothing exists yet (the mocks knew every value; the dependencies say which)."""
    return {key: Unknown() if registration.input_dependencies.get(key) else value
            for key, value in registration.inputs.items()}
