"""The log-based metrics as Cloud Logging API fields: filter, extractors, descriptor.

Pure functions from a `LogMetric` and a `Scope` to strings; TrainingObservability wraps them in
typed pulumi-gcp args. The RE2 patterns go into the filter's `=~` comparisons and into
REGEXP_EXTRACT(textPayload, "<pattern>") as they are: they hold no backslash or double quote
(training_log.py), so no string-literal escaping applies.
"""

from __future__ import annotations

from components.observability.scope import Scope
from components.observability.training_log import Kind, LogMetric

RUN_LABEL = "run"

# How charts and alerts read a value metric (DELTA DISTRIBUTION): ALIGN_DELTA keeps each period's
# distribution ("valid for CUMULATIVE and DELTA metrics ... value_type of the aligned result is
# the same as the value_type of the input"), then REDUCE_MEAN by run gives the exact mean of the
# values logged in the period ("valid for DELTA and GAUGE metrics with numeric or distribution
# values. The value_type of the output is DOUBLE"). ALIGN_MEAN is documented "for GAUGE and DELTA
# metrics with numeric values" only, and the API answers 400 on an aligner a DELTA DISTRIBUTION
# does not take ("The aligner cannot be applied to metrics with kind DELTA and value type
# DISTRIBUTION", google/exposure-notifications-verification-server#659). Quotes: the Aggregation
# enums of monitoring.v3.json (google-api-python-client's discovery cache).
VALUE_ALIGNER = "ALIGN_DELTA"
VALUE_REDUCER = "REDUCE_MEAN"


def entry_filter(scope: Scope, metric: LogMetric) -> str:
    """The log query selecting the entries `metric` counts or extracts from."""
    lines = [
        *scope.shipper_entries(),
        f'textPayload=~"{metric.tag}"',
        f'textPayload=~"{metric.line}"',
    ]
    return "\nAND ".join(lines)


def value_extractor(metric: LogMetric) -> str | None:
    """REGEXP_EXTRACT over textPayload with the metric's one-group pattern (VALUE metrics)."""
    if metric.kind is Kind.COUNTER:
        return None
    return f'REGEXP_EXTRACT(textPayload, "{metric.value}")'


def label_extractors(metric: LogMetric) -> dict[str, str]:
    """The run (the job's submission id), from the shipper's `[job-driver-<id>]` tag."""
    return {RUN_LABEL: f'REGEXP_EXTRACT(textPayload, "{metric.tag}")'}


def value_type(metric: LogMetric) -> str:
    # A counter counts matching entries; a value metric records each extracted value in a
    # distribution, the only value type a valueExtractor may feed (logging v2 LogMetric).
    return "INT64" if metric.kind is Kind.COUNTER else "DISTRIBUTION"
