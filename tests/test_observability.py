"""The training dashboard, the log-based metrics and the alerts, as every stack's plan holds them.

The dashboard body is validated against the Monitoring API v1 discovery document; every metric
a widget or an alert reads must be one the stack defines or one of the documented GKE, DCGM and
Ray metrics listed in components/observability/dashboard.py.
"""

from __future__ import annotations

import json
import re
import urllib.parse

import jsonschema
import pytest

from components.observability import dashboard as dashboard_module
from components.observability.scope import Scope
from components.observability.training_log import Kind, log_metrics
from components.observability.training_observability import (
    CLIP_FRACTION_CEILING, COLLAPSE_MINUTES, ENTROPY_FLOOR, gpus_idle_query, gpus_unused_query,
    logs_url,
)
from components.schema import config
from components.schema.config import ConfigError
from tests import api_schemas
from tests.conftest import rendered
from tools import plan

LOG_METRIC = "gcp:logging/metric:Metric"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
SCOPE = Scope("example-project", "us-central1", "verl", "default")


def scope_of(recording) -> Scope:
    """The scope of a rendered stack: its cluster name is derived per stack (verl-<stack>)."""
    return Scope("example-project", "us-central1", recording.outputs["clusterName"], "default")
DASHBOARD_SCHEMA = api_schemas.as_json_schema("monitoring.v1", "Dashboard")


def dashboard_body(recording) -> dict:
    return json.loads(recording.one(DASHBOARD, "observability-dashboard").plain_inputs["dashboardJson"])


def test_every_stack_defines_the_log_metrics_dashboard_and_alerts(program):
    """Each plan holds one log-based metric per training value and counter, one dashboard and
    the seven alerts (the two signs of policy collapse among them), all children of the
    TrainingObservability component."""
    _, _, _, recording = program
    component = recording.one("verl-gke:index:TrainingObservability", "observability")
    metrics = recording.of_type(LOG_METRIC)
    assert {m.plain_inputs["name"] for m in metrics} == {
        scope_of(recording).metric_name(m) for m in log_metrics()
    }
    alerts = {a.name for a in recording.of_type(ALERT)}
    assert alerts == {f"observability-alert-{k}" for k in (
        "job-failed", "reward-nan", "no-step", "gpus-idle", "gpus-unused", "entropy-collapse",
        "clip-fraction-high",
    )}
    for resource in [*metrics, *recording.of_type(ALERT), recording.one(DASHBOARD)]:
        assert resource.parent == component.urn


def test_dashboard_validates_against_the_monitoring_v1_api_schema(program):
    """The dashboard JSON is a valid projects.dashboards body (unknown fields refused)."""
    _, _, _, recording = program
    jsonschema.Draft7Validator(DASHBOARD_SCHEMA).validate(dashboard_body(recording))


def test_the_api_schema_check_is_live():
    """A misspelled field or a wrong enum value fails validation."""
    body = dashboard_module.dashboard(SCOPE, {m.key: m for m in log_metrics()}, "t")
    typo = json.loads(json.dumps(body))
    typo["mosaicLayout"]["tiles"][0]["widget"]["xyChart"]["dataSet"] = []
    bad_enum = json.loads(json.dumps(body))
    bad_enum["mosaicLayout"]["tiles"][0]["widget"]["xyChart"]["dataSets"][0]["plotType"] = "PIE"
    for bad in (typo, bad_enum):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft7Validator(DASHBOARD_SCHEMA).validate(bad)


def test_dashboard_has_the_issues_widgets_on_a_non_overlapping_grid(program):
    """GPU utilisation/memory/power per node, GPU nodes, pod restarts, Ray metrics and the four
    training metrics (policy entropy and clip fraction among them) are there, and no two tiles
    overlap."""
    _, _, _, recording = program
    tiles = dashboard_body(recording)["mosaicLayout"]["tiles"]
    titles = " | ".join(t["widget"]["title"] for t in tiles)
    for needed in ("GPU utilisation per node", "GPU memory used per node", "GPU power per node",
                   "GPU nodes", "Pod restarts", "Ray nodes alive", "Reward", "Response length",
                   "Step time", "Throughput", "Policy entropy", "PPO clip fraction"):
        assert needed in titles, needed
    cells = set()
    for t in tiles:
        # A position of 0 is not sent (the API would leave it out: test_steady_state).
        x0, y0 = t.get("xPos", 0), t.get("yPos", 0)
        tile_cells = {(x0 + x, y0 + y) for x in range(t["width"]) for y in range(t["height"])}
        assert not cells & tile_cells
        assert x0 + t["width"] <= dashboard_module.COLUMNS
        cells |= tile_cells
    assert (0, 0) in cells


