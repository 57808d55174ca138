"""`make bench`: every benchmark of the project, one after the other."""

from bench import diff_bench, grpo_job_bench, plan_bench, preflight_bench, staging_bench


def main() -> None:
    print("== offline plan vs SDK import floor ==")
    plan_bench.main([])
    print("\n== make diff's renders: fresh interpreter vs forked from the render server ==")
    diff_bench.main([])
    print("\n== what preflight adds to a preview, in sequential invoke rounds ==")
    preflight_bench.main([])
    print("\n== GrpoJob create -> RUNNING vs Ray's CLI and raw client ==")
    grpo_job_bench.main()
    print("\n== staging script: model pipeline with a fake hub and a local sink ==")
    staging_bench.main()


if __name__ == "__main__":
    main()
