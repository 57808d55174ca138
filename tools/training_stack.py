"""The training stack, checked offline against verl at its pinned ref: make training-stack.

For each stack's run as the program ships it (its GrpoRun's entrypoint, rendered under the mock
runtime), this
- composes verl's own config at the pinned ref (third_party/verl/config, with Hydra, in struct
  mode, as main_ppo does) with the run's overrides;
- reads every value the program sets back from where verl reads it, not from the override text:
  each key holds the value the program put there, and none lies under a group verl composes but
  never reads (components/facts/verl.py IGNORED_GROUPS, e.g. the legacy reward keys);
- walks the code the composed config selects (main_ppo's trainer, the trainer class, the
  workers, the rollout server, the reward manager and agent loop, SELECTED below) through the
  imports verl runs for certain (third_party/verl/imports.json, tools/verl_imports.py), and
  looks up every module outside verl among what the pods have: the standard library, the
  image's modules (third_party/images/, an inference from its Dockerfile) and the pods' own
  installs (components/facts/pins.py POD_PACKAGES).
What only a GPU run can show (that the image really holds what its Dockerfile says, the
driver, NCCL, memory) is listed in docs/training.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from components.facts import pins, verl

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "third_party" / "verl"
IMAGES = ROOT / "third_party" / "images"
ENTRY = "verl.trainer.main_ppo"


@dataclass(frozen=True)
class Selected:
    """Code a run executes: a module (imported), and which of its functions run: a qualified
    name ("TaskRunnerV1" is that class's every method), "" every function, None none."""

    module: str
    functions: str | None
    why: str


def selected(config: Any) -> list[Selected]:
    """What the composed config makes main_ppo run, each with the line of verl that selects it
    (all at the pinned ref)."""
    code = [Selected(ENTRY, "main", "the entrypoint (main_ppo.py:157-180)"),
            Selected(ENTRY, "run_ppo", "main calls it (main_ppo.py:171)")]
    trainer = config.trainer
    if trainer.use_v1:
        code += [
            Selected(ENTRY, "TaskRunnerV1", "trainer.use_v1 (main_ppo.py:170-171)"),
            # get_trainer_cls(trainer.v1.trainer_mode) (main_ppo.py:133) reads the registry the
            # package fills when imported (verl/trainer/ppo/v1/__init__.py:15-19).
            Selected("verl.trainer.ppo.v1", None, "main_ppo.py:133"),
            Selected(_V1_TRAINERS[trainer.v1.trainer_mode], "",
                     f"trainer.v1.trainer_mode={trainer.v1.trainer_mode}"),
            Selected("verl.trainer.ppo.v1.trainer_base", "PPOTrainer", "the trainers' base"),
            Selected("verl.trainer.ppo.v1.agent_loop_tq", "", "main_ppo.py:115-126"),
        ]
    else:
        code.append(Selected("verl.trainer.main_ppo_v0", "TaskRunner", "trainer.use_v1=false"))
    rollout = config.actor_rollout_ref.rollout
    code.append(Selected(_ROLLOUTS[rollout.name], "", f"rollout.name={rollout.name}"))
    code.append(Selected(_AGENT_LOOPS[rollout.agent.default_agent_loop], "",
                         f"rollout.agent.default_agent_loop={rollout.agent.default_agent_loop}"))
    strategy = config.actor_rollout_ref.actor.strategy
    code.append(Selected(_ENGINES[strategy], "", f"actor.strategy={strategy}"))
    code.append(Selected("verl.workers.engine_workers", "", "the engine workers (V1 and v0)"))
    manager = config.reward.reward_manager.name
    code.append(Selected(_REWARD_MANAGERS[manager], "", f"reward.reward_manager.name={manager}"))
    return code


# Each table maps a config value to the module that value selects at the pinned ref.
_V1_TRAINERS = {  # @register_trainer in each module
    "sync": "verl.trainer.ppo.v1.trainer_sync",
    "colocate_async": "verl.trainer.ppo.v1.trainer_colocate_async",
    "separate_async": "verl.trainer.ppo.v1.trainer_separate_async",
}
_ROLLOUTS = {  # verl/workers/rollout/replica.py's registry of rollout servers
    "vllm": "verl.workers.rollout.vllm_rollout.vllm_async_server",
    "sglang": "verl.workers.rollout.sglang_rollout.async_sglang_server",
}
_AGENT_LOOPS = {  # @register in each module
    "single_turn_agent": "verl.experimental.agent_loop.single_turn_agent_loop",
    "tool_agent": "verl.experimental.agent_loop.tool_agent_loop",
}
_ENGINES = {  # the engine registry (verl/workers/engine/__init__.py)
    "fsdp": "verl.workers.engine.fsdp.transformer_impl",
    "fsdp2": "verl.workers.engine.fsdp.transformer_impl",
    "megatron": "verl.workers.engine.megatron.transformer_impl",
}
_REWARD_MANAGERS = {  # @register in each module
    "naive": "verl.experimental.reward_loop.reward_manager.naive",
    "dapo": "verl.experimental.reward_loop.reward_manager.dapo",
}


@lru_cache(maxsize=1)
def index() -> dict[str, Any]:
    """third_party/verl/imports.json: the ref it was read at, and each module's imports."""
    return json.loads((VENDOR / "imports.json").read_text())


def compose(overrides: list[str]) -> Any:
    """verl's ppo_trainer config at the pinned ref with `overrides`, in struct mode, as
    main_ppo's @hydra.main composes it (an unknown key is an error here, as there)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(VENDOR / "config"), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


def overrides_of(entrypoint: str) -> list[str]:
    """The Hydra overrides of a rendered entrypoint: the words after `-m verl.trainer.main_ppo`."""
    words = shlex.split(entrypoint)
    return words[words.index(ENTRY) + 1:]


def readback_problems(config: Any, overrides: list[str]) -> list[str]:
    """Each override whose value is not where verl reads it in the composed config."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    parser = OverridesParser.create()
    problems = []
    for text in overrides:
        override = parser.parse_override(text)
        key = override.key_or_group
        group = key.split(".")[0]
        if group in verl.IGNORED_GROUPS:
            problems.append(
                f"{text}: verl composes `{group}` at the pinned ref but never reads it (it reads "
                f"{verl.IGNORED_GROUPS[group]}, components/facts/verl.py)")
            continue
        if override.is_delete():
            continue
        want, got = override.value(), OmegaConf.select(config, key)
        if not _same(want, got):
            problems.append(f"{text}: verl reads {key} as {got!r}")
    return problems


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        try:
            return math.isclose(float(want), float(got), rel_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return want == got or str(want) == str(got)


def image_modules(image: str) -> dict[str, str]:
    """The top-level modules third_party/images/ records for `image`, each with its source."""
    for path in sorted(IMAGES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if image in data["images"]:
            return {name.split(".")[0]: source for name, source in data["modules"].items()}
    raise KeyError(f"third_party/images/ records no package list for {image}")


def provided(image: str) -> set[str]:
    """What a Ray pod of this image can import: the standard library, the image's modules and
    the pods' own installs."""
    return (set(sys.stdlib_module_names) | set(image_modules(image))
            | {package.module for package in pins.POD_PACKAGES})


@dataclass
class Walk:
    """The modules the selected code imports for certain, and what none of the pod provides."""

    modules: set[str] = field(default_factory=set)
    missing: dict[str, list[str]] = field(default_factory=dict)  # module -> the import chain


def walk(code: list[Selected], have: set[str]) -> Walk:
    """Follow the certain imports of `code` through verl; note each outside module not in
    `have`, with the chain of verl modules that leads to it."""
    modules = index()["modules"]
    found = Walk()

    def visit(name: str, chain: list[str]) -> None:
        if name in found.modules or name not in modules:
            return
        found.modules.add(name)
        parts = name.split(".")
        for depth in range(1, len(parts)):  # a package's __init__ runs before its modules
            visit(".".join(parts[:depth]), chain)
        for base, item in modules[name]["at_import"]:
            need(base, item, chain + [name])

    def need(base: str, item: str | None, chain: list[str]) -> None:
        top = base.split(".")[0]
        if top != "verl":
            if top not in have:
                found.missing.setdefault(top, chain)
            return
        if item and f"{base}.{item}" in modules:
            visit(f"{base}.{item}", chain)
        visit(base, chain)

    for part in code:
        if part.module not in modules:
            raise KeyError(f"{part.module} ({part.why}) is not in verl at the pinned ref")
        visit(part.module, [f"{part.module} ({part.why})"])
        if part.functions is None:
            continue
        for function, imports in modules[part.module]["functions"].items():
            if part.functions in ("", function) or function.startswith(part.functions + "."):
                for base, item in imports:
                    need(base, item, [f"{part.module}.{function} ({part.why})"])
    return found


@dataclass
class Report:
    """One stack's training stack and what the check found."""

    stack: str
    image: str
    trainer: str
    modules: int
    problems: list[str]


def check(stack: str, entrypoint: str, image: str) -> Report:
    """The check of one stack's rendered entrypoint on `image`."""
    overrides = overrides_of(entrypoint)
    config = compose(overrides)
    problems = readback_problems(config, overrides)
    found = walk(selected(config), provided(image))
    for module, chain in sorted(found.missing.items()):
        problems.append(f"`import {module}` runs for certain ({' <- '.join(reversed(chain))}), "
                        f"and neither {image} nor the pods' installs provide it")
    trainer = "V1 (TaskRunnerV1)" if config.trainer.use_v1 else "legacy (main_ppo_v0)"
    return Report(stack, image, trainer, len(found.modules), problems)


def _rendered(stack: str, mode: str | None) -> tuple[str, str]:
    from tools import plan
    from tools.mockrun import unwrap

    inputs, recording = plan.run_program(stack, mode or "standard")
    run = recording.one("pulumi-python:dynamic/verl-gke:GrpoRun", "grpo-run")
    spec = unwrap(recording.of_type("kubernetes:ray.io/v1:RayCluster")[0].inputs["spec"])
    image = spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    return unwrap(run.inputs["entrypoint"]), image


def _pinned(image: str) -> str:
    """The pinned image a mirrored reference names (the mirror prefixes the registry path)."""
    return next((pinned for pinned in pins.VERL_IMAGES.values() if image.endswith(pinned)),
                image)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", help="a stack (default: a4, a3u, a4x)")
    parser.add_argument("--mode", choices=["standard", "autopilot"])
    args = parser.parse_args(argv)
    failed = False
    print(f"verl {index()['ref'][:12]} ({pins.VERL_REPO}), pods add "
          f"{', '.join(p.requirement for p in pins.POD_PACKAGES)} (--no-deps); "
          f"GPU driver >= {pins.MIN_GPU_DRIVER}; Ray {pins.RAY_VERSION}")
    for stack in args.stack or ["a4", "a3u", "a4x"]:
        entrypoint, image = _rendered(stack, args.mode)
        report = check(stack, entrypoint, _pinned(image))
        print(f"{stack}: {report.image}, {report.trainer} trainer, {report.modules} verl modules "
              f"walked: {'ok' if not report.problems else f'{len(report.problems)} problem(s)'}")
        for problem in report.problems:
            print(f"  - {problem}")
        failed |= bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    from tools import cli

    sys.exit(cli.run(main))
