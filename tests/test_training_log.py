"""The log shipper and the log-based metrics' RE2 patterns, on real logs of a real local Ray.

A Ray head is started for this module; the shipper script (the sidecar's own command) follows
its logs directory while verl-format jobs run (tests/fakes/verl_trainer.py prints verl's step
lines), and every filter regex, value extractor and label extractor is applied with google-re2
(the engine Cloud Logging uses) to the lines the shipper printed, i.e. to the textPayloads the
log-based metrics will see.
"""

from __future__ import annotations

import numbers
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import re2
import requests

from components.facts import verl
from components.observability import log_metrics, log_shipper, training_log
from components.observability.scope import Scope
from components.observability.training_log import Kind
from components.run.grpo_job import last_metrics

TRAINER = f"{sys.executable} {Path(__file__).parent / 'fakes' / 'verl_trainer.py'}"
GOOD, FAILED = "verl-gke-test-grpo-good", "verl-gke-test-grpo-failed"
GOOD_STEPS, FAILED_STEPS, NAN_STEP = 4, 2, 3
METRICS = {m.key: m for m in training_log.log_metrics()}
# The shipper's tags of this module's two jobs. The head is shared by every xdist worker, so
# jobs of other modules write while the shipper runs; the counting tests count these only.
OUR_TAGS = tuple(f"[{kind}-{run}] " for kind in ("job-driver", "supervisor") for run in (GOOD, FAILED))


def ours(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(OUR_TAGS)]


def our_files(logs_dir: Path) -> list[Path]:
    """This module's two jobs' driver logs, then their supervisor logs."""
    return ([logs_dir / f"job-driver-{run}.log" for run in (GOOD, FAILED)]
            + [logs_dir / "jobs" / f"supervisor-{run}.log" for run in (GOOD, FAILED)])


def start_shipper(logs_dir: Path, out: Path) -> subprocess.Popen:
    """The sidecar's command, in its own session so that it can be ended by process group."""
    env = {
        **os.environ,
        "RAY_LOGS_DIR": str(logs_dir),
        "SHIP_PATTERNS": " ".join(log_shipper.JOB_LOG_PATTERNS),
        "SHIP_SCAN_SECONDS": "0.3",
    }
    return subprocess.Popen(
        ["/bin/sh", "-c", log_shipper.SCRIPT], stdout=out.open("w"), env=env,
        start_new_session=True,
    )


def ready_marker(logs_dir: Path) -> Path:
    """An empty file of the shipper's last pattern, made before the shipper starts."""
    assert log_shipper.JOB_LOG_PATTERNS[-1] == "jobs/supervisor-*.log"
    marker = logs_dir / "jobs" / f"supervisor-shipper-ready-{os.getpid()}.log"
    marker.parent.mkdir(exist_ok=True)
    marker.touch()
    return marker


def wait_first_scan(marker: Path, out: Path) -> None:
    """Return once the shipper's first scan has listed the last of its patterns' files.

    The shipper follows a file its first scan lists from its end (a restarted sidecar must not
    ship its lines again), and in a pod it starts before Ray, so that scan finds nothing. Here
    the head is already up, and a job submitted before that scan on two loaded cores had its
    `jobs/supervisor-*.log` listed by it and never shipped (CI at 99f4d31). So a marker file of
    the last pattern, made before the shipper starts, is appended to until one of its lines is
    shipped: then the first scan has expanded that pattern, and every job file made afterwards
    is new to the shipper and shipped from its first line."""
    tag = f"[{marker.stem}] "
    for attempt in range(300):
        with marker.open("a") as file:
            file.write(f"ready {attempt}\n")
        time.sleep(0.1)
        if any(line.startswith(tag) for line in out.read_text().splitlines()):
            return
    raise AssertionError(f"the shipper never shipped {marker}")


def wait_shipped(logs_dir: Path, out: Path) -> None:
    """Return once both runs' supervisor logs hold their exit line (Ray's job supervisor writes
    it after the status, job_supervisor.py) and the shipper has printed as many lines of each of
    this module's files as the file holds; a shipper that drops a line fails the tests after 30 s.
    """
    files = our_files(logs_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = out.read_text().splitlines()
        texts = {path: path.read_text() if path.exists() else "" for path in files}
        exited = all("entrypoint command exited with code" in texts[path] for path in files[2:])
        if exited and all(
            sum(line.startswith(f"[{path.stem}] ") for line in lines) >= len(texts[path].splitlines())
            for path in files
        ):
            return
        time.sleep(0.2)


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=15)


