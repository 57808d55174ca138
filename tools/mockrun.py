"""Run Pulumi code under the SDK's mock runtime and record everything it registers.

This is what makes the program useful without a cloud: the offline plan (`tools/plan.py`) and
every component test run the real code through here. The recording keeps, for each resource,
its type, logical name, parent URN and inputs exactly as the engine would receive them; secret
values stay wrapped so that callers can prove they never leak.

Pitfalls of the mock runtime this module exists to avoid:
- `Mocks.new_resource` is not told the parent, so the monitor records it from the request.
- Runs default to `preview=False`: under preview an `apply` on an unknown output never runs,
  and assertions placed inside it silently vanish.
- Inputs arrive camelCase and numbers arrive as floats; `plain()` turns integral floats back.

What the mock engine cannot use is not computed: the SDK collects the whole Python stack of
every registration (pulumi/runtime/resource.py `_get_stack_trace`, a source position per frame)
for the engine's diagnostics, which the mock monitor discards. `run` has it return an empty
trace instead: under pytest a registration's stack is ~60 frames deep, and that collection was
a quarter of a test render's CPU.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import hashlib
import json
import pickle
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.proto import source_pb2

SECRET = "[secret]"

# Fake identities for cloud-computed attributes. They are obviously fake on purpose.
FAKE_PROJECT_NUMBER = "000000000000"
FAKE_CA = "RkFLRS1DQQ=="  # base64("FAKE-CA")
FAKE_DNS_ID = "0123456789abcdef"  # the DNS endpoint's unique part (gke-<id>-<number>.<region>.gke.goog)


def _proto_value(value) -> Any:
    """A protobuf `Value` (what the SDK sends a replacement trigger as) as plain data."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {key: _proto_value(inner) for key, inner in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_proto_value(inner) for inner in value.list_value.values]
    return None if kind in (None, "null_value") else getattr(value, kind)


@dataclass(frozen=True)
class Options:
    """The resource options the engine receives, as the CLI names them (camelCase in plan.json)."""

    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    ignore_changes: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    custom_timeouts: dict[str, str] | None = None
    import_id: str | None = None
    provider: str | None = None  # the provider resource's URN, for custom resources
    aliases: tuple[str, ...] = ()  # former names (alias specs; the engine takes those over)
    # The replacement trigger as the SDK sends it (a plain value, or the unknown sentinel).
    replacement_trigger: Any = None

    @classmethod
    def of(cls, request) -> Options:
        timeouts = {
            kind: getattr(request.customTimeouts, kind)
            for kind in ("create", "update", "delete")
            if getattr(request.customTimeouts, kind)
        }
        return cls(
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            delete_before_replace=bool(request.deleteBeforeReplace),
            ignore_changes=tuple(request.ignoreChanges),
            replace_on_changes=tuple(request.replaceOnChanges),
            custom_timeouts=timeouts or None,
            import_id=request.importId or None,
            # A provider reference is "<urn>::<id>"; the URN is what names the resource.
            provider=request.provider.rsplit("::", 1)[0] if request.provider else None,
            aliases=tuple(a.spec.name for a in request.aliases if a.HasField("spec") and a.spec.name),
            replacement_trigger=(
                _proto_value(request.replacement_trigger)
                if request.HasField("replacement_trigger") else None
            ),
        )

    def as_plan(self) -> dict[str, Any]:
        return {
            "protect": self.protect,
            "retainOnDelete": self.retain_on_delete,
            "deleteBeforeReplace": self.delete_before_replace,
            "ignoreChanges": list(self.ignore_changes),
            "replaceOnChanges": list(self.replace_on_changes),
            "customTimeouts": self.custom_timeouts,
            "import": self.import_id,
            "provider": self.provider,
            "aliases": [{"name": name} for name in self.aliases],
            "replacementTrigger": self.replacement_trigger,
        }


@dataclass
class Registered:
    """One resource as the engine would have received it."""

    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    inputs: dict[str, Any]
    # URNs this resource waits for: explicit depends_on plus those behind its input values.
    dependencies: frozenset[str] = frozenset()
    # The URNs behind each input value, by input name (how data flows into this resource).
    input_dependencies: dict[str, frozenset[str]] = field(default_factory=dict)
    # Engine options that are not inputs but decide what `up` and `destroy` do.
    options: Options = field(default_factory=Options)

    @property
    def depends_on(self) -> frozenset[str]:
        """Explicit `depends_on` URNs: the dependencies no input value accounts for."""
        return self.dependencies.difference(*self.input_dependencies.values())

    @property
    def ignore_changes(self) -> tuple[str, ...]:
        return self.options.ignore_changes

    @property
    def retain_on_delete(self) -> bool:
        return self.options.retain_on_delete

    @property
    def plain_inputs(self) -> dict[str, Any]:
        """Inputs with secrets replaced by "[secret]" and integral floats made ints."""
        return redact(self.inputs)


