"""Issue 42's plan-side levers on the time to the first step, in the offline plan of every stack.

The verl image's pre-pull DaemonSet (where it runs, what it asks for, that it starts right after
the system pool and that nothing waits for it), the capacity timeouts of the GPU pool and of the
RayCluster's wait, the a4/a3u workers' bounded wait for the gIB plugin, the one-node throw-away
default pool, and the cluster check's read floor.
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

from components.check import cluster_check
from components.cluster import image_prepull
from components.cluster.gke_cluster import SYSTEM_POOL
from components.cluster.gpu_node_pool import (
    CREATE_TIMEOUTS,
    GPU_TAINT,
    GpuNodePool,
    GpuNodePoolArgs,
)
from components.facts import pins
from components.facts.expectations import MIN_READ_MBPS
from components.facts.hardware import Arch, NodeNetworking, Target, profile
from components.raycluster import ray_cluster_spec
from components.runspec.run_env import runtime_env
from components.schema.choices import Capacity, ClusterMode
from tests import k8s_schemas
from tests.conftest import STACK_MODES, rendered
from tests.test_verl_ray_cluster import make_args, worker_group
from tools import mockrun

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
STANDARD = [(s, m) for s, m in STACK_MODES if m == "standard"]
AUTOPILOT = [(s, m) for s, m in STACK_MODES if m == "autopilot"]


def _ids(pairs):
    return [f"{s}-{m}" for s, m in pairs]


def _prepull(recording):
    return recording.one(DAEMON_SET, image_prepull.PREPULL_NAME)


def _waits_for(recording, resource) -> set[str]:
    """Every URN `resource` waits for, transitively: its dependencies, its provider's, and for
    a component's child what the component was told to wait for (child_options passes it)."""
    seen: set[str] = set()
    stack = [resource.urn]
    while stack:
        r = recording.by_urn(stack.pop())
        for urn in (*r.dependencies, *([r.options.provider] if r.options.provider else [])):
            if urn not in seen:
                seen.add(urn)
                stack.append(urn)
    return seen