def _defaults_sent(value, path=""):
    """Paths in a dashboard body that hold a proto3 default (0, false, "", []); map entries
    (`labels`) excepted, as proto3 JSON prints them whatever their value."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "labels":
                continue
            if inner is False or inner == "" or inner == [] or (type(inner) in (int, float) and inner == 0):
                yield f"{path}.{key}"
            else:
                yield from _defaults_sent(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _defaults_sent(inner, f"{path}[{i}]")


def test_the_dashboard_sends_no_field_at_its_proto3_default(program):
    """The Monitoring API returns the dashboard without fields at their proto3 default, and the
    provider then sees a diff on every `up`: the body sends none (the first row and column have
    no xPos/yPos)."""
    _, _, _, recording = program
    body = dashboard_body(recording)
    assert list(_defaults_sent(body)) == []
    assert sum("xPos" not in t for t in body["mosaicLayout"]["tiles"]) >= 1


_PROMQL_NAME = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")
_METRIC_TYPE = re.compile(r'metric\.type="([^"]+)"')


def _referenced(queries: list[str]) -> set[str]:
    found = set()
    for query in queries:
        found |= set(_METRIC_TYPE.findall(query))
        if "metric.type=" not in query:
            found |= set(_PROMQL_NAME.findall(query))
    return found


def test_every_referenced_metric_is_defined_by_the_stack_or_documented(program):
    """Dashboard widgets and alert conditions read only the stack's own log-based metrics, or
    the GKE, DCGM and Ray metrics listed (with their sources) in dashboard.py."""
    _, _, _, recording = program
    own = {f"logging.googleapis.com/user/{m.plain_inputs['name']}" for m in recording.of_type(LOG_METRIC)}
    documented = {*dashboard_module.DCGM_METRICS, *dashboard_module.RAY_METRICS, *dashboard_module.GKE_METRICS}
    queries = []
    for tile in dashboard_body(recording)["mosaicLayout"]["tiles"]:
        for data_set in tile["widget"]["xyChart"]["dataSets"]:
            query = data_set["timeSeriesQuery"]
            queries.append(query.get("prometheusQuery") or query["timeSeriesFilter"]["filter"])
    for alert in recording.of_type(ALERT):
        for condition in alert.plain_inputs["conditions"]:
            for kind in ("conditionThreshold", "conditionAbsent"):
                if kind in condition:
                    queries.append(condition[kind]["filter"])
            if "conditionPrometheusQueryLanguage" in condition:
                queries.append(condition["conditionPrometheusQueryLanguage"]["query"])
    referenced = _referenced(queries)
    assert referenced, "no metric found: the reference parser is broken"
    assert referenced <= own | documented, referenced - own - documented
    assert own <= referenced, own - referenced  # no metric is defined and never read


def test_queries_stay_inside_the_stacks_cluster_and_namespace(program):
    """Every PromQL selector names this cluster; workload ones also the namespace."""
    _, _, _, recording = program
    cluster = recording.outputs["clusterName"]
    for tile in dashboard_body(recording)["mosaicLayout"]["tiles"]:
        for data_set in tile["widget"]["xyChart"]["dataSets"]:
            query = data_set["timeSeriesQuery"].get("prometheusQuery")
            if query:
                for selector in re.findall(r"\{([^}]*)\}", query):
                    assert f'cluster="{cluster}"' in selector, query
                    if "ray_" in query:
                        assert 'namespace="default"' in selector, query


def test_log_metrics_are_distributions_with_extractors_or_plain_counters(program):
    """Value metrics: DELTA DISTRIBUTION, a REGEXP_EXTRACT value extractor and buckets;
    counters: DELTA INT64 without either. Both carry the `run` label and its extractor."""
    _, _, _, recording = program
    by_name = {m.plain_inputs["name"]: m.plain_inputs for m in recording.of_type(LOG_METRIC)}
    for spec in log_metrics():
        inputs = by_name[scope_of(recording).metric_name(spec)]
        descriptor = inputs["metricDescriptor"]
        assert descriptor["metricKind"] == "DELTA"
        assert [l["key"] for l in descriptor["labels"]] == ["run"]
        assert inputs["labelExtractors"]["run"].startswith("REGEXP_EXTRACT(textPayload, ")
        assert 'resource.labels.container_name="ray-log-shipper"' in inputs["filter"]
        if spec.kind is Kind.VALUE:
            assert descriptor["valueType"] == "DISTRIBUTION"
            assert inputs["valueExtractor"].startswith("REGEXP_EXTRACT(textPayload, ")
            assert inputs["bucketOptions"]["exponentialBuckets"]["numFiniteBuckets"] > 0
        else:
            assert descriptor["valueType"] == "INT64"
            assert "valueExtractor" not in inputs and "bucketOptions" not in inputs


def _alerts(recording) -> dict[str, dict]:
    return {a.name.rsplit("alert-", 1)[1]: a.plain_inputs for a in recording.of_type(ALERT)}


def test_alerts_default_to_no_channel_and_a_60_minute_no_step_window():
    """Unset, alerts notify nobody (they still open incidents) and no-step waits 60 minutes."""
    _, recording = rendered("a4", "standard")
    alerts = _alerts(recording)
    assert all(not a.get("notificationChannels") for a in alerts.values())
    assert alerts["no-step"]["conditions"][0]["conditionAbsent"]["duration"] == "3600s"
    gpus_idle = alerts["gpus-idle"]["conditions"][0]["conditionPrometheusQueryLanguage"]
    assert gpus_idle["query"] == gpus_idle_query(scope_of(recording))
    assert 'Name="TaskRunner"' in gpus_idle["query"]


def test_gpu_workers_up_with_no_run_alert_on_a_forgotten_cluster():
    """Nothing bills for nobody unnoticed: an alert fires when, for an hour, the cluster's GPU
    nodes report (DCGM) and the RayCluster's pods are up (Ray's per-node series, gone once a
    release deletes every pod) while no verl TaskRunner is alive; its three parts are combined
    as `gpus and ray unless taskrunner`, each scoped to this stack's cluster."""
    _, recording = rendered("a4", "standard")
    scope = scope_of(recording)
    condition = _alerts(recording)["gpus-unused"]["conditions"][0]["conditionPrometheusQueryLanguage"]
    assert condition["query"] == gpus_unused_query(scope)
    assert condition["duration"] == "3600s" and condition["disableMetricValidation"] is True
    gpus, rest = condition["query"].split(" and on() ")
    ray, task_runner = rest.split(" unless on() ")
    assert gpus == f"count(DCGM_FI_DEV_GPU_UTIL{{{scope.promql_cluster()}}}) > 0"
    assert ray == f"count(ray_node_mem_used{{{scope.promql_labels()}}}) > 0"
    assert 'Name="TaskRunner", State="ALIVE"' in task_runner and task_runner.endswith("> 0")


