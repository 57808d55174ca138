"""Stand-in for `python3 -m verl.model_merger`: the same command line, a tiny "model"; a process
front of the verl model (tests/models/verl.py export_lines), for tests that run real Ray jobs.

It accepts what verl's merger accepts for FSDP (`merge --backend fsdp --local_dir <...>/actor
--target_dir <dir>`), refuses a checkpoint directory that does not exist (as verl's does), and
writes a Hugging Face-shaped directory: config.json and a weights file naming the step.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for its models

from tests.models.verl import export_lines  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["merge"])
    parser.add_argument("--backend", choices=["fsdp", "megatron"], required=True)
    parser.add_argument("--local_dir", required=True)
    parser.add_argument("--target_dir", required=True)
    args = parser.parse_args()
    missing, saved = export_lines(args.local_dir, args.target_dir)
    if not os.path.isdir(args.local_dir):
        print(missing, flush=True)
        return 1
    os.makedirs(args.target_dir, exist_ok=True)
    step = os.path.basename(os.path.dirname(args.local_dir.rstrip("/")))
    with open(os.path.join(args.target_dir, "config.json"), "w") as file:
        json.dump({"architectures": ["Qwen2ForCausalLM"], "merged_from": step}, file)
    with open(os.path.join(args.target_dir, "model.safetensors"), "w") as file:
        file.write(step)
    print(saved, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