def wait_terminal(url: str, submission_id: str) -> str:
    for _ in range(240):
        status = requests.get(f"{url}/api/jobs/{submission_id}", timeout=10).json()["status"]
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(0.25)
    raise AssertionError(f"{submission_id} did not finish")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, shared_ray_head):
    """(lines the shipper printed, the Ray logs dir), after a good and a failing job."""
    tmp = tmp_path_factory.mktemp("ship")
    head = shared_ray_head
    logs = head.temp_dir / "session_latest" / "logs"
    marker = ready_marker(logs)
    shipper = start_shipper(logs, tmp / "shipped.txt")
    try:
        wait_first_scan(marker, tmp / "shipped.txt")
        jobs = {
            GOOD: f"{TRAINER} --steps {GOOD_STEPS} --sleep 0.1 --all-metrics "
            f"--nan-reward-at {NAN_STEP}",
            FAILED: f"{TRAINER} --steps {FAILED_STEPS} --sleep 0.1 --all-metrics --fail",
        }
        for submission_id, command in jobs.items():
            requests.post(
                f"{head.dashboard_url}/api/jobs/",
                json={"entrypoint": command, "submission_id": submission_id}, timeout=10,
            ).raise_for_status()
        assert wait_terminal(head.dashboard_url, GOOD) == "SUCCEEDED"
        assert wait_terminal(head.dashboard_url, FAILED) == "FAILED"
        wait_shipped(logs, tmp / "shipped.txt")
    finally:
        stop(shipper)
    lines = (tmp / "shipped.txt").read_text().splitlines()
    copy = tmp / "logs"
    subprocess.run(["cp", "-r", str(logs), str(copy)], check=True)
    yield lines, copy


def matching(lines: list[str], metric: training_log.LogMetric) -> list[str]:
    return [l for l in lines if re2.search(metric.tag, l) and re2.search(metric.line, l)]


def test_shipper_prints_every_job_log_line_once_tagged_with_its_file(shipped):
    """Each line of each job's driver and supervisor log is printed once, in order, behind
    `[<file stem>] `. On this shared head, jobs of other test modules may still write after
    the shipper started: their new lines are shipped too, under their own tags, and every
    printed line carries a tag."""
    lines, logs = shipped
    assert all(re2.search(r"^[[](job-driver|supervisor)-[^]]+] ", l) for l in lines)
    expected = []
    files = our_files(logs)
    for path in files:
        tag = path.name[: -len(".log")]
        file_lines = path.read_text().splitlines()
        assert file_lines, path
        mine = [l[len(tag) + 3:] for l in lines if l.startswith(f"[{tag}] ")]
        assert mine == file_lines, tag
        expected += file_lines
    assert len(ours(lines)) == len(expected)


def test_restarted_shipper_does_not_ship_old_lines_again(shipped, tmp_path):
    """A sidecar restarted in the same pod skips what its earlier run shipped, so counters
    (failures, NaN rewards) are not counted twice."""
    _, logs = shipped
    out = tmp_path / "again.txt"
    marker = ready_marker(logs)
    again = start_shipper(logs, out)
    try:
        wait_first_scan(marker, out)
        with (logs / f"job-driver-{GOOD}.log").open("a") as file:
            file.write("a line written after the restart\n")
        new_line = f"[job-driver-{GOOD}] a line written after the restart"
        for _ in range(100):
            if new_line in out.read_text().splitlines():
                break
            time.sleep(0.1)
        time.sleep(1)  # several scans more, in which an old line could still come
    finally:
        stop(again)
    shipped_again = [l for l in out.read_text().splitlines() if not l.startswith(f"[{marker.stem}] ")]
    assert shipped_again == [new_line]


def test_step_counter_and_label_count_each_runs_steps(shipped):
    """The `steps` metric matches exactly the step lines, and its label is the run."""
    lines, _ = shipped
    steps = matching(ours(lines), METRICS["steps"])
    runs = [re2.search(METRICS["steps"].tag, l).group(1) for l in steps]
    assert runs.count(GOOD) == GOOD_STEPS and runs.count(FAILED) == FAILED_STEPS
    assert len(runs) == GOOD_STEPS + FAILED_STEPS


# The keys tests/fakes/verl_trainer.py prints on its step lines; the others (the collapse signs)
# are checked on verl-format lines built below.
FAKE_TRAINER_KEYS = ["step", "critic/score/mean", "response_length/mean", "timing_s/step", "perf/throughput"]


@pytest.mark.parametrize("verl_key", FAKE_TRAINER_KEYS)
def test_value_extractors_agree_with_the_job_providers_parser(shipped, verl_key):
    """On every real step line, each value extractor yields the number the GrpoJob provider's
    parser (last_metrics) reads for the same key; a NaN yields nothing."""
    lines, _ = shipped
    key = training_log.TRAINING_VALUES[verl_key][0]
    metric = METRICS[key]
    assert re2.compile(metric.value).groups == 1
    seen = 0
    for line in matching(ours(lines), metric):
        parsed = last_metrics(line)
        found = re2.search(metric.value, line)
        if verl_key in parsed:
            assert found is not None, line
            assert float(found.group(1)) == pytest.approx(parsed[verl_key]), line
            seen += 1
        else:  # NaN: dropped by the parser, and no number for the extractor either
            assert found is None, line
    expected = GOOD_STEPS + FAILED_STEPS - (1 if verl_key == "critic/score/mean" else 0)
    assert seen == expected