def test_alert_settings_come_from_the_stack_config():
    """verl-gke:alertNotificationChannel reaches every alert; noStepAlertMinutes sets the
    absence window."""
    channel = "projects/example-project/notificationChannels/123456"
    _, recording = plan.run_program("a4", "standard", {
        "verl-gke:alertNotificationChannel": channel, "verl-gke:noStepAlertMinutes": "45",
    })
    alerts = _alerts(recording)
    assert all(a["notificationChannels"] == [channel] for a in alerts.values())
    assert alerts["no-step"]["conditions"][0]["conditionAbsent"]["duration"] == "2700s"


BASE = {
    "gcp:project": "my-proj", "verl-gke:target": "a4", "verl-gke:region": "us-central1",
    "verl-gke:zone": "us-central1-b", "verl-gke:reservation": "r", "verl-gke:hfToken": "hf_x",
}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("alertNotificationChannel", "my-email-channel",
         "verl-gke:alertNotificationChannel = 'my-email-channel' is not a notification channel "
         "name: use projects/<project>/notificationChannels/<id>"),
        ("noStepAlertMinutes", "1", "verl-gke:noStepAlertMinutes = 1 is out of range: use 2 to 1440"),
        ("noStepAlertMinutes", "100000", "verl-gke:noStepAlertMinutes = 100000 is out of range"),
        ("noStepAlertMinutes", "soon", "verl-gke:noStepAlertMinutes = 'soon' is invalid"),
    ],
)
def test_bad_alert_settings_name_the_key_the_value_and_the_fix(key, value, expected):
    """Bad alert settings stop the program before any resource, with the key, value and fix."""
    with pytest.raises(ConfigError) as error:
        config.load({**BASE, f"verl-gke:{key}": value}, {"verl-gke:hfToken"})
    [message] = error.value.problems
    assert message.startswith(expected), message


def test_logs_url_opens_logs_explorer_on_the_shippers_entries():
    """consoleUrls.jobLogs decodes to the exact filter of the job's shipped log lines."""
    url = logs_url(SCOPE)
    assert url.startswith("https://console.cloud.google.com/logs/query;query=")
    query = urllib.parse.unquote(url.split(";query=", 1)[1].rsplit("?project=", 1)[0])
    assert query.splitlines() == SCOPE.shipper_entries()
    assert url.endswith("?project=example-project")


