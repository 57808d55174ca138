"""Stand-in for `python3 -m verl.trainer.main_ppo`: prints verl-style step lines, then exits.

The lines look like verl's console logger behind Ray's actor prefix, including a numpy repr
and a NaN, so the metric parser sees what a real job log holds.
"""

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.3)
    parser.add_argument("--fail", action="store_true", help="exit 1 after the steps")
    parser.add_argument("--fail-once", metavar="MARKER", help="fail unless MARKER exists")
    parser.add_argument(
        "--all-metrics", action="store_true",
        help="also print the step time and throughput keys the dashboard charts",
    )
    parser.add_argument("--nan-reward-at", type=int, metavar="STEP", help="a NaN reward at STEP")
    args = parser.parse_args()
    for step in range(1, args.steps + 1):
        time.sleep(args.sleep)
        score = "nan" if step == args.nan_reward_at else f"{0.1 * step:.3f}"
        extra = (
            f" - timing_s/step:np.float64({10 + step / 2}) - perf/throughput:{1000.0 + 50 * step}"
            if args.all_metrics else ""
        )
        print(
            f"(TaskRunner pid={os.getpid()}) step:{step} - critic/score/mean:{score} - "
            f"actor/lr:np.float64(1e-05) - response_length/mean:{100 + step} - "
            f"timing_s/gen:nan{extra}",
            flush=True,
        )
    if args.fail_once and not os.path.exists(args.fail_once):
        open(args.fail_once, "w").close()
        print("CUDA error: out of memory (simulated)", flush=True)
        return 1
    if args.fail:
        print("CUDA error: out of memory (simulated)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
