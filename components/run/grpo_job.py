"""GrpoJob: verl's GRPO training submitted to the RayCluster as a Ray job, tracked as a resource.

The component takes the run resolved once (components/runspec/run.py `ResolvedRun`: overrides,
entrypoint, runtime env, the run's checkpoint directory, its problems), adds a deterministic
submission id and the export's command and resources, so the plan shows the exact command, and
registers one dynamic resource whose provider talks to
Ray's Jobs API (components/run/job_provider.py). What the provider and the in-cluster supervisor
agree on to never run two attempts at once is components/supervisor/protocol.py; the export's placement
and memory check, components/run/export.py. It does not create the RayCluster, the bucket or
any Kubernetes object (the supervisor is components/run/supervision.py), and it never exposes
the dashboard (see components/run/ray_access.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pulumi
import pulumi.dynamic as dynamic

from components.facts.layout import DASHBOARD_PORT
from components.options import child_options
from components.run import export
from components.run.job_outputs import COMPONENT, JOB_OUTPUTS
# Re-exported: the ClusterCheck, tools/curve.py and tools/force_new.py use them from here.
from components.run.job_provider import (  # noqa: F401
    OUTPUT_KEYS,
    PROVIDER_VERSION,
    REPLACE_KEYS as _REPLACE_KEYS,  # tools/force_new.py reads the replacing inputs from here
    GrpoJobProvider,
    Progress,
    poll,
)
from components.supervisor.protocol import RESOURCE_KEY, STACK_KEY, last_metrics  # noqa: F401
from components.forms.pulumi_forms import Key
from components.runspec.run import EXPORT_SUBDIR, ResolvedRun, digest

@dataclasses.dataclass(frozen=True)
class GrpoJobArgs:
    """What the GrpoJob needs from the stack.

    `head_service` and `kubeconfig` should be outputs of the RayCluster and the GKE cluster, so
    that the job is created after them and deleted before them; `staged` an output of the
    staging Job, so that a re-staging stops the job before it touches the bucket.
    """

    # The run, resolved once (StackConfig.runs, or the model check's for the model's shape): its
    # command, env, directory and problems, for the target's hardware and the RayCluster's nodes.
    run: ResolvedRun
    checkpoint_uri: pulumi.Input[str]  # gs://<bucket>/checkpoints: the root of every run's dir
    namespace: str  # where the RayCluster runs
    head_service: pulumi.Input[str]  # the RayCluster's head Service, <raycluster>-head-svc
    # The GKE kubeconfig (a secret). Its user is the gke-gcloud-auth-plugin exec entry, so it
    # holds no token; required unless run.dashboardAddress is set.
    kubeconfig: pulumi.Input[str] | None = None
    dashboard_port: int = DASHBOARD_PORT  # the head Service's dashboard port
    # The staging Job's name (None when staging is skipped): it changes whenever staging would
    # rewrite files under /data, and the job is replaced, i.e. stopped first, when it does.
    staged: pulumi.Input[str | None] = None
    # The ClusterCheck's id (None when skipped): a re-check replaces, i.e. first stops, the job,
    # since both need every GPU; the job then resumes from its checkpoints.
    checked: pulumi.Input[str | None] = None
    # The RayCluster's name and the supervisor's state ConfigMap (components/run/supervision.py
    # state_name): where the provider learns that the supervisor released the cluster after the
    # run, and what it did. None without a supervisor.
    ray_cluster: pulumi.Input[str] | None = None
    supervisor_state: str | None = None
    # The RayCluster's spec digest (VerlRayCluster.pods_digest): the Ray pods are recreated when
    # it changes, which ends the live attempt, so the run is replaced (stopped first), resuming
    # from its checkpoints when its config is the same.
    ray_pods: pulumi.Input[str] | None = None
    # Parameters of the trained model, for the export's memory (components/run/export.py);
    # default: the run's model's shape, else export.DEFAULT_MODEL_PARAMETERS.
    model_parameters: float | None = None

    @property
    def parameters(self) -> float:
        if self.model_parameters is not None:
            return self.model_parameters
        shape = self.run.model
        return shape.parameter_count if shape else export.DEFAULT_MODEL_PARAMETERS


class GrpoJob(pulumi.ComponentResource):
    """The GRPO training run on the stack's RayCluster. Outputs are Ray's view of the job, one
    attribute each of components/run/job_outputs.py JOB_OUTPUTS (typed here)."""

    submission_id: pulumi.Output[str]
    status: pulumi.Output[str]
    start_time: pulumi.Output[str | None]
    end_time: pulumi.Output[str | None]
    dashboard_path: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]  # the run's own directory, gs://<bucket>/checkpoints/<run>
    run_dir: str  # <runName>-<N>gpu-<digest>
    model_uri: pulumi.Output[str | None]  # <checkpoint_uri>/huggingface; None without export
    export_status: pulumi.Output[str | None]  # the export job's status once it ran
    entrypoint: pulumi.Output[str]
    metrics: pulumi.Output[dict[str, float]]
    attempts: pulumi.Output[int | None]  # attempts used, the first one included
    failures: pulumi.Output[int | None]  # ended attempts that failed (against maxRetries)
    preemptions: pulumi.Output[int | None]  # ended by a lost node (against maxPreemptions)
    last_failure: pulumi.Output[str | None]  # how the last attempt that ended unsuccessfully did
    state: pulumi.Output[str | None]  # one line: status, step, attempt, export, release
    first_step_s: pulumi.Output[float | None]  # from the attempt's start to verl's first step
    timeline: pulumi.Output[dict[str, str | None] | None]  # milestones of `up` (timeline.py)
    # What the in-cluster supervisor submits, the same as the provider (plain data, no secret).
    supervision_spec: dict[str, Any]

    def __init__(
        self, name: str, args: GrpoJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:index:GrpoJob", name, None, opts)
        _validate(args)
        run = args.run
        command, run_dir, env = run.entrypoint, run.run_dir, run.runtime_env
        run_uri = pulumi.Output.from_input(args.checkpoint_uri).apply(
            lambda root: f"{root.rstrip('/')}/{run_dir}"
        )
        exporting = run.lifecycle.export_model
        inputs = {
            "submission_id": submission_id(pulumi.get_stack(), name, command, env),
            "entrypoint": command,
            "runtime_env": env,
            "staged": args.staged,
            "checked": args.checked,
            "ray_pods": args.ray_pods,
            "metadata": _metadata(args, name),
            "wait_for": run.lifecycle.wait_for.value,
            "timeout_s": run.lifecycle.timeout_minutes * 60,
            "max_retries": run.lifecycle.max_retries,
            "max_preemptions": run.lifecycle.max_preemptions,
            "deadline_s": run.lifecycle.deadline_hours * 3600,
            "access": _access(args),
            "checkpoint_uri": run_uri,
            "run_dir": run_dir,
            "export_entrypoint": run.export_entrypoint,
            "export_resources": (
                export.resources(args.parameters, run.world_size) if exporting else None
            ),
            "model_uri": (
                run_uri.apply(lambda uri: f"{uri}/{EXPORT_SUBDIR}") if exporting else None
            ),
            "version": PROVIDER_VERSION,
            "job_state": "",
        }
        job = _GrpoRun(
            f"{name}-run",
            inputs,
            # The engine echoes secret inputs as secret outputs; this makes sure of it for the
            # kubeconfig nested in `access`.
            child_options(self, opts, additional_secret_outputs=["access"]),
        )
        self.supervision_spec = {
            key: inputs[key] for key in ("submission_id", "entrypoint", "runtime_env", "metadata")
        }
        self.supervision_spec["export"] = {
            "entrypoint": inputs["export_entrypoint"], "resources": inputs["export_resources"],
        } if exporting else None
        computed = {"run_dir": run_dir}
        for output in JOB_OUTPUTS:
            value = computed[output.name] if output.source == COMPONENT else getattr(job, output.name)
            setattr(self, output.name, value)
        self.register_outputs(self.outputs())

    def outputs(self) -> dict[str, Any]:
        """Every output by its camelCase name (components/run/job_outputs.py): what the
        component registers, and the stack's `job` output."""
        return {output.key: getattr(self, output.name) for output in JOB_OUTPUTS}


