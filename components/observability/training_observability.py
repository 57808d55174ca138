"""TrainingObservability: log-based training metrics, a dashboard and alerts for one stack.

- One `gcp.logging.Metric` per verl value the dashboard charts (step, reward, response length,
  step time, throughput, policy entropy, PPO clip fraction: DELTA DISTRIBUTION with a value
  extractor and a `run` label), and three counters (steps logged, NaN rewards, failed
  entrypoints), all over the lines the Ray log shipper sidecar prints (log_shipper.py,
  training_log.py).
- One `gcp.monitoring.Dashboard` (dashboard.py): training metrics per run, GPU utilisation,
  memory and power per node, GPU node count, pod restarts in the namespace, Ray metrics.
- Seven `gcp.monitoring.AlertPolicy`s: the job failed, GPUs idle while the job runs, GPU
  workers up with no run on them (a forgotten cluster), no new step for
  `verl-gke:noStepAlertMinutes`, a NaN reward, and two signs of policy collapse (entropy near
  zero, a high PPO clip fraction); each notifies
  `verl-gke:alertNotificationChannel` when it is set (without one they still open incidents
  on the console).

It creates nothing in the cluster and reads no config: the scope comes in through the args.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.observability import dashboard as dashboard_body
from components.observability import log_metrics
from components.observability.dashboard import DCGM_METRICS
from components.observability.scope import Scope
from components.observability.training_log import Kind, LogMetric, log_metrics as all_metrics
from components.options import child_options, fixed_name
from components.forms.pulumi_forms import Key

# GPU utilisation under this percentage, for this long, while verl's TaskRunner actor is alive,
# means the run is stuck (an NCCL hang, a dead rollout worker), not slow.
IDLE_GPU_PERCENT = 10
IDLE_GPU_MINUTES = 15
# GPU nodes and the RayCluster's pods up this long with no TaskRunner alive: nobody's run is on
# the GPUs. An hour covers the gaps a live run has without a TaskRunner: a resubmission (two
# supervisor ticks, 4 min) and the export (minutes; it runs no TaskRunner).
UNUSED_GPU_MINUTES = 60

# The signs of policy collapse, over the mean of the steps logged in the last COLLAPSE_MINUTES.
# Starting points, not measured on this program's models: an instruct model under GRPO starts
# with a token entropy of a few tenths of a nat and loses it slowly; near zero it samples one
# answer per prompt, GRPO's group advantages vanish and the run learns nothing. A PPO clip
# fraction of a few percent is ordinary (the clip bounds only the tokens whose ratio left
# [1 - eps, 1 + eps]); a fifth of the tokens means each update moves the policy further than the
# clip range allows. Tune them per model from the dashboard's two charts.
ENTROPY_FLOOR = 0.05
CLIP_FRACTION_CEILING = 0.2
COLLAPSE_MINUTES = 15


@dataclass(frozen=True)
class TrainingObservabilityArgs:
    """scope: the cluster and namespace the job runs in.
    target: the hardware target (a4, a3u, a4x), shown in the dashboard's title.
    notification_channel: `projects/<p>/notificationChannels/<id>` for every alert; None: none.
    no_step_minutes: how long without a new step line before the no-step alert fires (>= 2).
    labels: the stack's resource labels, put on the alert policies (`user_labels`, the one
        label field of the three resource types), so that incidents say which stack they are.
    log_alerts_after: what the alert policies on log-based metrics wait for besides their
        metrics. Cloud Monitoring answers 404 on a condition over a log-based metric until the
        metric's descriptor exists, "up to 10 minutes" after the metric was created, and the
        provider does not retry that error (terraform-provider-google
        resource_monitoring_alert_policy.go retries only IsMonitoringConcurrentEditError;
        hashicorp/terraform-provider-google#11102), so the first `up` would stop there. Pass
        something that takes longer and comes before any run can fail: the RayCluster, ready
        only after the cluster, its nodes and its pods (__main__.py). Default: nothing.
    """

    scope: Scope
    target: str
    notification_channel: str | None = None
    no_step_minutes: int = 60
    labels: Mapping[str, str] = field(default_factory=dict)
    log_alerts_after: tuple[pulumi.Resource, ...] = ()

    def __post_init__(self) -> None:
        if self.no_step_minutes < 2:
            # MetricAbsence.duration: "The minimum value of this field is 120 seconds"
            # (monitoring.v3.json discovery document).
            raise ValueError(f"no_step_minutes = {self.no_step_minutes}: use 2 or more")


class TrainingObservability(pulumi.ComponentResource):
    metrics: dict[str, gcp.logging.Metric]
    dashboard: gcp.monitoring.Dashboard
    alerts: dict[str, gcp.monitoring.AlertPolicy]
    dashboard_url: pulumi.Output[str]
    logs_url: str

    def __init__(
        self, name: str, args: TrainingObservabilityArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("verl-gke:index:TrainingObservability", name, None, opts)
        scope = args.scope
        child = child_options(self, opts)
        specs = {m.key: m for m in all_metrics()}
        # A log-based metric is named by the program: one name, one metric (fixed_name).
        self.metrics = {
            key: _log_metric(f"{name}-metric-{key.replace('_', '-')}", scope, spec, fixed_name(child))
            for key, spec in specs.items()
        }
        after_metrics = child_options(self, opts, depends_on=list(self.metrics.values()))
        body = dashboard_body.dashboard(
            scope, specs, f"verl-gke training: {scope.cluster_name} ({args.target})"
        )
        self.dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard",
            gcp.monitoring.DashboardArgs(project=scope.project, dashboard_json=json.dumps(body)),
            opts=after_metrics,
        )
        after_descriptors = child_options(
            self, opts, depends_on=[*self.metrics.values(), *args.log_alerts_after]
        )
        self.alerts = _alerts(name, args, specs, after_metrics, after_descriptors)
        self.dashboard_url = self.dashboard.id.apply(lambda id_: dashboard_url(scope.project, id_))
        self.logs_url = logs_url(scope)
        self.register_outputs({"dashboardUrl": self.dashboard_url, "logsUrl": self.logs_url})


def dashboard_url(project: str, dashboard_id: str) -> str:
    """The console page of a custom dashboard.

    The provider's id is `projects/<number>/dashboards/<id>` (pulumi-gcp monitoring.Dashboard
    import format); Terraform users link `.../monitoring/dashboards/custom/<id>?project=<p>`
    (the console also serves the same id under `dashboards/builder/`).
    """
    short = dashboard_id.rsplit("/", 1)[-1]
    return f"https://console.cloud.google.com/monitoring/dashboards/custom/{short}?project={project}"


def logs_url(scope: Scope) -> str:
    """Logs Explorer with the job's log lines (the shipper's entries of this namespace).

    The query goes in the `;query=` matrix parameter, URL-encoded, the project in `?project=`:
    the format of Logs Explorer's shared links (as vvakame/gcplogurl builds them:
    `https://console.cloud.google.com/logs/query;query=trace%3D%22...%22?project=...`).
    """
    query = "\n".join(scope.shipper_entries())
    return (
        "https://console.cloud.google.com/logs/query;query="
        f"{urllib.parse.quote(query, safe='')}?project={scope.project}"
    )


def _log_metric(
    resource_name: str, scope: Scope, metric: LogMetric, opts: pulumi.ResourceOptions
) -> gcp.logging.Metric:
    logging = gcp.logging
    counter = metric.kind is Kind.COUNTER
    scale, growth, count = metric.buckets
    return logging.Metric(
        resource_name,
        logging.MetricArgs(
            project=scope.project,
            name=scope.metric_name(metric),
            description=f"verl-gke: {metric.title}, from the job's log lines.",
            filter=log_metrics.entry_filter(scope, metric),
            metric_descriptor=logging.MetricMetricDescriptorArgs(
                metric_kind="DELTA",  # the only kind a log-based metric can have
                value_type=log_metrics.value_type(metric),
                unit=metric.unit,
                display_name=metric.title,
                labels=[
                    logging.MetricMetricDescriptorLabelArgs(
                        key=log_metrics.RUN_LABEL,
                        value_type="STRING",
                        description="The Ray job's submission id.",
                    )
                ],
            ),
            label_extractors=log_metrics.label_extractors(metric),
            value_extractor=log_metrics.value_extractor(metric),
            bucket_options=None if counter else logging.MetricBucketOptionsArgs(
                exponential_buckets=logging.MetricBucketOptionsExponentialBucketsArgs(
                    num_finite_buckets=count, growth_factor=growth, scale=scale
                )
            ),
        ),
        opts=opts,
    )


# The alerts whose conditions filter on log-based metrics (logging.googleapis.com/user/...).
LOG_METRIC_ALERTS = ("job-failed", "reward-nan", "no-step", "entropy-collapse", "clip-fraction-high")


def _alerts(
    name: str, args: TrainingObservabilityArgs, specs: dict[str, LogMetric],
    opts: pulumi.ResourceOptions, log_metric_opts: pulumi.ResourceOptions,
) -> dict[str, gcp.monitoring.AlertPolicy]:
    """The seven alert policies; those of LOG_METRIC_ALERTS with `log_metric_opts` (they wait
    for the metrics' descriptors), the PromQL one with `opts`."""
    scope = args.scope
    mon = gcp.monitoring
    conditions = {
        "job-failed": (
            "Training job failed",
            "Ray reported a non-zero exit of the training entrypoint. Read the job log "
            "(the stack output consoleUrls.jobLogs); `pulumi up` resubmits the job and verl "
            "resumes from its last checkpoint.",
            _count_above_zero("A job entrypoint exited non-zero", scope, specs["job_failures"]),
        ),
        "reward-nan": (
            "Training reward is NaN",
            "verl logged critic/score/mean:nan. Further steps are wasted GPU time: stop the job "
            "and check the reward function and the rollout outputs.",
            _count_above_zero("A step logged a NaN reward", scope, specs["reward_nan"]),
        ),
        "no-step": (
            "No new training step",
            f"No verl step line for {args.no_step_minutes} minutes ({Key('noStepAlertMinutes')}). "
            "The job may hang (NCCL), or it has ended; check the job status with "
            "`pulumi refresh` and its log.",
            mon.AlertPolicyConditionArgs(
                display_name=f"No step line for {args.no_step_minutes} min",
                condition_absent=mon.AlertPolicyConditionConditionAbsentArgs(
                    filter=_user_metric(scope, specs["steps"]),
                    duration=f"{args.no_step_minutes * 60}s",
                    aggregations=[_sum_per_run()],
                ),
            ),
        ),
        "entropy-collapse": (
            "Policy entropy collapsing",
            f"The mean of actor/entropy over {COLLAPSE_MINUTES} minutes of steps is under "
            f"{ENTROPY_FLOOR} (a starting point, not a measured limit): the policy has stopped "
            "exploring and GRPO's group advantages vanish, so further steps learn nothing. Stop "
            "the job and resume from a checkpoint before the drop (`resumeFrom: "
            "<run>/global_step_<n>`, the dashboard's entropy chart shows when it began) with a "
            "lower `learningRate` or a higher `klCoef`.",
            _mean_beyond(
                f"Entropy mean < {ENTROPY_FLOOR} over {COLLAPSE_MINUTES} min", scope,
                specs["entropy"], "COMPARISON_LT", ENTROPY_FLOOR,
            ),
        ),
        "clip-fraction-high": (
            "PPO clip fraction high",
            f"The mean of actor/pg_clipfrac over {COLLAPSE_MINUTES} minutes of steps is above "
            f"{CLIP_FRACTION_CEILING} (a starting point, not a measured limit): each update moves "
            "the policy further than the PPO clip range allows, the usual precursor of collapse. "
            "Lower `learningRate`, or raise `ppoMiniBatchSize` (fewer optimizer steps per RL "
            "step); if the entropy chart has already dropped, resume from an earlier checkpoint "
            "(`resumeFrom: <run>/global_step_<n>`).",
            _mean_beyond(
                f"Clip fraction mean > {CLIP_FRACTION_CEILING} over {COLLAPSE_MINUTES} min", scope,
                specs["clip_fraction"], "COMPARISON_GT", CLIP_FRACTION_CEILING,
            ),
        ),
        "gpus-idle": (
            "GPUs idle while the job runs",
            f"Average GPU utilisation below {IDLE_GPU_PERCENT}% for {IDLE_GPU_MINUTES} minutes "
            "while verl's TaskRunner actor is alive: the run is likely stuck.",
            _promql_for(
                f"GPU utilisation < {IDLE_GPU_PERCENT}% with the job alive",
                gpus_idle_query(scope), IDLE_GPU_MINUTES,
            ),
        ),
        "gpus-unused": (
            "GPU workers up with no run",
            f"The cluster's GPU nodes and the RayCluster's pods have been up for "
            f"{UNUSED_GPU_MINUTES} minutes with no verl TaskRunner alive: no run is training on "
            "GPUs that bill by the hour (a run that ended with `job.releaseGpus: false`, one "
            "stopped by hand, or a supervisor that has not released them; an export that runs "
            "longer than that also fires it). Check the run with `pulumi refresh`; release the "
            "GPUs with `kubectl patch raycluster <name> --type merge -p "
            "'{\"spec\":{\"suspend\":true}}'` (the stack output rayCluster names it), or "
            "`pulumi destroy` the stack.",
            _promql_for(
                f"GPU workers up, no TaskRunner for {UNUSED_GPU_MINUTES} min",
                gpus_unused_query(scope), UNUSED_GPU_MINUTES,
            ),
        ),
    }
    channels = [args.notification_channel] if args.notification_channel else []
    return {
        key: mon.AlertPolicy(
            f"{name}-alert-{key}",
            mon.AlertPolicyArgs(
                project=scope.project,
                display_name=f"verl-gke {scope.cluster_name}: {title}",
                combiner="OR",
                conditions=[condition],
                notification_channels=channels,
                user_labels=dict(args.labels) or None,
                documentation=mon.AlertPolicyDocumentationArgs(content=text, mime_type="text/markdown"),
            ),
            opts=log_metric_opts if key in LOG_METRIC_ALERTS else opts,
        )
        for key, (title, text, condition) in conditions.items()
    }


def _promql_for(
    display_name: str, query: str, minutes: int
) -> gcp.monitoring.AlertPolicyConditionArgs:
    """A PromQL condition that holds for `minutes`, evaluated every minute."""
    promql = gcp.monitoring.AlertPolicyConditionConditionPrometheusQueryLanguageArgs
    return gcp.monitoring.AlertPolicyConditionArgs(
        display_name=display_name,
        condition_prometheus_query_language=promql(
            query=query,
            duration=f"{minutes * 60}s",
            evaluation_interval="60s",
            # Cloud Monitoring refuses a PromQL condition on metrics that do not exist yet unless
            # told not to check (pulumi-gcp 10.2 docstring of disable_metric_validation); on a
            # first `pulumi up` no GPU node or Ray pod has reported DCGM or Ray metrics when the
            # alert is created.
            disable_metric_validation=True,
        ),
    )


def gpus_idle_query(scope: Scope) -> str:
    """PromQL: mean GPU utilisation of the cluster under the threshold, only while verl's
    TaskRunner actor is ALIVE (ray_actors, State/Name labels as a Ray 2.60 head exports them)."""
    gpu = DCGM_METRICS[0]
    return (
        f"avg({gpu}{{{scope.promql_cluster()}}}) < {IDLE_GPU_PERCENT} "
        f'and on() sum(ray_actors{{{scope.promql_labels()}, Name="TaskRunner", State="ALIVE"}}) > 0'
    )


def gpus_unused_query(scope: Scope) -> str:
    """PromQL: the cluster's GPU nodes report (DCGM runs on every GPU node) and the RayCluster's
    pods are up (Ray's per-node reporter series, which a released cluster has none of: suspend
    deletes every pod), unless verl's TaskRunner actor is ALIVE. A reservation pool's nodes
    after a release report DCGM but no Ray: not an alert (the reservation bills them anyway)."""
    gpu = DCGM_METRICS[0]
    return (
        f"count({gpu}{{{scope.promql_cluster()}}}) > 0 "
        f"and on() count(ray_node_mem_used{{{scope.promql_labels()}}}) > 0 "
        f'unless on() sum(ray_actors{{{scope.promql_labels()}, Name="TaskRunner", State="ALIVE"}}) > 0'
    )


def _user_metric(scope: Scope, metric: LogMetric) -> str:
    return f'metric.type="{scope.metric_type(metric)}" AND resource.type="k8s_container"'


def _sum_per_run() -> gcp.monitoring.AlertPolicyConditionConditionAbsentAggregationArgs:
    return gcp.monitoring.AlertPolicyConditionConditionAbsentAggregationArgs(
        alignment_period="60s",
        per_series_aligner="ALIGN_SUM",
        cross_series_reducer="REDUCE_SUM",
        group_by_fields=["metric.label.run"],
    )


def _count_above_zero(
    display_name: str, scope: Scope, metric: LogMetric
) -> gcp.monitoring.AlertPolicyConditionArgs:
    mon = gcp.monitoring
    return mon.AlertPolicyConditionArgs(
        display_name=display_name,
        condition_threshold=mon.AlertPolicyConditionConditionThresholdArgs(
            filter=_user_metric(scope, metric),
            comparison="COMPARISON_GT",
            threshold_value=0,
            duration="0s",  # one matching line is enough
            aggregations=[
                mon.AlertPolicyConditionConditionThresholdAggregationArgs(
                    alignment_period="60s",
                    per_series_aligner="ALIGN_SUM",
                    cross_series_reducer="REDUCE_SUM",
                    group_by_fields=["metric.label.run"],
                )
            ],
        ),
    )


def _mean_beyond(
    display_name: str, scope: Scope, metric: LogMetric, comparison: str, threshold: float
) -> gcp.monitoring.AlertPolicyConditionArgs:
    """A run's mean of a value metric over COLLAPSE_MINUTES past `threshold`.

    The alignment period is the window: the alert compares the mean of the step values logged in
    the last COLLAPSE_MINUTES (a single outlier step is diluted by the others), and fires at the
    first window past the threshold (duration 0). A window without a step line has no point and
    does not fire (the no-step alert covers silence).
    """
    mon = gcp.monitoring
    return mon.AlertPolicyConditionArgs(
        display_name=display_name,
        condition_threshold=mon.AlertPolicyConditionConditionThresholdArgs(
            filter=_user_metric(scope, metric),
            comparison=comparison,
            threshold_value=threshold,
            duration="0s",
            aggregations=[
                mon.AlertPolicyConditionConditionThresholdAggregationArgs(
                    alignment_period=f"{COLLAPSE_MINUTES * 60}s",
                    per_series_aligner=log_metrics.VALUE_ALIGNER,
                    cross_series_reducer=log_metrics.VALUE_REDUCER,
                    group_by_fields=["metric.label.run"],
                )
            ],
        ),
    )
