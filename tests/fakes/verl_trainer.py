"""Stand-in for `python3 -m verl.trainer.main_ppo`: prints verl-style step lines, then exits.

A process front of the verl model (tests/models/verl.py, whose lines and layout are the pinned
verl's, components/facts/verl.py), for tests that run real Ray jobs: the phase lines,
step lines (verl's console format behind Ray's actor prefix, with a numpy repr and a NaN, and
`timing_s/step` on every training step), an optional validation before training (a step line of
val-core/ keys only), and with --checkpoint-dir the checkpoint layout and the resume line
(verl/trainer/ppo/v1/trainer_base.py _load_checkpoint with resume_mode=auto).
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for its verl facts

from components.facts import verl  # noqa: E402
from tests.models import verl as model  # noqa: E402

TRACKER = verl.CHECKPOINT_TRACKER


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
        help="also print the throughput key the dashboard charts",
    )
    parser.add_argument("--val-before-train", action="store_true",
                        help="log a validation's step line before the first step, as verl does")
    parser.add_argument("--nan-reward-at", type=int, metavar="STEP", help="a NaN reward at STEP")
    args = parser.parse_args()
    if args.extra:
        print(args.extra, flush=True)
    _filler(args.log_mb)
    actor = model.actor(os.getpid())
    # verl's phase lines before the first step, through its logging handler's format.
    data_loaded, workers_up = model.phase_lines(args.steps, time.strftime("%Y-%m-%d %H:%M:%S"))
    print(actor + data_loaded, flush=True)
    start = _resume(args.checkpoint_dir)
    print(actor + workers_up, flush=True)
    if args.val_before_train:
        time.sleep(args.sleep)
        print(actor + verl.step_line(start, {"val-core/openai/gsm8k/acc/mean@1": 0.25}),
              flush=True)
    for step in range(start + 1, args.steps + 1):
        time.sleep(args.sleep)
        metrics: dict[str, object] = {
            "critic/score/mean": "nan" if step == args.nan_reward_at else f"{0.1 * step:.3f}",
            "actor/lr": "np.float64(1e-05)",
            "response_length/mean": 100 + step,
            "timing_s/gen": "nan",
        }
        if args.all_metrics:
            metrics["perf/throughput"] = 1000.0 + 50 * step
        print(actor + model.training_step_line(step, metrics, f"np.float64({10 + step / 2})"),
              flush=True)
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
        print(model.resume_line(None, None), flush=True)
        return 0
    with open(tracker) as file:
        step = int(file.read())
    print(model.resume_line(model.step_folder(directory, step), step), flush=True)
    return step


def _save(directory: str, step: int) -> None:
    # verl saves the actor's shards under global_step_<n>/actor (what the model merger reads).
    os.makedirs(os.path.join(model.step_folder(directory, step), verl.CHECKPOINT_ACTOR_DIR),
                exist_ok=True)
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
