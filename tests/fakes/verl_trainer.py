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
    args = parser.parse_args()
    for step in range(1, args.steps + 1):
        time.sleep(args.sleep)
        score = 0.1 * step
        print(
            f"(TaskRunner pid={os.getpid()}) step:{step} - critic/score/mean:{score:.3f} - "
            f"actor/lr:np.float64(1e-05) - response_length/mean:{100 + step} - "
            "timing_s/gen:nan",
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
