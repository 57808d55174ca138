"""The stack outputs of the offline plan, as `pulumi stack output --json` prints them.

    python -m tools.outputs --stack a4 [--mode autopilot]

Runs the program under the mock runtime like `make plan` and prints one JSON object of every
output, secrets masked as "[secret]" (what the CLI prints without --show-secrets). Values only
a real deployment knows (the job's status, times and metrics) are null. The object is checked
against schemas/stack-outputs.schema.json before it is printed: a mismatch exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jsonschema

from tools import cli, plan

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "stack-outputs.schema.json"


def stack_outputs(stack: str, mode: str | None = None) -> dict:
    _, recording = plan.run_program(stack, mode)
    return recording.plain_outputs()


def schema_problems(outputs: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in sorted(validator.iter_errors(outputs), key=lambda e: list(e.absolute_path))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="a4, a3u or a4x")
    parser.add_argument("--mode", choices=["standard", "autopilot"], help="override clusterMode")
    args = parser.parse_args(argv)
    outputs = stack_outputs(args.stack, args.mode)
    problems = schema_problems(outputs)
    if problems:
        print(f"outputs do not match {SCHEMA.name}:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(json.dumps(outputs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