def _validate(args: GrpoJobArgs) -> None:
    run = args.run
    problems = list(run.problems)
    if run.lifecycle.export_model:
        problems += export.memory_problems(
            run.profile, args.parameters, run.world_size, str(Key("job.exportModel")),
        )
    if args.kubeconfig is None and run.lifecycle.dashboard_address is None:
        problems.append(
            f"GrpoJobArgs.kubeconfig is None and {Key('job.dashboardAddress')} is unset: pass "
            "the cluster's kubeconfig to port-forward to the head, or set dashboardAddress"
        )
    if problems:
        raise ValueError("invalid GRPO job:\n- " + "\n- ".join(problems))


def submission_id(stack: str, name: str, command: str, env: dict) -> str:
    """verl-gke-<stack>-<name>-<12 hex of the run's config>: same config, same id."""
    return deterministic_id(stack, name, {"entrypoint": command, "runtime_env": env})


def deterministic_id(stack: str, name: str, config: dict[str, Any]) -> str:
    """verl-gke-<stack>-<name>-<12 hex of `config`>: the Ray submission id of a resource, the
    same for the same config, so a repeated `pulumi up` finds its job instead of adding one."""
    return "-".join(["verl-gke", slug(stack), slug(name), digest(config)])


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


def _metadata(args: GrpoJobArgs, name: str) -> dict[str, str]:
    return {
        **args.run.lifecycle.metadata,
        STACK_KEY: pulumi.get_stack(),
        RESOURCE_KEY: name,
        "verl-gke-target": args.run.profile.target.value,
    }


def _access(args: GrpoJobArgs) -> dict[str, Any]:
    access = access_inputs(args.run.lifecycle.dashboard_address, args.kubeconfig, args.namespace,
                           args.head_service, args.dashboard_port)
    if "kubeconfig" in access and args.ray_cluster is not None and args.supervisor_state:
        access.update(ray_cluster=args.ray_cluster, state=args.supervisor_state)
    return access


def access_inputs(
    address: str | None, kubeconfig: pulumi.Input[str] | None, namespace: str,
    service: pulumi.Input[str], port: int,
) -> dict[str, Any]:
    """How a provider reaches the dashboard (ray_access.open_dashboard); the kubeconfig secret."""
    if address is not None:
        return {"address": address}
    return {
        "kubeconfig": pulumi.Output.secret(kubeconfig),
        "namespace": namespace,
        "service": service,
        "port": port,
    }


class _GrpoRun(dynamic.Resource, module="verl-gke", name="GrpoRun"):
    """The dynamic resource; a subclass because the SDK's mocks reject a bare dynamic.Resource.
    Its properties (each an Output attribute) are its inputs and the provider's OUTPUT_KEYS."""

    def __init__(self, name: str, inputs: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
        outputs = dict.fromkeys(OUTPUT_KEYS)
        super().__init__(GrpoJobProvider(), name, {**outputs, **inputs}, opts)
