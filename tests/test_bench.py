"""The GrpoJob benchmark runs to its end, once, in its quick mode (`--smoke`): it stopped the
run's id, which is no Ray job, and crashed `make bench` with a 404 before the staging benchmark
ran (issue 37). No timing is asserted: the figures of a smoke run mean nothing."""

from __future__ import annotations

from bench import grpo_job_bench


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
