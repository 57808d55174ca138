"""Stand-in for `python3 -m verl.trainer.main_ppo`: prints verl-style step lines, then exits.

The lines look like verl's console logger behind Ray's actor prefix, including a numpy repr
and a NaN, so the metric parser sees what a real job log holds. With --checkpoint-dir it
checkpoints and resumes the way verl does (verl/utils/checkpoint/checkpoint_manager.py: a
`global_step_<n>` directory per save and `latest_checkpointed_iteration.txt` naming the last;
verl/trainer/ppo/ray_trainer.py _load_checkpoint with resume_mode=auto), printing verl's
"Load from checkpoint folder" line when it resumes.
"""

import argparse
import os
import sys
import time

TRACKER = "latest_checkpointed_iteration.txt"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.3)
    parser.add_argument("--fail", action="store_true", help="exit 1 after the steps")
    parser.add_argument("--fail-once", metavar="MARKER", help="fail unless MARKER exists")
    parser.add_argument("--fail-at", type=int, default=0, help="with --fail-once: at this step")
    parser.add_argument("--checkpoint-dir", help="save every --save-freq steps, resume from it")
    parser.add_argument("--save-freq", type=int, default=1)
    parser.add_argument("--log-mb", type=float, default=0, help="print this much filler first")
    parser.add_argument("--print", dest="extra", default="", help="print this line first")
    parser.add_argument(
        "--all-metrics", action="store_true",
        help="also print the step time and throughput keys the dashboard charts",
    )
    parser.add_argument("--nan-reward-at", type=int, metavar="STEP", help="a NaN reward at STEP")
    args = parser.parse_args()
    if args.extra:
        print(args.extra, flush=True)
    _filler(args.log_mb)
    # verl's phase lines before the first step (components/ray/protocol.py PHASES).
    print(f"(TaskRunner pid={os.getpid()}) TaskRunner hostname: localhost, PID: {os.getpid()}",
          flush=True)
    print(f"(TaskRunner pid={os.getpid()}) Total training steps: {args.steps}", flush=True)
    start = _resume(args.checkpoint_dir)
    for step in range(start + 1, args.steps + 1):
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
        if args.checkpoint_dir and step % args.save_freq == 0:
            _save(args.checkpoint_dir, step)
        if args.fail_once and step == args.fail_at and not os.path.exists(args.fail_once):
            return _fail_once(args.fail_once)
    if args.fail_once and not args.fail_at and not os.path.exists(args.fail_once):
        return _fail_once(args.fail_once)
    if args.fail:
        print("CUDA error: out of memory (simulated)", flush=True)
        return 1
    return 0


def _fail_once(marker: str) -> int:
    open(marker, "w").close()
    print("CUDA error: out of memory (simulated)", flush=True)
    return 1


def _resume(directory: str | None) -> int:
    if not directory:
        return 0
    tracker = os.path.join(directory, TRACKER)
    if not os.path.exists(tracker):
        print("Training from scratch", flush=True)
        return 0
    with open(tracker) as file:
        step = int(file.read())
    print(f"Load from checkpoint folder: {directory}/global_step_{step}", flush=True)
    return step


def _save(directory: str, step: int) -> None:
    # verl saves the actor's shards under global_step_<n>/actor (what the model merger reads).
    os.makedirs(os.path.join(directory, f"global_step_{step}", "actor"), exist_ok=True)
    partial = os.path.join(directory, TRACKER + ".partial")
    with open(partial, "w") as file:
        file.write(str(step))
    os.replace(partial, os.path.join(directory, TRACKER))  # a stop mid-write leaves the old one


def _filler(megabytes: float) -> None:
    """NCCL-INFO-like noise, as days of a real run leave in the driver log."""
    line = "(WorkerDict pid=1) NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read " + "x" * 47
    count = int(megabytes * 1024 * 1024 / (len(line) + 1))
    chunk = "\n".join([line] * 1000) + "\n"
    for _ in range(count // 1000):
        sys.stdout.write(chunk)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
