"""Every benchmark of `make bench` runs to its end, once, in its quick mode (`--smoke`): a
benchmark that no longer runs fails here instead of rotting unseen (issue 37: the GrpoJob
benchmark stopped the run's id, which is no Ray job, and crashed `make bench` with a 404 before
the staging benchmark ran). No timing is asserted: the figures of a smoke run mean nothing."""

from __future__ import annotations

from bench import diff_bench, grpo_job_bench, plan_bench, preflight_bench, run, staging_bench


def test_the_plan_benchmark_runs(capsys):
    """bench/plan_bench.py times a plan and its SDK import floor, and prints their ratio."""
    assert plan_bench.main(["--smoke"]) > 0
    assert "SDK import floor" in capsys.readouterr().out


def test_the_diff_benchmark_runs(capsys):
    """bench/diff_bench.py times a fresh render against forked ones, and prints the ratio."""
    assert diff_bench.main(["--smoke"]) > 0
    assert "ratio warm/fresh" in capsys.readouterr().out


def test_the_preflight_benchmark_runs(capsys):
    """bench/preflight_bench.py counts preflight's sequential invoke rounds."""
    preflight_bench.main(["--smoke"])
    assert "preflight adds at most" in capsys.readouterr().out


def test_the_grpo_job_benchmark_runs_and_stops_what_it_submitted(shared_ray_head, capsys):
    """bench/grpo_job_bench.py submits through the provider, the CLI and the raw client, stops
    each before the next (the provider's as its run's attempts, `<id>-a<N>`), and prints every
    figure; nothing it submitted is left running on the head."""
    from ray.job_submission import JobSubmissionClient

    grpo_job_bench.run(shared_ray_head, smoke=True)
    out = capsys.readouterr().out
    assert "GrpoJob create -> first step" in out and "provider / raw client" in out
    client = JobSubmissionClient(shared_ray_head.dashboard_url)
    # The refresh's and the first step's jobs end on their own; every other one was stopped.
    live = [job.submission_id for job in client.list_jobs()
            if job.submission_id.startswith("bench-") and not job.status.is_terminal()]
    assert live == []


def test_the_staging_benchmark_runs(capsys):
    """bench/staging_bench.py stages a small model through the real script and a fake hub."""
    staging_bench.main(["--smoke"])
    assert "staging pipeline" in capsys.readouterr().out


def test_make_bench_runs_every_benchmark():
    """bench/run.py (`make bench`) runs each benchmark module this file runs, and no other."""
    called = {name for name in run.main.__code__.co_names if name.endswith("_bench")}
    assert called == {"plan_bench", "diff_bench", "preflight_bench", "grpo_job_bench",
                      "staging_bench"}