# --- the pre-pull DaemonSet --------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_is_named_for_the_critical_path_and_never_awaited(stack, mode):
    """Resource name and object name are both `verl-image-prepull` (tools/critical_path.py finds
    it by that name); `pulumi.com/skipAwait` so that no pull can hold or fail `up`."""
    _, recording = rendered(stack, mode)
    ds = _prepull(recording).plain_inputs
    assert ds["metadata"]["name"] == "verl-image-prepull"
    assert ds["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_pulls_exactly_the_ray_pods_image_and_asks_for_almost_nothing(stack, mode):
    """The container is the RayCluster's own image reference (through the mirror), so the pull
    it starts is the Ray pod's; requests = limits of a few millicores and MiB."""
    _, recording = rendered(stack, mode)
    [container] = _prepull(recording).plain_inputs["spec"]["template"]["spec"]["containers"]
    [ray] = recording.of_type(RAY_CLUSTER)
    worker = ray.plain_inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["image"] == worker["image"]
    assert container["image"].startswith("us-central1-docker.pkg.dev/")
    assert container["resources"]["requests"] == container["resources"]["limits"]
    requests = container["resources"]["requests"]
    assert requests["cpu"].endswith("m") and int(requests["cpu"][:-1]) <= 10
    assert requests["memory"].endswith("Mi") and int(requests["memory"][:-2]) <= 32


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_tolerates_the_gpu_taint_and_on_a4x_the_arm64_taint(stack, mode):
    """The GPU pool's real taint (gpu_node_pool.GPU_TAINT), and GKE's kubernetes.io/arch taint
    where the nodes are arm64; nothing broader (no bare `operator: Exists`)."""
    _, recording = rendered(stack, mode)
    tolerations = _prepull(recording).plain_inputs["spec"]["template"]["spec"]["tolerations"]
    keys = {t["key"] for t in tolerations}
    assert all(t["effect"] == "NoSchedule" and t.get("key") for t in tolerations)
    expected = {GPU_TAINT.key}
    if profile(Target(stack)).arch is Arch.ARM64:
        expected.add("kubernetes.io/arch")
    assert keys == expected


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_selects_the_gpu_nodes_and_the_heads_pool(stack, mode):
    """GPU nodes of the target's accelerator on every target; on a4/a3u also the system pool,
    where the head runs; on a4x not (the head is on a GB200 node, the system pool is amd64).
    Every term names the image's architecture."""
    _, recording = rendered(stack, mode)
    hw = profile(Target(stack))
    spec = _prepull(recording).plain_inputs["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    as_sets = [
        {(e["key"], e["operator"], tuple(e["values"])) for e in t["matchExpressions"]}
        for t in terms
    ]
    arch = ("kubernetes.io/arch", "In", (hw.arch.value,))
    gpu = {("cloud.google.com/gke-accelerator", "In", (hw.gpu_type,)), arch}
    system = {("cloud.google.com/gke-nodepool", "In", (SYSTEM_POOL,)), arch}
    if hw.networking is NodeNetworking.DRANET:
        assert as_sets == [gpu]
    else:
        assert as_sets == [gpu, system]
        [ray] = recording.of_type(RAY_CLUSTER)
        head = ray.plain_inputs["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"]
        assert head == {"cloud.google.com/gke-nodepool": SYSTEM_POOL}


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_starts_after_the_system_pool_and_nothing_waits_for_it(stack, mode):
    """It waits for the system pool (through the cluster's Kubernetes provider) and the mirror,
    never for the GPU pool; everything it waits for the RayCluster waits for too, so it is
    created no later than the RayCluster could be; and no resource waits for it but the
    destroy guard (a slow pull never holds `up`)."""
    _, recording = rendered(stack, mode)
    ds = _prepull(recording)
    before = _waits_for(recording, ds)
    system = recording.one(POOL, "gke-system-pool")
    gpu = recording.one(POOL, "gpu-pool")
    [ray] = recording.of_type(RAY_CLUSTER)
    assert system.urn in before
    assert gpu.urn not in before
    assert recording.one("gcp:artifactregistry/repository:Repository").urn in before
    ray_before = _waits_for(recording, ray)
    assert before <= ray_before | {ds.urn}
    assert gpu.urn in ray_before
    waiting = {
        r.type for r in recording.resources if ds.urn in r.dependencies and r.urn != ds.urn
    }
    assert waiting <= {"pulumi-python:dynamic/verl-gke:DeletionProtection"}


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_daemon_set_validates_strictly(stack, mode):
    """The DaemonSet passes kubernetes-validate (strict) for the cluster's Kubernetes minor."""
    _, recording = rendered(stack, mode)
    [obj] = [
        o for o in recording.kubernetes_objects()
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == image_prepull.PREPULL_NAME
    ]
    k8s_schemas.validate(obj)


@pytest.mark.parametrize(("stack", "mode"), AUTOPILOT, ids=_ids(AUTOPILOT))
def test_no_prepull_on_autopilot(stack, mode):
    """Autopilot makes a node only for the pod that asks for it, which then pulls at once."""
    _, recording = rendered(stack, mode)
    assert not recording.of_type("verl-gke:index:ImagePrepull")
    assert not [r for r in recording.of_type(DAEMON_SET) if r.name == image_prepull.PREPULL_NAME]


# --- capacity timeouts ---------------------------------------------------------------------------


def _pool_timeouts(capacity: Capacity) -> dict | None:
    def program():
        GpuNodePool(
            "gpu",
            GpuNodePoolArgs(
                project="p", region="us-central1", zone="us-central1-b", cluster="c",
                hardware=profile("a4"), nodes=2, capacity=capacity,
                reservation="r" if capacity is Capacity.RESERVATION else None,
            ),
        )

    return mockrun.run(program).one(POOL).options.custom_timeouts


@pytest.mark.parametrize("capacity", list(Capacity), ids=[c.value for c in Capacity])
def test_gpu_pool_create_has_an_explicit_timeout_per_capacity(capacity):
    """Spot fails a stockout after 20 min instead of the provider's 30; flex-start's pool (no
    initial node) 10; a reservation's the provider's 30, stated. Every capacity has one."""
    assert _pool_timeouts(capacity) == {"create": CREATE_TIMEOUTS[capacity]}
    assert CREATE_TIMEOUTS == {
        Capacity.RESERVATION: "30m", Capacity.SPOT: "20m", Capacity.FLEX_START: "10m"
    }


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_shipped_stacks_pool_timeout_follows_their_capacity(stack, mode):
    """The whole program passes the stack's capacity (a reservation in every shipped stack)."""
    inputs, recording = rendered(stack, mode)
    pool = recording.one(POOL, "gpu-pool")
    assert pool.options.custom_timeouts == {"create": CREATE_TIMEOUTS[Capacity.RESERVATION]}


@pytest.mark.parametrize("capacity", list(Capacity), ids=[c.value for c in Capacity])
def test_ray_cluster_wait_is_derived_from_the_capacity(capacity):
    """Flex-start's wait for capacity happens inside the RayCluster's wait: two hours more than
    the image-and-Ray hour that reservation and spot keep (their nodes exist once the pool's
    create has returned). Unchanged for those, so existing stacks see no new annotation."""
    obj = ray_cluster_spec.render_ray_cluster(make_args(Target.A4, capacity=capacity))
    timeout = int(obj["metadata"]["annotations"]["pulumi.com/timeoutSeconds"])
    if capacity is Capacity.FLEX_START:
        assert timeout == 3600 + 7200
    else:
        assert timeout == 3600


# --- the workers' wait for the gIB plugin ----------------------------------------------------


@pytest.mark.parametrize("mode", list(ClusterMode), ids=[m.value for m in ClusterMode])
@pytest.mark.parametrize("target", [Target.A4, Target.A3_ULTRA], ids=["a4", "a3u"])
def test_rdma_vpc_workers_wait_for_the_gib_plugin_nccl_is_told_to_load(target, mode):
    """An init container waits for the very file NCCL_NET_PLUGIN names, on the worker's gib
    mount, with limits equal to requests (the worker pod stays Guaranteed)."""
    spec = worker_group(ray_cluster_spec.render_ray_cluster(make_args(target, mode)))
    [wait] = [c for c in spec["template"]["spec"]["initContainers"] if c["name"] == "wait-for-gib"]
    env = runtime_env(profile(target), profile(target).default_nodes)
    plugin = env.get("env_vars", env)["NCCL_NET_PLUGIN"]
    assert plugin == ray_cluster_spec.GIB_PLUGIN
    assert plugin in wait["command"][-1]
    assert {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True} in wait["volumeMounts"]
    assert wait["resources"]["limits"] == wait["resources"]["requests"]
    assert set(wait["resources"]["limits"]) == {"cpu", "memory"}
    assert wait["image"] == spec["template"]["spec"]["containers"][0]["image"]


def test_a4x_workers_have_no_gib_wait():
    """A4X's plugin comes with DRANET/its own installer and NCCL_NET_PLUGIN is not set there."""
    spec = worker_group(ray_cluster_spec.render_ray_cluster(make_args(Target.A4X)))
    names = [c["name"] for c in spec["template"]["spec"].get("initContainers", [])]
    assert "wait-for-gib" not in names


def _run_wait(monkeypatch, tmp_path: Path, plugin_exists: bool) -> subprocess.CompletedProcess:
    plugin = tmp_path / "lib64" / "libnccl-net_internal.so"
    if plugin_exists:
        plugin.parent.mkdir()
        plugin.write_bytes(b"\x7fELF")
    monkeypatch.setattr(ray_cluster_spec, "GIB_PLUGIN", str(plugin))
    monkeypatch.setattr(ray_cluster_spec, "GIB_WAIT_SECONDS", 2)
    command = ray_cluster_spec._gib_wait("image")["command"]
    return subprocess.run(command, capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"]})


def test_gib_wait_returns_once_the_plugin_is_there(monkeypatch, tmp_path):
    done = _run_wait(monkeypatch, tmp_path, plugin_exists=True)
    assert done.returncode == 0 and done.stderr == ""


def test_gib_wait_is_bounded_and_never_fails_the_pod(monkeypatch, tmp_path):
    """No plugin: it gives up after its bound, says why, and still exits 0 (the check catches a
    plugin NCCL cannot load; a late installer must not fail the worker)."""
    done = _run_wait(monkeypatch, tmp_path, plugin_exists=False)
    assert done.returncode == 0
    assert "starting without it" in done.stderr


def test_ray_cluster_with_the_gib_wait_validates_against_the_crd():
    for target in (Target.A4, Target.A3_ULTRA, Target.A4X):
        k8s_schemas.validate(ray_cluster_spec.render_ray_cluster(make_args(target)))


# --- the throw-away default pool ----------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES, ids=_ids(STACK_MODES))
def test_default_pool_is_one_zone_at_creation_only(stack, mode):
    """Standard: the cluster's node_locations is the GPU zone (a one-node transient default
    pool), ignored after creation so an existing cluster sees no change. Autopilot: unset."""
    inputs, recording = rendered(stack, mode)
    [cluster] = recording.of_type(CLUSTER)
    if mode == "autopilot":
        assert "nodeLocations" not in cluster.plain_inputs
        assert "nodeLocations" not in cluster.ignore_changes
        return
    system = recording.one(POOL, "gke-system-pool").plain_inputs
    assert cluster.plain_inputs["nodeLocations"] == system["nodeLocations"]
    assert len(cluster.plain_inputs["nodeLocations"]) == 1
    assert cluster.plain_inputs["initialNodeCount"] == 1
    assert "nodeLocations" in cluster.ignore_changes


# --- the cluster check's read floor ------------------------------------------------------------


def _script_defaults() -> dict[str, object]:
    tree = ast.parse(cluster_check.SCRIPT.read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if isinstance(default, ast.Constant):
                found[node.args[0].value.lstrip("-")] = default.value
    return found


def test_read_floor_is_above_a_mount_without_parallel_downloads():
    """400 MiB/s: above the ~150-310 MB/s GCS FUSE reads without parallel downloads (ai-on-gke
    startup-latency.md), at a 3x margin under their 9x claim (gcsfuse README); 66 GB then loads
    in under three minutes."""
    assert MIN_READ_MBPS == 400.0
    assert 66e9 / 2**20 / MIN_READ_MBPS / 60 < 3
    assert cluster_check.expected(_check_args())["min_read_mbps"] == MIN_READ_MBPS


def test_read_is_long_enough_for_parallel_downloads_and_bounded_in_time():
    """Two ~3.9 GB shards (parallel downloads split reads of files over 1 GB), at most 60 s: at
    the floor the read takes ~20 s, as the 4 GiB at 200 did (the critical path's estimate)."""
    defaults = _script_defaults()
    assert defaults["read-mb"] == 8192
    assert defaults["read-seconds"] == 60.0
    assert defaults["read-mb"] / MIN_READ_MBPS <= 30


def test_read_runs_on_a_gpu_node_not_on_the_head():
    """The read is a Ray task pinned to a node with GPUs (where verl's reader and the local-SSD
    file cache are), not the driver on the head (a4/a3u: the system pool's balanced PD)."""
    source = cluster_check.SCRIPT.read_text()
    tree = ast.parse(source)
    remote = {
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
        and any(getattr(d, "attr", getattr(d, "id", None)) == "remote" for d in n.decorator_list)
    }
    assert "_read" in remote
    throughput = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "read_throughput"
    )
    body = ast.unparse(throughput)
    assert "NodeAffinitySchedulingStrategy" in body and "'GPU'" in body
    assert "_read.options(" in body


def _check_args() -> cluster_check.ClusterCheckArgs:
    hw = profile(Target.A4)
    return cluster_check.ClusterCheckArgs(
        profile=hw, nodes=2, model_path="/data/Qwen2.5-32B-Instruct", runtime_env={},
        namespace="default", head_service="h",
    )


def test_pins_still_name_the_image_the_prepull_pulls():
    """The pre-pull pulls pins.VERL_IMAGES[arch] (through the mirror) when the job names none."""
    _, recording = rendered("a4", "standard")
    image = _prepull(recording).plain_inputs["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith("/" + pins.VERL_IMAGES[Arch.AMD64])


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_read_is_placed_on_a_gpu_node_with_nccl_and_anywhere_with_gloo(monkeypatch, backend):
    """With GPUs, the read task is pinned (hard affinity) to a GPU node, never to the head (no
    GPU resource); under gloo (no GPU node, the tests' CPU Ray) Ray places it."""
    from components.check import cluster_check_script as script

    seen = {}

    class Read:
        def options(self, **options):
            seen.update(options)
            return self

        def remote(self, path, limit_mb, limit_s):
            seen["args"] = (path, limit_mb, limit_s)
            return "ref"

    class FakeRay:
        @staticmethod
        def nodes():
            head = {"Alive": True, "NodeID": "head", "Resources": {"CPU": 0}}
            gpus = [{"Alive": True, "NodeID": f"w{i}", "Resources": {"GPU": 8}} for i in range(2)]
            return [head, *gpus] if backend == "nccl" else [head]

        @staticmethod
        def get(ref):
            return {"path": "/data/m", "bytes": 1, "mbps": 1.0}

    monkeypatch.setattr(script, "ray", FakeRay)
    monkeypatch.setattr(script, "_read", Read())
    script.read_throughput(backend, "/data/m", 8192, 60.0)
    assert seen["args"] == ("/data/m", 8192, 60.0)
    strategy = seen.get("scheduling_strategy")
    if backend == "nccl":
        assert strategy.node_id == "w0" and strategy.soft is False
    else:
        assert strategy is None


@pytest.mark.parametrize(("stack", "mode"), STANDARD, ids=_ids(STANDARD))
def test_prepull_tolerates_exactly_what_the_ray_workers_tolerate(stack, mode):
    """Every GPU node a worker can land on, the pre-pull can land on first: the same taints."""
    _, recording = rendered(stack, mode)
    [ray] = recording.of_type(RAY_CLUSTER)
    worker = ray.plain_inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"]
    prepull = _prepull(recording).plain_inputs["spec"]["template"]["spec"]["tolerations"]
    as_set = lambda ts: {(t["key"], t["operator"], t["effect"]) for t in ts}  # noqa: E731
    assert as_set(prepull) == as_set(worker)