@dataclass
class Recording:
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)
    # Invoke token -> the answer the program got (FakeCloud.invokes).
    invokes: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registered:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            names = sorted(r.name for r in self.of_type(type_))
            hint = difflib.get_close_matches(name or "", names, n=3)
            raise AssertionError(
                f"expected one {type_} named {name!r}, found {len(found)}; "
                f"names of that type: {names}; closest: {hint}"
            )
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.resources if r.urn == urn)

    def children_of(self, urn: str) -> list[Registered]:
        return [r for r in self.resources if r.parent == urn]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the program creates, in registration order, redacted."""
        return [k8s_object(r) for r in self.resources if is_kubernetes_object(r.type)]

    def plain_outputs(self) -> dict[str, Any]:
        return {
            k: (SECRET if k in self.secret_outputs else redact(v))
            for k, v in self.outputs.items()
        }


def is_kubernetes_object(type_: str) -> bool:
    """True for concrete Kubernetes objects (not providers, Helm releases or YAML bundles)."""
    if not type_.startswith("kubernetes:"):
        return False
    module = type_.split(":")[1]
    return not (
        type_.startswith("pulumi:providers")
        or module.startswith("helm.sh")
        or module.startswith("yaml")
        or module.startswith("kustomize")
    )


_K8S_TOP_LEVEL = (
    "apiVersion", "kind", "metadata", "spec", "data", "stringData", "type", "immutable",
    "rules", "roleRef", "subjects",  # RBAC objects (the run's supervisor, issue 18)
)


def k8s_object(resource: Registered) -> dict[str, Any]:
    plain = resource.plain_inputs
    return {key: plain[key] for key in _K8S_TOP_LEVEL if key in plain}


def redact(value: Any) -> Any:
    """Deep copy with secrets replaced by "[secret]" and integral floats turned into ints."""
    return _plain(value, _hide)


def _hide(inner: Any) -> Any:
    # A secret map keeps its keys (which entries exist is not secret), never its values.
    return {k: SECRET for k in inner} if isinstance(inner, dict) else SECRET


def unwrap(value: Any) -> Any:
    """Deep copy with secrets unwrapped (their real values), for assertions on content."""
    return _plain(value, unwrap)


def _plain(value: Any, on_secret: Callable[[Any], Any]) -> Any:
    """Deep copy as plain data: integral floats (the wire has no ints) become ints, and each
    secret's inner value is handed to `on_secret`."""
    if rpc.is_rpc_secret(value):
        return on_secret(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: _plain(v, on_secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, on_secret) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, pulumi.FileAsset):
        # The engine compares two assets by the hash of their contents, not by path or object
        # (pulumi sdk/go/common/resource/asset/asset.go:146-161 Asset.Equals at 1b5949891b):
        # the plain form carries both, so a diff sees what the engine would.
        return {"path": value.path, "hash": hashlib.sha256(Path(value.path).read_bytes()).hexdigest()}
    return value


# What the live project answers the program's invokes (components/preflight/) in a plain
# offline run: GKE's REGULAR channel as it could look, and no bucket yet. Tests pass their own
# answers (`invokes=`) for other situations: an old channel, a bucket left by a destroy.
ENGINE_VERSIONS = "gcp:container/getEngineVersions:getEngineVersions"
LIST_BUCKETS = "gcp:storage/getBuckets:getBuckets"
GET_BUCKET = "gcp:storage/getBucket:getBucket"
PROJECT_SERVICE = "gcp:projects/getProjectService:getProjectService"
GET_RESERVATION = "gcp:compute/getReservation:getReservation"
GET_RESERVATION_BLOCK = "gcp:compute/getReservationBlock:getReservationBlock"
QUOTA_INFOS = "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos"


def enabled_service(args: dict[str, Any]) -> dict[str, Any]:
    """getProjectService for an enabled API: its id is set (a disabled one reads as no id)."""
    return {
        "id": f"{args.get('project')}/{args.get('service')}",
        "service": args.get("service"),
        "project": args.get("project"),
    }


