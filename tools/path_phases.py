"""What the plan holds, and each resource's phases given it (tools/critical_path.py).

`facts` reads the offline plan (and the code's constants) for what sets the figures: the
levers (the pre-pull DaemonSet, an image-streaming prewarm, the default pool's size), the
capacity mode and its timeouts, image streaming on the GPU nodes, the run's validation pass
and its first step (tools/step_model.py). The `*_duration` functions turn those facts into the
phases of the Cluster, the GPU pool, the RayCluster and the run; tools/path_figures.py holds
each figure and its source.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

from components.cluster.gke_cluster import SYSTEM_POOL
from components.facts import expectations
from tools import mockrun
from tools.path_figures import (
    FINAL, RAY_CLUSTER, NODE_POOL, GPU_POOL, CLUSTER, DAEMON_SET, COMPUTE_DOMAIN, PREPULL,
    PREWARM, REGISTERED, PULLED, RAY_READY, FIRST_STEP, Phase, Duration, one, seconds,
    MODEL_GB, CPU_NODE_BOOT, POOL_OPERATION, staging_duration, cluster_check_duration,
    CONTROL_PLANE, DEFAULT_ZONES, GPU_VMS, DRIVER, FIRST_PULL, FIRST_PULL_SOURCE,
    IN_REGION_PULL, IN_REGION_SOURCE, STREAMED, STREAMED_SOURCE, RAY_START,
    PROVIDER_POOL_TIMEOUT_MIN, IMPORTS, LAZY_READS, FSDP, VLLM, WARM_UP, GSM8K_TEST, DEFAULT,
    STAGING_JOB, CLUSTER_CHECK, DURATIONS,
)


@dataclass(frozen=True)
class Facts:
    """What the plan (and the code's constants) say about the phases' figures."""

    target: str
    autopilot: bool
    capacity: str  # reservation, spot, flex-start, or autopilot
    streaming: bool  # image streaming on the GPU nodes (gcfsConfig; Autopilot's default)
    prepull: bool  # the pre-pull DaemonSet is in the plan
    prepull_head: bool  # it also pulls on the system pool, where the head runs (a4/a3u)
    prewarm: bool  # the image-streaming prewarm is in the plan
    warm_image: bool  # an earlier pull filled the project's streaming cache (--warm-image)
    default_pool_nodes: int  # the Cluster's transient default pool (0 on Autopilot)
    pool_timeout_min: float | None  # the spot GPU pool's create timeout
    ray_timeout_min: float | None  # the RayCluster's wait (pulumi.com/timeoutSeconds)
    val_before_train: bool
    post_start: bool  # the Ray pods run a postStart command (A4X's pip install)
    compute_domain: bool  # A4X's IMEX daemons start when the workers' claims are prepared
    first_step: Phase
    validation: Phase | None


def facts(recording: mockrun.Recording, config=None, warm_image: bool = False) -> Facts:
    """Read the plan: the levers it holds, its capacity, its run (validation, first step).
    `config` is the stack's config (step_model.stack_config) for its own job; without it, the
    target's default job at the plan's node count."""
    hardware = recording.plain_outputs()["hardware"]
    autopilot = is_autopilot(recording)
    pools = [r for r in recording.of_type(NODE_POOL) if r.name == GPU_POOL.split(" ")[1]]
    node_config = pools[0].plain_inputs.get("nodeConfig", {}) if pools else {}
    capacity = ("autopilot" if autopilot else "spot" if node_config.get("spot")
                else "flex-start" if node_config.get("flexStart") else "reservation")
    streaming = autopilot or bool((node_config.get("gcfsConfig") or {}).get("enabled"))
    cluster = recording.one(CLUSTER).plain_inputs
    zones = len(cluster.get("nodeLocations") or []) or DEFAULT_ZONES
    default_pool = 0 if autopilot else int(cluster.get("initialNodeCount") or 0) * zones
    timeout = (pools[0].options.custom_timeouts or {}).get("create") if pools else None
    ray = recording.one(RAY_CLUSTER)
    annotations = (ray.plain_inputs.get("metadata") or {}).get("annotations") or {}
    ray_timeout = annotations.get("pulumi.com/timeoutSeconds")
    entrypoint = recording.one(FINAL).plain_inputs["entrypoint"]
    found = re.search(r"trainer\.val_before_train=(\w+)", entrypoint)
    # Unset: verl's default, True (verl/trainer/config/ppo_trainer.yaml:178).
    val = found is None or found.group(1).lower() == "true"
    prepulls = [r for r in recording.of_type(DAEMON_SET) if _is_prepull(r)]
    first_step, validation = _run_figures(hardware["target"], hardware["nodes"], config, val)
    return Facts(
        target=hardware["target"], autopilot=autopilot, capacity=capacity, streaming=streaming,
        prepull=bool(prepulls),
        prepull_head=any(SYSTEM_POOL in json.dumps(r.plain_inputs) for r in prepulls),
        prewarm=any(r.custom and r.name == PREWARM for r in recording.resources),
        warm_image=warm_image, default_pool_nodes=default_pool,
        pool_timeout_min=_minutes(timeout) if timeout else None,
        ray_timeout_min=float(ray_timeout) / 60 if ray_timeout else None,
        val_before_train=val,
        post_start="postStart" in json.dumps(ray.plain_inputs),
        compute_domain=bool(recording.of_type(COMPUTE_DOMAIN)),
        first_step=first_step, validation=validation,
    )


def _is_prepull(resource: mockrun.Registered) -> bool:
    meta = resource.plain_inputs.get("metadata") or {}
    return PREPULL in (resource.name, meta.get("name"))


def _minutes(timeout: str) -> float:
    """A Pulumi custom timeout ("45m", "1h30m", "90s") in minutes."""
    units = {"h": 60.0, "m": 1.0, "s": 1 / 60}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([hms])", timeout))


def _run_figures(target: str, nodes: int, config, val: bool) -> tuple[Phase, Phase | None]:
    """The first step and the validation pass, from tools/step_model.py for the stack's job."""
    from components.facts.hardware import profile
    from components.facts.models import DEFAULT_MODEL
    from components.runspec.run import GrpoRunConfig
    from tools import step_model

    hw = config.hardware if config is not None else profile(target)
    run = config.run if config is not None else GrpoRunConfig()
    nodes = config.nodes if config is not None else nodes
    row = step_model.run_row(hw, nodes, run, step_model.program_mnnvl(hw))
    if "refused" in row:
        return (Phase("first rollout and update", 1.5, "assumption: the step model refuses this "
                      f"job ({row['refused']})", FIRST_STEP), None)
    # Step 1 saves no checkpoint (save_freq > 1): the step without its checkpoint share.
    step_s = row["step"] - row["checkpoint"]
    first = Phase("first rollout and update", round(step_s / 60, 2),
                  f"estimate: tools/step_model.py, {step_s:.0f} s for {target} at {nodes} nodes "
                  "(the step without its checkpoint share)", FIRST_STEP)
    if not val:
        return first, None
    settings = dataclasses.replace(row["settings"], train_batch=GSM8K_TEST, rollout_n=1)
    val_s = step_model.step(hw, nodes, settings, DEFAULT_MODEL)["rollout"]
    return first, Phase(
        "validation before step 1", round(val_s / 60, 2),
        f"estimate: tools/step_model.py's rollout of GSM8K's {GSM8K_TEST} test prompts, one "
        f"sample each, {val_s:.0f} s (val_before_train is True: verl's default where the job "
        "leaves it unset, verl/trainer/config/ppo_trainer.yaml:178)", FIRST_STEP)


def is_autopilot(recording: mockrun.Recording) -> bool:
    """Autopilot plans have no node pools of their own."""
    return not recording.of_type(NODE_POOL)


def cluster_duration(f: Facts) -> Duration:
    """The control plane, and on Standard the default pool GKE creates with it and the
    provider deletes inside the same create (remove_default_node_pool, components/cluster/gke_cluster.py)."""
    if f.autopilot:
        return Duration((CONTROL_PLANE,))
    nodes = f.default_pool_nodes
    delete = 0.5 if nodes <= 1 else 1.0
    return Duration((
        CONTROL_PLANE,
        Phase(f"transient default pool: {nodes} node{'s' * (nodes != 1)} boot",
              CPU_NODE_BOOT.minutes, CPU_NODE_BOOT.source + ", in parallel", REGISTERED),
        Phase(f"transient default pool: {nodes} node{'s' * (nodes != 1)} deleted", delete,
              "assumption: " + ("one node drained and deleted" if nodes <= 1 else
                                f"{nodes} nodes, one per zone, drained and deleted; a one-node "
                                "pool (the cluster's node_locations = [zone]) would take 0.5"),
              REGISTERED),
    ))


def capacity_phase(f: Facts) -> Phase | None:
    """The capacity wait: none with a reservation, unbounded otherwise (0 when capacity is
    there, up to the timeout the plan sets, then `up` fails)."""
    if f.capacity in ("reservation", "autopilot"):
        return None
    if f.capacity == "spot":
        limit = f.pool_timeout_min or PROVIDER_POOL_TIMEOUT_MIN
        whose = ("the pool's own create timeout" if f.pool_timeout_min else
                 "the provider's default create timeout (terraform-provider-google-beta "
                 "resource_container_node_pool.go), the program setting none")
        return Phase("spot capacity wait", 0.0,
                     f"no bound: 0 when the zone has spot capacity; a stockout holds the pool "
                     f"create for {limit:g} min ({whose}), then `up` fails", REGISTERED)
    limit = f.ray_timeout_min
    return Phase("flex-start capacity wait", 0.0,
                 "no bound: flex-start VMs come \"when available\" (cloud.google.com/"
                 "kubernetes-engine/docs/concepts/dws); the pool returns with no node and the "
                 f"RayCluster waits up to {limit:g} min (its pulumi.com/timeoutSeconds), then "
                 "`up` fails", REGISTERED)


def gpu_pool_duration(f: Facts) -> Duration:
    wait = capacity_phase(f)
    if f.capacity == "flex-start":
        # initialNodeCount 0: the pool returns at once; the VMs come in the RayCluster's wait.
        return Duration((Phase("pool created with no node (flex-start)", POOL_OPERATION.minutes,
                               POOL_OPERATION.source, REGISTERED),))
    return Duration(tuple(p for p in (wait, GPU_VMS) if p))


def streamed(f: Facts) -> bool:
    """Whether the GPU nodes stream the image: streaming on, and the image in the streaming
    cache (prewarmed by PREWARM, or --warm-image after an earlier pull in the project)."""
    return f.streaming and (f.prewarm or f.warm_image)


def image_phase(f: Facts, pods_start: float, registered: float | None,
                prepull_created: float | None, prewarm_done: float | None) -> Phase:
    """How long the Ray pods wait for the verl image once they are scheduled (`pods_start`).

    Streamed (a prewarmed or warm cache): STREAMED once the prewarm is done. Pulled: from node
    registration when the pre-pull DaemonSet is in the plan, else from `pods_start`; a full
    first pull (FIRST_PULL) through the fresh remote repository, or, where the DaemonSet's pod on
    the system pool (a4/a3u: the head's) started the repository's fetch from Docker Hub before
    the GPU nodes registered, an in-region pull (IN_REGION_PULL) that cannot end before that
    first pull does. The head's own pull (a4/a3u, system pool) runs alongside and is counted
    when it ends later."""
    arm = (" (image streaming on arm64 nodes: not checked, an assumption)"
           if f.target == "a4x" else "")
    if streamed(f):
        ready = max(pods_start, prewarm_done or 0.0) + STREAMED
        why = ("prewarmed stream: verl-image-prewarm put the image into the streaming cache"
               if f.prewarm else "streamed from a warm cache: an earlier pull in this project "
               "(--warm-image)")
        waited = (f"; the prewarm is done at {prewarm_done:.1f} min" if prewarm_done else "")
        return Phase(f"image: {why}", round(ready - pods_start, 2),
                     STREAMED_SOURCE + arm + waited, PULLED)
    prepull = f.prepull and registered is not None and prepull_created is not None
    first = prepull_created if prepull and f.prepull_head else None
    if prepull:
        began = max(registered, prepull_created)
        if first is not None and first < began:
            ready = max(began + IN_REGION_PULL, first + FIRST_PULL)
            how = (f"pulled from node registration ({began:.1f} min) by {PREPULL}, from the "
                   f"in-region repository its system-pool pod started filling at {first:.1f} "
                   "min")
            source = IN_REGION_SOURCE + f"; no sooner than that first pull ({FIRST_PULL:g} min)"
        else:
            ready = began + FIRST_PULL
            how = f"first full pull from node registration ({began:.1f} min) by {PREPULL}"
            source = FIRST_PULL_SOURCE
        head = (first + FIRST_PULL) if first is not None else None
    else:
        ready = pods_start + FIRST_PULL
        how = f"first full pull (no {PREPULL}: it starts once the pods are scheduled)"
        source = FIRST_PULL_SOURCE
        head = None
    note = ""
    if head is not None and head > ready:
        ready, note = head, f"; the head's pull on the system pool ends later, at {head:.1f} min"
    if f.prewarm and not f.streaming:
        note += "; the prewarm serves image streaming only, off on these nodes"
    left = max(0.0, ready - pods_start)
    return Phase(f"image: {how}: {left:.1f} min left when the pods start", round(left, 2),
                 source + arm + note, PULLED)


def ray_cluster_duration(f: Facts, start: float, registered: float | None,
                         prepull_created: float | None, prewarm_done: float | None) -> Duration:
    """The RayCluster from its creation to KubeRay's ready: on Autopilot (and flex-start) the
    GPU nodes first; the driver; the image; IMEX and postStart where the plan has them; Ray."""
    phases: list[Phase] = []
    if f.autopilot:
        phases.append(Phase("Autopilot provisions GPU nodes for the pending pods", 0.5,
                            "assumption: the autoscaler's decision", REGISTERED))
    if f.autopilot or f.capacity == "flex-start":
        wait = capacity_phase(f)
        phases += [p for p in (wait, GPU_VMS) if p]
        registered = start + sum(p.minutes for p in phases)
    phases.append(DRIVER)
    pods_start = start + sum(p.minutes for p in phases)  # a worker is scheduled on its GPUs
    phases.append(image_phase(f, pods_start, registered, prepull_created, prewarm_done))
    if f.compute_domain:
        phases.append(Phase("IMEX daemons for the ComputeDomain", 0.5,
                            "assumption: under a minute", RAY_READY))
    if f.post_start:
        phases.append(Phase("postStart: pip install from PyPI through Cloud NAT", 0.3,
                            "assumption: one small wheel", RAY_READY))
    phases.append(RAY_START)
    return Duration(tuple(phases))


def run_duration(f: Facts) -> Duration:
    """The GRPO job from its submission to verl's first step. The weight read is bounded by
    the cluster check's read floor (expectations.MIN_READ_MBPS, read when called): the check
    fails a mount that reads slower, so the read takes at most this long."""
    read_s = MODEL_GB * 1e9 / (expectations.MIN_READ_MBPS * 2**20)
    phases = [IMPORTS, *([LAZY_READS] if streamed(f) else []), Phase(
        f"actor rank 0 reads the {MODEL_GB:g} GB of weights once", round(read_s / 60, 2),
        f"estimate: at the cluster check's {expectations.MIN_READ_MBPS:g} MiB/s read floor "
        f"(expectations.MIN_READ_MBPS), a bound: the check fails a slower mount; {seconds(read_s)}"
        " (vLLM loads dummy weights: load_format dummy, verl/trainer/config/rollout/"
        "rollout.yaml; rank 0 reads and broadcasts, verl/utils/fsdp_utils.py)", FIRST_STEP,
    ), FSDP, VLLM]
    if f.validation is not None:
        phases.append(f.validation)
    phases += [f.first_step, WARM_UP]
    return Duration(tuple(phases))


def prewarm_duration() -> Duration:
    return one(FIRST_PULL, "assumption: as long as a first pull: the repository fetches every "
               "layer from Docker Hub into the streaming cache (docs.cloud.google.com/"
               "artifact-registry/docs/prewarm-images)", what="image fetched into the "
               "image-streaming cache")


def duration(resource: mockrun.Registered, f: Facts) -> Duration:
    """A resource's duration, except the RayCluster's, which depends on when others end."""
    if not resource.custom:
        return Duration(())
    key = f"{resource.type} {resource.name}"
    if key == STAGING_JOB:
        return staging_duration(f.autopilot)
    if resource.type == CLUSTER_CHECK:
        return cluster_check_duration(f.target)
    if resource.type == FINAL:
        return run_duration(f)
    if resource.type == CLUSTER:
        return cluster_duration(f)
    if key == GPU_POOL:
        return gpu_pool_duration(f)
    if resource.name == PREWARM:
        return prewarm_duration()
    return DURATIONS.get(key, DURATIONS.get(resource.type, DEFAULT))