_TERRAFORM_ONLY = {"project"}  # provider arguments that are not fields of the API body


def _api_body(inputs: dict) -> dict:
    return {k: v for k, v in inputs.items() if k not in _TERRAFORM_ONLY}


def test_log_metrics_and_alerts_are_valid_api_bodies(program):
    """The log-based metrics validate as logging v2 LogMetric bodies and the alerts as
    monitoring v3 AlertPolicy bodies (same field names; unknown fields and enum typos refused)."""
    _, _, _, recording = program
    log_metric = jsonschema.Draft7Validator(api_schemas.as_json_schema("logging.v2", "LogMetric"))
    alert = jsonschema.Draft7Validator(api_schemas.as_json_schema("monitoring.v3", "AlertPolicy"))
    for metric in recording.of_type(LOG_METRIC):
        log_metric.validate(_api_body(metric.plain_inputs))
    for policy in recording.of_type(ALERT):
        alert.validate(_api_body(policy.plain_inputs))
    broken = _api_body(recording.of_type(ALERT)[0].plain_inputs)
    broken["combiner"] = "EITHER"
    with pytest.raises(jsonschema.ValidationError):
        alert.validate(broken)


def test_promql_alert_can_be_created_before_its_metrics_exist():
    """The GPU-idle condition disables metric-existence validation: DCGM and Ray series do
    not exist yet when a first `pulumi up` creates the alert."""
    _, recording = rendered("a4x", "standard")
    condition = _alerts(recording)["gpus-idle"]["conditions"][0]["conditionPrometheusQueryLanguage"]
    assert condition["disableMetricValidation"] is True


def test_metric_names_fit_the_100_character_limit_for_any_valid_config():
    """The longest region and a 40-character cluster name (config.py's maximum) still give
    log metric ids within Cloud Logging's 100 characters."""
    longest = Scope("a" * 30, "northamerica-northeast1", "c" * 40, "n" * 63)
    for metric in log_metrics():
        assert len(longest.metric_name(metric)) <= 100, metric.key


def test_alerts_carry_the_stacks_labels():
    """Alert policies carry the stack, target and cluster labels every labelled resource has."""
    _, recording = rendered("a4x", "standard")
    for alert in _alerts(recording).values():
        assert alert["userLabels"]["verl-gke-stack"] == "a4x"
        assert alert["userLabels"]["verl-gke-cluster"] == "verl-a4x"


def _ancestors(resources: list[dict], urn: str) -> set[str]:
    """Every URN `urn` waits for at creation, directly or not, per plan.json's graph (dependsOn
    and inputsFrom: what the engine orders creation by)."""
    edges = {r["urn"]: {*r.get("dependsOn", []), *(u for us in r.get("inputsFrom", {}).values() for u in us)}
             for r in resources}
    found, frontier = set(), [urn]
    while frontier:
        for dependency in edges.get(frontier.pop(), ()):
            if dependency not in found:
                found.add(dependency)
                frontier.append(dependency)
    return found


def test_log_metric_alerts_wait_for_the_raycluster_so_monitoring_knows_their_metrics(program):
    """Cloud Monitoring answers 404 on a condition over a log-based metric for up to 10 minutes
    after the metric is created, and the provider does not retry it: the five alerts on
    logging.googleapis.com/user/... metrics (the two collapse alerts among them) wait, in the
    plan's graph, for their metrics and for the RayCluster (ready only after the cluster, its
    nodes and pods). The PromQL alert needs no descriptor and does not wait for the RayCluster."""
    stack, mode, inputs, recording = program
    resources = plan.plan_document(stack, inputs, recording)["resources"]
    [ray] = [r["urn"] for r in resources if r["type"] == "kubernetes:ray.io/v1:RayCluster"]
    metrics = {r["urn"] for r in resources if r["type"] == LOG_METRIC}
    alerts = {r["name"]: r for r in resources if r["type"] == ALERT}
    for key in ("job-failed", "reward-nan", "no-step", "entropy-collapse", "clip-fraction-high"):
        name = f"observability-alert-{key}"
        assert "logging.googleapis.com/user/" in json.dumps(alerts[name]["inputs"]["conditions"]), name
        waits = _ancestors(resources, alerts[name]["urn"])
        assert ray in waits and metrics <= waits, name
    for key in ("gpus-idle", "gpus-unused"):
        assert ray not in _ancestors(resources, alerts[f"observability-alert-{key}"]["urn"])