EXAMPLE_INVOKES: dict[str, Any] = {
    ENGINE_VERSIONS: {
        "defaultClusterVersion": "1.34.6-gke.1129000",
        "latestMasterVersion": "1.35.2-gke.1485000",
        "releaseChannelDefaultVersion": {
            "RAPID": "1.35.2-gke.1485000",
            "REGULAR": "1.34.6-gke.1129000",
            "STABLE": "1.33.9-gke.1060000",
        },
        "releaseChannelLatestVersion": {
            "RAPID": "1.35.2-gke.1485000",
            "REGULAR": "1.35.1-gke.1396000",
            "STABLE": "1.34.4-gke.1047000",
        },
        "validMasterVersions": ["1.35.2-gke.1485000", "1.34.6-gke.1129000", "1.33.9-gke.1060000"],
    },
    LIST_BUCKETS: {"buckets": []},
    PROJECT_SERVICE: enabled_service,
}


class FakeCloud(pulumi_mocks.Mocks):
    """Answers resource registrations and invokes the way the providers would, with fakes.

    Only the attributes the program reads back are invented; everything else is echoed, so a
    resource's state is its inputs plus obviously fake computed values. Invokes are answered
    from `invokes` (token: response, or a function of the invoke's arguments), and each answer
    given is kept in `answered`, so that a plan can say which example answers it rests on.
    """

    def __init__(
        self, project: str, invokes: dict[str, Any] | None = None,
        invoke_delay: dict[str, float] | None = None,
    ) -> None:
        self.project = project
        self.invokes = {**EXAMPLE_INVOKES, **(invokes or {})}
        self.answered: dict[str, Any] = {}
        self._several: dict[str, list[Any]] = {}  # the distinct answers of each token, as given
        self._lock = threading.Lock()  # invokes are answered from the monitor's thread pool
        # Seconds to wait before answering an invoke, by token (bench/preflight_bench.py).
        self.invoke_delay = invoke_delay or {}

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        state = copy.deepcopy(args.inputs)
        state.update(self._computed(args.typ, args.name, state))
        return f"{args.name}-id", state

    def _computed(self, type_: str, name: str, state: dict[str, Any]) -> dict[str, Any]:
        if type_ == "pulumi:index:Stash":
            # The builtin provider's create: `output` is `input` (pulumi/pulumi
            # pkg/resource/deploy/builtins.go:225-245 @1b5949891b).
            return {"output": copy.deepcopy(state.get("input"))}
        if type_ == "gcp:container/cluster:Cluster":
            cluster_name = state.get("name", name)
            endpoints = copy.deepcopy(state.get("controlPlaneEndpointsConfig") or {})
            # The DNS endpoint is "Output only ... Always present" (container.v1
            # DNSEndpointConfig.endpoint); the real one is gke-<id>.<region>.gke.goog.
            endpoints.setdefault("dnsEndpointConfig", {})["endpoint"] = (
                f"gke-{FAKE_DNS_ID}-{FAKE_PROJECT_NUMBER}.{state.get('location', 'unknown')}.gke.goog"
            )
            return {
                "endpoint": "203.0.113.10",  # TEST-NET-3: documentation-only address
                "controlPlaneEndpointsConfig": endpoints,
                "masterAuth": {"clusterCaCertificate": FAKE_CA},
                "selfLink": f"https://container.googleapis.com/v1/projects/{self.project}/"
                f"locations/{state.get('location', 'unknown')}/clusters/{cluster_name}",
            }
        if type_ == "gcp:serviceaccount/account:Account":
            project = state.get("project", self.project)
            return {"email": f"{state.get('accountId', name)}@{project}.iam.gserviceaccount.com"}
        if type_ == "gcp:storage/bucket:Bucket":
            bucket = state.get("name", name)
            return {"url": f"gs://{bucket}", "selfLink": f"storage/{bucket}"}
        if type_.startswith("gcp:compute/"):
            resource_name = state.get("name", name)
            kind = type_.split(":")[-1].lower()
            return {
                "selfLink": f"https://www.googleapis.com/compute/v1/projects/{self.project}/"
                f"{kind}s/{resource_name}",
            }
        return {}

    def _keep(self, token: str, answer: Any) -> None:
        """`answered[token]`: the answer, or every distinct answer sorted where one token was
        answered differently (a function of its arguments: getProjectService, once per API).
        Invokes run concurrently, so "the last answer" was a different one from run to run."""
        with self._lock:
            several = self._several.setdefault(token, [])
            if answer not in several:
                several.append(answer)
            self.answered[token] = several[0] if len(several) == 1 else sorted(
                several, key=lambda a: json.dumps(a, sort_keys=True))

    def call(self, args: pulumi_mocks.MockCallArgs):
        if args.token in self.invoke_delay:
            time.sleep(self.invoke_delay[args.token])
        if args.token in self.invokes:
            answer = self.invokes[args.token]
            answer = copy.deepcopy(answer(args.args) if callable(answer) else answer)
            self._keep(args.token, answer)
            return answer
        if args.token == "gcp:organizations/getProject:getProject":
            project_id = args.args.get("projectId") or self.project
            return {"projectId": project_id, "number": FAKE_PROJECT_NUMBER, "name": project_id}
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {"project": self.project, "accessToken": "fake-token"}
        return {}


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """MockMonitor that keeps parent, type, name and raw inputs of every registration."""

    def __init__(self, mocks: pulumi_mocks.Mocks, recording: Recording) -> None:
        super().__init__(mocks)
        self.recording = recording

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        inputs_from = {
            key: frozenset(deps.urns)
            for key, deps in request.propertyDependencies.items()
            if deps.urns
        }
        if request.type != "pulumi:pulumi:Stack":
            self.recording.resources.append(
                Registered(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent or None,
                    custom=bool(request.custom),
                    inputs=rpc.deserialize_properties(request.object, keep_unknowns=True),
                    dependencies=frozenset(request.dependencies).union(*inputs_from.values()),
                    input_dependencies=inputs_from,
                    options=Options.of(request),
                )
            )
        return response


