"""What the training job's log lines say, as RE2 patterns and log-based metric definitions.

Pure data, shared by the log-based metrics (TrainingObservability), the dashboard, the alerts
and `tools/curve.py`. The lines are those the log shipper prints (log_shipper.py):

    [job-driver-<submission id>] (TaskRunner pid=123) step:12 - critic/score/mean:0.53 - ...
    [supervisor-<submission id>] ... Job <id> entrypoint command exited with code 1 ...

verl's console logger joins one step's metrics as `step:N - key:value - key:value`
(verl/utils/logger/aggregate_logger.py, concat_dict_to_str); the keys charted here are verl's
(verl/trainer/ppo/metric_utils.py: `critic/score/mean`, `response_length/mean`,
`timing_s/step`, `perf/throughput` in tokens/s per GPU; `actor/entropy`, the mean token entropy
of the step's responses, from the old-log-prob pass whatever `entropy_coeff` is
(verl/trainer/ppo/v1/trainer_base.py:1297-1309 at the pinned ref), and `actor/pg_clipfrac`, the
fraction of response tokens the PPO clip bounds, averaged over the step's updates
(verl/trainer/ppo/core_algos.py:1346, :1365)). Values may be numpy reprs such as
`np.float64(0.5)`, and `nan`. Which step lines are training steps: components/facts/verl.py.

Every pattern is RE2 syntax (Cloud Logging's `=~` and REGEXP_EXTRACT use RE2:
cloud.google.com/logging/docs/view/logging-query-language#regular-expressions, and the
pulumi-gcp 10.2 `logging.Metric.value_extractor` docstring) with exactly one capture group where
it extracts; tests/test_training_log.py runs each one through google-re2 on a real job log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from components.facts import verl

# The patterns hold no backslash and no double quote: they go into Cloud Logging filter and
# extractor string literals as they are, with no escaping rule to get wrong. `[.]`, `[(]` and
# `[[]` stand for the escaped characters.

_SPECIAL = set(".^$*+?()[]{}|")


def _literal(key: str) -> str:
    """RE2 that matches `key` as it is, with no backslash (see above)."""
    return "".join(f"[{c}]" if c in _SPECIAL else c for c in key)


# A number as Python prints it, optionally inside a numpy repr: 0.53, -1e-05, np.float64(0.5).
_NUMBER = r"(?:np[.][A-Za-z0-9_]+[(])?(-?[0-9]+(?:[.][0-9]*)?(?:[eE][-+]?[0-9]+)?)"
# What may precede a key: the line start, the Ray actor prefix "(TaskRunner pid=1) ", " - ".
_KEY_START = r"(?:^|[ )])"

# Lines of the job's driver log; the capture is the submission id (the run).
DRIVER_TAG = r"^[[]job-driver-([^]]+)] "
# Lines of the job supervisor's log; the capture is the submission id.
SUPERVISOR_TAG = r"^[[]supervisor-([^]]+)] "
# A verl step line of a training step: one per step. A validation's line (before training, or
# at a resume) has no timing_s/step and is not counted (components/facts/verl.py).
STEP_LINE = _KEY_START + r"step:[0-9]+ - (?:.* - )?" + _literal(verl.TRAINING_STEP_KEY) + ":"
# A failed entrypoint (Ray writes exit code 0 for SUCCEEDED, nothing for a stopped job).
FAILED_EXIT = r"entrypoint command exited with code [1-9][0-9]*"
# A NaN reward: verl logs the batch's mean score; NaN means the reward function or the
# rollout produced garbage and further steps are wasted GPU time.
NAN_REWARD = r" - critic/score/mean:(?:np[.][A-Za-z0-9_]+[(])?nan(?:$|[) ])"



def value_pattern(key: str) -> str:
    """RE2 with one group: the value of verl metric `key` in a step line (`step` itself too)."""
    if key == "step":
        return _KEY_START + r"step:([0-9]+) - "
    return r" - " + _literal(key) + ":" + _NUMBER


class Kind(str, enum.Enum):
    COUNTER = "counter"  # DELTA INT64: matching entries per period
    VALUE = "value"  # DELTA DISTRIBUTION of the extracted value


@dataclass(frozen=True)
class LogMetric:
    """One log-based metric: which lines it counts, and what it extracts from them."""

    key: str  # short id, the last part of the metric name
    title: str  # chart title and the descriptor's display name
    kind: Kind
    line: str  # RE2 the textPayload must match (besides the run tag)
    tag: str  # DRIVER_TAG or SUPERVISOR_TAG: also extracts the run label
    value: str | None = None  # RE2 with one group: the value (VALUE metrics)
    unit: str = "1"  # UCUM, as Cloud Monitoring takes it
    # Exponential buckets (scale, growth, count) for VALUE metrics; only percentiles use them,
    # the mean a chart shows is exact.
    buckets: tuple[float, float, int] = (1.0, 2.0, 64)


# The training metrics the dashboard charts and the curve plots, in verl's names.
TRAINING_VALUES: dict[str, tuple[str, str]] = {
    # verl key: (metric key, title)
    "step": ("step", "Training step"),
    "critic/score/mean": ("reward_mean", "Reward (critic/score/mean)"),
    "response_length/mean": ("response_length_mean", "Response length (tokens)"),
    "timing_s/step": ("step_time", "Step time (s)"),
    "perf/throughput": ("throughput", "Throughput (tokens/s/GPU)"),
    # The signs of policy collapse the alerts watch (training_observability.py).
    "actor/entropy": ("entropy", "Policy entropy (actor/entropy)"),
    "actor/pg_clipfrac": ("clip_fraction", "PPO clip fraction (actor/pg_clipfrac)"),
}
_UNITS = {"timing_s/step": "s", "perf/throughput": "1/s", "response_length/mean": "1"}
# Rewards live in [-1, 1] for GSM8K-style scorers; small positive buckets resolve them. Entropy
# (nats, ~0-2 for an LLM's sampled tokens) and the clip fraction ([0, 1]) need finer ones near
# zero, where collapse shows: 0.001 * 1.25**k spans 0.001 to ~1.6e3 in 64 buckets.
_BUCKETS = {
    "critic/score/mean": (0.01, 1.25, 64),
    "actor/entropy": (0.001, 1.25, 64),
    "actor/pg_clipfrac": (0.001, 1.25, 64),
}


def log_metrics() -> list[LogMetric]:
    """Every log-based metric the stack defines."""
    values = [
        LogMetric(
            key=key, title=title, kind=Kind.VALUE, line=STEP_LINE, tag=DRIVER_TAG,
            value=value_pattern(verl_key), unit=_UNITS.get(verl_key, "1"),
            buckets=_BUCKETS.get(verl_key, (1.0, 2.0, 64)),
        )
        for verl_key, (key, title) in TRAINING_VALUES.items()
    ]
    counters = [
        LogMetric("steps", "Training steps logged", Kind.COUNTER, STEP_LINE, DRIVER_TAG),
        LogMetric("reward_nan", "Steps with a NaN reward", Kind.COUNTER, NAN_REWARD, DRIVER_TAG),
        LogMetric("job_failures", "Failed job entrypoints", Kind.COUNTER, FAILED_EXIT, SUPERVISOR_TAG),
    ]
    return values + counters
