"""Run the policy pack (policy/) against an offline plan: `make policy STACK=<stack>`.

    python -m tools.policy_check --stack a4 [--mode autopilot]   # renders the plan, then checks
    python -m tools.policy_check --plan build/a4/plan.json       # checks a plan already written
    python -m tools.policy_check --stack a4 --print-config       # the pack's config for a stack
    python -m tools.policy_check --stack a4 --policy-pack-config org.json   # an override

Each plan resource becomes the pulumi-policy argument object the engine would build for it
(ResourceValidationArgs, or a PolicyResource in StackValidationArgs), and each policy's own
`validate` runs on it: the same code `pulumi preview --policy-pack policy` runs. Each policy's
enforcement level and settings come from policy/config.json, then `--policy-pack-config` (the
CLI's flag and format), then the stack's own grant (allowForceDestroy); a disabled policy does
not run. Exit 1 when a mandatory policy is violated, and each violation is printed with its
policy and resource.

It runs in the pack's own venv (`make policy`: .venv-policy, policy/requirements.txt), reading
a plan.json the program's venv rendered; only `--stack` without a rendered plan needs both.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy import rules
from policy.pack_config import PackConfigError
from policy.resources import ALLOW_FORCE_DESTROY
from policy.rules import POLICIES
from tools import cli

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Violation:
    policy: str
    urn: str | None
    message: str
    mandatory: bool

    def __str__(self) -> str:
        level = "mandatory" if self.mandatory else "advisory"
        return f"[{level}] {self.policy}: {self.urn or 'stack'}\n    {self.message}"


def _options(resource: Mapping[str, Any]) -> PolicyResourceOptions:
    """The options the engine hands analyzers (no replaceOnChanges, retainOnDelete or import)."""
    opts = resource.get("options") or {}
    return PolicyResourceOptions(
        protect=bool(opts.get("protect")),
        ignore_changes=list(opts.get("ignoreChanges") or []),
        delete_before_replace=opts.get("deleteBeforeReplace"),
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
        parent=resource.get("parent"),
    )


def policy_config(stack: str) -> dict[str, dict[str, Any]]:
    """Per-policy config for a stack, from its config files: what the stack has "configured".

    Only `<project>:deleteBucketOnDestroy` allows a force-destroyed bucket. Read from the stack
    file (as the CLI would merge it), not from the plan, so the program cannot grant itself it.
    """
    from tools import plan as offline_plan

    config = offline_plan.stack_inputs(stack).config
    key = f"{offline_plan.project_name()}:deleteBucketOnDestroy"
    return {"bucket-hardened": {ALLOW_FORCE_DESTROY: config.get(key) == "true"}}


def _resource_args(resource: Mapping[str, Any], config: Mapping[str, Any]) -> ResourceValidationArgs:
    return ResourceValidationArgs(
        resource_type=resource["type"],
        props=resource["inputs"],
        urn=resource["urn"],
        name=resource["name"],
        opts=_options(resource),
        provider=None,
        config=config,
    )


def _stack_args(resources: Iterable[Mapping[str, Any]], config: Mapping[str, Any]) -> StackValidationArgs:
    policy_resources = [
        PolicyResource(
            resource_type=r["type"], props=r["inputs"], urn=r["urn"], name=r["name"],
            opts=_options(r), provider=None, parent=None, dependencies=[], property_dependencies={},
        )
        for r in resources
    ]
    return StackValidationArgs(resources=policy_resources, config=config)


def check_resources(
    resources: list[Mapping[str, Any]],
    config: Mapping[str, Mapping[str, Any]] | None = None,
    policies: Iterable[Any] = POLICIES,
    levels: Mapping[str, str] | None = None,
) -> list[Violation]:
    """Every violation the policies report for these plan resources. `config`: each policy's
    settings; `levels`: each policy's enforcement level (default: policy/config.json's)."""
    levels = levels if levels is not None else {n: s.level for n, s in rules.settings().items()}
    found: list[Violation] = []
    for policy in policies:
        level = levels.get(policy.name, rules.PACK_LEVEL.value)
        if level == "disabled":
            continue
        mandatory = level == "mandatory"
        own_config = (config or {}).get(policy.name, {})

        def report(message: str, urn: str | None = None, _policy=policy, _default=None) -> None:
            found.append(Violation(_policy.name, urn or _default, message, mandatory))

        if isinstance(policy, StackValidationPolicy):
            policy.validate(_stack_args(resources, own_config), report)
        elif isinstance(policy, ResourceValidationPolicy):
            for resource in resources:
                def report_for(message: str, urn: str | None = None, _urn=resource["urn"]) -> None:
                    report(message, urn or _urn)

                policy.validate(_resource_args(resource, own_config), report_for)
    return found


def pack_settings(stack: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Each policy's settings for `stack`: the pack's file, `overrides`, the stack's grant."""
    try:
        return rules.settings(overrides, policy_config(stack))
    except PackConfigError as error:
        raise cli.UsageError(str(error)) from None


def check_plan(plan: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> list[Violation]:
    own = pack_settings(plan["stack"], overrides)
    return check_resources(
        plan["resources"], {n: s.properties for n, s in own.items()}, POLICIES,
        {n: s.level for n, s in own.items()},
    )


def cli_config(stack: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The pack's whole config for `stack`, in the format of `--policy-pack-config`."""
    return {
        name: {"enforcementLevel": own.level, **own.properties}
        for name, own in pack_settings(stack, overrides).items()
    }


def _render(stack: str, mode: str | None) -> dict[str, Any]:
    from tools import plan as offline_plan

    inputs, recording = offline_plan.run_program(stack, mode)
    return offline_plan.plan_document(stack, inputs, recording)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="render this stack's plan first (a4, a3u, a4x)")
    source.add_argument("--plan", type=Path, help="a plan.json already rendered")
    parser.add_argument("--mode", choices=["standard", "autopilot"])
    parser.add_argument("--print-config", action="store_true",
                        help="print the pack's config for this stack as JSON (for --policy-pack-config)")
    parser.add_argument("--policy-pack-config", type=Path,
                        help="levels and settings over policy/config.json, as the CLI's flag")
    args = parser.parse_args(argv)
    overrides = None
    if args.policy_pack_config:
        try:
            overrides = json.loads(args.policy_pack_config.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise cli.UsageError(f"--policy-pack-config {str(args.policy_pack_config)!r}: {error}") from None
    if args.plan and not args.plan.is_file():
        raise cli.UsageError(f"--plan {str(args.plan)!r} does not exist: render it with "
                             "`python -m tools.plan --stack <stack>` (build/<stack>/plan.json)")
    plan = json.loads(args.plan.read_text()) if args.plan else _render(args.stack, args.mode)
    if args.print_config:
        print(json.dumps(cli_config(plan["stack"], overrides), indent=2))
        return 0
    violations = check_plan(plan, overrides)
    label = plan["stack"] + (f"/{args.mode}" if args.mode else "")
    for violation in violations:
        print(violation)
    mandatory = [v for v in violations if v.mandatory]
    print(f"{label}: {len(POLICIES)} policies, {len(plan['resources'])} resources, "
          f"{len(mandatory)} mandatory violation(s), {len(violations) - len(mandatory)} advisory")
    return 1 if mandatory else 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