def run(
    program: Callable[[], Any],
    *,
    project: str = "verl-gke",
    stack: str = "test",
    config: dict[str, Any] | None = None,
    secret_keys: list[str] | None = None,
    preview: bool = False,
    invokes: dict[str, Any] | None = None,
    recording: Recording | None = None,
    invoke_delay: dict[str, float] | None = None,
) -> Recording:
    """Run `program` under mocks with the given config; return what it registered and exported.

    `config` keys are fully qualified (`<project>:target`, `gcp:project`); values are strings as
    the Pulumi CLI passes them (objects as JSON). `invokes` replaces FakeCloud's answers to
    invokes by token. Pass `recording` to keep what was registered even when the program
    raises. `invoke_delay` makes invokes of those tokens answer after that many seconds. Each
    call starts from a fresh root stack.
    """
    recording = recording if recording is not None else Recording()
    project_id = str((config or {}).get("gcp:project", "example-project"))
    mocks = FakeCloud(project_id, invokes, invoke_delay)
    recording.invokes = mocks.answered
    pulumi_settings.ROOT.set(None)
    pulumi.runtime.set_all_config(dict(config or {}), secret_keys or [])
    pulumi.runtime.set_mocks(
        mocks,
        project=project,
        stack=stack,
        preview=preview,
        monitor=RecordingMonitor(mocks, recording),
    )

    def body():
        program()
        root = pulumi_settings.get_root_resource()
        exported = dict(getattr(root, "outputs", {}) or {})
        return pulumi.Output.from_input(asyncio.ensure_future(_collect(recording, exported)))

    traced = pulumi_resource._get_stack_trace
    pulumi_resource._get_stack_trace = source_pb2.StackTrace
    # pulumi 3.272.0 pulumi/dynamic/dynamic.py serialize_provider points pickle.Pickler at the
    # pure-Python _Pickler, wraps its _batch_setitems in a sorting one and never puts it back:
    # each dynamic resource's serialization wraps the last wrapper, and a process that runs the
    # program some hundred times (a test worker, `make diff`'s renders) exceeds the recursion
    # limit inside pickle. A run leaves the method as it found it.
    batch_setitems = pickle._Pickler._batch_setitems  # noqa: SLF001
    try:
        pulumi.runtime.test(body)()
    finally:
        pulumi_resource._get_stack_trace = traced
        pickle._Pickler._batch_setitems = batch_setitems  # noqa: SLF001
    return recording


async def _collect(recording: Recording, exported: dict[str, Any]) -> None:
    """Resolve every stack output, remembering which ones are secret."""
    for name, value in exported.items():
        output = pulumi.Output.from_input(value)
        recording.outputs[name] = await output.future(with_unknowns=True)
        if await output.is_secret():
            recording.secret_outputs.add(name)