def test_nan_reward_counter_matches_only_the_nan_step(shipped):
    """`reward_nan` counts the one step whose reward is NaN, in the run that logged it."""
    lines, _ = shipped
    hits = matching(ours(lines), METRICS["reward_nan"])
    assert len(hits) == 1 and f"step:{NAN_STEP} - " in hits[0]
    assert re2.search(METRICS["reward_nan"].tag, hits[0]).group(1) == GOOD


def test_failure_counter_matches_the_failed_run_only(shipped):
    """`job_failures` matches the supervisor's non-zero exit line of the failed run, not the
    successful run's exit 0."""
    lines, _ = shipped
    hits = matching(ours(lines), METRICS["job_failures"])
    assert [re2.search(METRICS["job_failures"].tag, l).group(1) for l in hits] == [FAILED]
    assert any(f"[supervisor-{GOOD}]" in l and "exited with code 0" in l for l in lines)


def verl_step_line(step: int, metrics: dict[str, object]) -> str:
    """A shipped verl step line: the pinned verl's console format (components/facts/verl.py
    step_line, numbers only as verl keeps them), behind the TaskRunner actor's prefix and the
    shipper's tag."""
    numeric = {k: v for k, v in metrics.items() if isinstance(v, numbers.Number)}
    return f"[job-driver-raysubmit_abc] (TaskRunner pid=77) {verl.step_line(step, numeric)}"


# Neighbours verl logs with a name that starts like the collapse keys: actor/entropy_loss
# (verl/workers/utils/losses.py:159), actor/pg_clipfrac_lower (core_algos.py:1248), placed first
# so that a pattern matching a prefix would take their value.
COLLAPSE_LINE_METRICS = {
    "actor/entropy_loss": np.float64(9.5),
    "actor/pg_clipfrac_lower": np.float64(0.75),
    "critic/score/mean": np.float64(0.42),
    "actor/entropy": np.float64(0.0312),
    "actor/pg_clipfrac": 0.1875,
    "actor/ppo_kl": np.float64(-1.5e-05),
    "timing_s/step": np.float64(61.5),  # on every training step (components/facts/verl.py)
}


@pytest.mark.parametrize(("verl_key", "expected"), [
    ("actor/entropy", 0.0312), ("actor/pg_clipfrac", 0.1875),
])
def test_collapse_extractors_read_verls_entropy_and_clip_fraction(verl_key, expected):
    """On a verl-format step line (numpy reprs, lookalike keys before them), the entropy and
    clip-fraction metrics select the line and extract exactly their value, as the GrpoJob
    provider's parser reads it; a NaN value yields no number."""
    metric = METRICS[training_log.TRAINING_VALUES[verl_key][0]]
    line = verl_step_line(12, COLLAPSE_LINE_METRICS)
    assert matching([line], metric) == [line]
    assert re2.search(metric.tag, line).group(1) == "raysubmit_abc"
    assert re2.compile(metric.value).groups == 1
    assert float(re2.search(metric.value, line).group(1)) == expected
    assert last_metrics(line)[verl_key] == expected
    nan_line = verl_step_line(13, {**COLLAPSE_LINE_METRICS, verl_key: np.float64("nan")})
    assert matching([nan_line], metric) == [nan_line]
    assert re2.search(metric.value, nan_line) is None


SCOPE = Scope("example-project", "us-central1", "verl", "default")


def _payload_regexes(filter_text: str) -> list[str]:
    return [
        line.split('textPayload=~"', 1)[1][:-1]
        for line in filter_text.split("\nAND ")
        if line.startswith('textPayload=~"')
    ]


@pytest.mark.parametrize("key", sorted(METRICS))
def test_api_fields_carry_the_tested_patterns_verbatim(key):
    """What goes to the Logging API holds exactly the patterns tested above: the filter's
    textPayload regexes, the extractors' one-group regexes; none needs escaping."""
    metric = METRICS[key]
    for pattern in (metric.tag, metric.line, metric.value or ""):
        assert "\\" not in pattern and '"' not in pattern
    assert _payload_regexes(log_metrics.entry_filter(SCOPE, metric)) == [metric.tag, metric.line]
    [label] = log_metrics.label_extractors(metric).values()
    assert label == f'REGEXP_EXTRACT(textPayload, "{metric.tag}")'
    assert re2.compile(metric.tag).groups == 1
    extractor = log_metrics.value_extractor(metric)
    if metric.kind is Kind.VALUE:
        assert extractor == f'REGEXP_EXTRACT(textPayload, "{metric.value}")'
    else:
        assert extractor is None
    assert len(SCOPE.metric_name(metric)) <= 100


def test_every_charted_value_is_checked_on_verl_lines():
    """Each verl key the stack extracts is checked above: on the fake trainer's real shipped
    lines, or (the collapse signs, which the fake does not print) on built verl-format lines."""
    built = {"actor/entropy", "actor/pg_clipfrac"}
    assert set(FAKE_TRAINER_KEYS) | built == set(training_log.TRAINING_VALUES)
    assert not set(FAKE_TRAINER_KEYS) & built