def _aggregations_of_value_metrics(recording) -> list[tuple[str, str, str]]:
    """(where, aligner, reducer) of every chart and alert condition reading a VALUE metric."""
    scope = scope_of(recording)
    values = {scope.metric_type(m) for m in log_metrics() if m.kind is Kind.VALUE}
    found = []
    for tile in dashboard_body(recording)["mosaicLayout"]["tiles"]:
        for data_set in tile["widget"]["xyChart"]["dataSets"]:
            series = data_set["timeSeriesQuery"].get("timeSeriesFilter")
            if series and set(_METRIC_TYPE.findall(series["filter"])) & values:
                aggregation = series["aggregation"]
                found.append((tile["widget"]["title"], aggregation["perSeriesAligner"],
                              aggregation["crossSeriesReducer"]))
    for name, alert in _alerts(recording).items():
        for condition in alert["conditions"]:
            threshold = condition.get("conditionThreshold")
            if threshold and set(_METRIC_TYPE.findall(threshold["filter"])) & values:
                for aggregation in threshold["aggregations"]:
                    found.append((name, aggregation["perSeriesAligner"],
                                  aggregation["crossSeriesReducer"]))
    return found


def test_value_metrics_are_aggregated_as_the_api_documents_for_delta_distributions(program):
    """Every chart and alert over a log-based value metric (DELTA DISTRIBUTION) uses an aligner
    and a reducer whose monitoring v3 enum description says they take DELTA distributions: the
    API refuses others with a 400 (ALIGN_MEAN is documented for numeric values only)."""
    _, _, _, recording = program
    aggregation = api_schemas.discovery("monitoring.v3")["schemas"]["Aggregation"]["properties"]

    def described(field: str) -> dict[str, str]:
        return dict(zip(aggregation[field]["enum"], aggregation[field]["enumDescriptions"]))

    aligners, reducers = described("perSeriesAligner"), described("crossSeriesReducer")
    found = _aggregations_of_value_metrics(recording)
    assert {where for where, _, _ in found} >= {"entropy-collapse", "clip-fraction-high",
                                                "Policy entropy (actor/entropy)"}
    for where, aligner, reducer in found:
        aligner_text, reducer_text = aligners[aligner], reducers[reducer]
        assert "DELTA metrics" in aligner_text, (where, aligner, aligner_text)
        # ALIGN_DELTA keeps the input's value type; others must name distribution values.
        assert ("same as the value_type of the input" in aligner_text
                or "distribution values" in aligner_text), (where, aligner, aligner_text)
        assert "DELTA" in reducer_text and "distribution values" in reducer_text, (where, reducer)
    assert "distribution" not in aligners["ALIGN_MEAN"], "the check would not catch ALIGN_MEAN"


def test_collapse_alerts_compare_the_runs_mean_and_name_the_fix(program):
    """Entropy alerts under its floor, the clip fraction over its ceiling, each on the mean of
    the run's step values over the collapse window, on the right metric; the texts say the
    thresholds are starting points and name the fix (resumeFrom with a lower learningRate or a
    higher klCoef; a lower learningRate or a larger ppoMiniBatchSize)."""
    _, _, _, recording = program
    scope = scope_of(recording)
    metrics = {m.key: m for m in log_metrics()}
    alerts = _alerts(recording)
    expected = {
        "entropy-collapse": ("entropy", "COMPARISON_LT", ENTROPY_FLOOR,
                             ("resumeFrom", "learningRate", "klCoef")),
        "clip-fraction-high": ("clip_fraction", "COMPARISON_GT", CLIP_FRACTION_CEILING,
                               ("learningRate", "ppoMiniBatchSize")),
    }
    for name, (metric, comparison, threshold, fixes) in expected.items():
        [condition] = alerts[name]["conditions"]
        rule = condition["conditionThreshold"]
        assert _METRIC_TYPE.findall(rule["filter"]) == [scope.metric_type(metrics[metric])], name
        assert (rule["comparison"], rule["thresholdValue"]) == (comparison, threshold), name
        [aggregation] = rule["aggregations"]
        assert aggregation["alignmentPeriod"] == f"{COLLAPSE_MINUTES * 60}s"
        assert aggregation["groupByFields"] == ["metric.label.run"]
        text = alerts[name]["documentation"]["content"]
        assert "starting point" in text, name
        for fix in fixes:
            assert f"`{fix}" in text, (name, fix)
    assert 0 < ENTROPY_FLOOR < 1 and 0 < CLIP_FRACTION_CEILING < 1
