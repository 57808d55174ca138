"""`make bench`: every benchmark of the project, one after the other.

    python -m bench.run [--smoke]

`--smoke` runs each once in its quick mode (its figures mean nothing); tests/test_bench.py runs
each benchmark so in `make test`, so that none can rot unseen.
"""

import argparse

from bench import diff_bench, grpo_job_bench, plan_bench, preflight_bench, staging_bench


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="each benchmark once, quickly")
    smoke = ["--smoke"] if parser.parse_args(argv).smoke else []
    print("== offline plan vs SDK import floor ==")
    plan_bench.main(smoke)
    print("\n== make diff's renders: fresh interpreter vs forked from the render server ==")
    diff_bench.main(smoke)
    print("\n== what preflight adds to a preview, in sequential invoke rounds ==")
    preflight_bench.main(smoke)
    print("\n== GrpoJob create -> RUNNING vs Ray's CLI and raw client ==")
    grpo_job_bench.main(smoke)
    print("\n== staging script: model pipeline with a fake hub and a local sink ==")
    staging_bench.main(smoke)


if __name__ == "__main__":
    main()
