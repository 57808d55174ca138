"""The training stack, checked offline against verl at its pinned ref (tools/training_stack.py).

The default run of every stack must select only code its pods can import, and every value the
program sets must be where verl reads it: on ca31a24 the a4 and a3u runs died importing
transfer_queue a minute after submission, and a brought reward function was silently ignored.
"""

from __future__ import annotations

import sys

import pytest
import yaml

from components.facts import pins, verl
from components.facts.hardware import profile
from components.runspec.run import GrpoRunConfig, resolve_run
from tests.conftest import rendered
from tools import training_stack, verl_imports
from tools.mockrun import unwrap

STACKS = ["a4", "a3u", "a4x"]


def _entrypoint(stack: str) -> str:
    """The entrypoint of the stack's rendered GrpoRun, as the program ships it."""
    _, recording = rendered(stack, "standard")
    return unwrap(recording.one("pulumi-python:dynamic/verl-gke:GrpoRun", "grpo-run")
                  .inputs["entrypoint"])


def _shipped(stack: str) -> tuple[list[str], str]:
    """The overrides of the stack's rendered GrpoRun and the pinned image its RayCluster runs."""
    return (training_stack.overrides_of(_entrypoint(stack)),
            pins.VERL_IMAGES[profile(stack).arch])


def test_the_pin_the_facts_and_the_vendored_verl_are_one_commit():
    """components/facts/verl.py and third_party/verl/ describe the commit the program stages: a
    moved pin fails here until both are read again at the new ref."""
    assert verl.AT_REF.startswith(pins.VERL_REF)
    assert training_stack.index()["ref"] == verl.AT_REF


@pytest.mark.parametrize("stack", STACKS)
def test_the_default_run_selects_only_code_its_pods_can_import(stack):
    """The stack's run as rendered composes at the pin to the V1 trainer, and every module the
    code it selects imports for certain is in the image or installed by the pods."""
    report = training_stack.check(stack, _entrypoint(stack), pins.VERL_IMAGES[profile(stack).arch])
    assert report.problems == []
    assert report.trainer.startswith("V1") and report.modules > 100


@pytest.mark.parametrize("stack", STACKS)
def test_without_the_pods_installs_the_walk_finds_transfer_queue_missing(stack):
    """What made the a4/a3u default run die: the V1 trainer imports transfer_queue, which no
    verl image ships; the walk finds it, so the pods' install is what makes the path whole."""
    overrides, image = _shipped(stack)
    config = training_stack.compose(overrides)
    bare = set(sys.stdlib_module_names) | set(training_stack.image_modules(image))
    found = training_stack.walk(training_stack.selected(config), bare)
    assert set(found.missing) == {verl.V1_NEEDS}
    assert {package.module for package in pins.POD_PACKAGES} == {verl.V1_NEEDS}


@pytest.mark.parametrize("stack", STACKS)
def test_every_value_the_program_sets_is_where_verl_reads_it(stack):
    """Each override of the rendered run, read back from verl's composed config (not from the
    override text), holds the program's value; none is under a group verl ignores."""
    overrides, _ = _shipped(stack)
    config = training_stack.compose(overrides)
    assert training_stack.readback_problems(config, overrides) == []
    assert config.trainer.use_v1 is True
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    assert config.trainer.max_actor_ckpt_to_keep == 2


def test_a_brought_reward_function_is_read_where_verl_reads_it():
    """rewardFunctionPath and rewardFunctionName land in reward.custom_reward_function, which
    the pinned verl's reward loop reads (at ca31a24 they went to the legacy group, ignored); a
    path without a name calls compute_score, written out."""
    hw = profile("a4")
    named = GrpoRunConfig(reward_function_path="/data/workdirs/x/reward.py",
                          reward_function_name="exact_answer")
    unnamed = GrpoRunConfig(reward_function_path="/data/workdirs/x/reward.py")
    for run, name in ((named, "exact_answer"), (unnamed, verl.DEFAULT_REWARD_FUNCTION_NAME)):
        overrides = [f"{k}={v}" for k, v in resolve_run(run, hw, 2).overrides.items()]
        config = training_stack.compose(overrides)
        assert training_stack.readback_problems(config, overrides) == []
        reward = config.reward.custom_reward_function
        assert (reward.path, reward.name) == ("/data/workdirs/x/reward.py", name)


def test_the_readback_names_a_key_verl_composes_but_never_reads():
    """The legacy reward keys compose without error at the pin; the check still refuses them."""
    overrides = ["custom_reward_function.path=/data/r.py", "custom_reward_function.name=f"]
    config = training_stack.compose(overrides)
    assert config.reward.custom_reward_function.path is None  # what verl would have read
    problems = training_stack.readback_problems(config, overrides)
    assert len(problems) == 2 and "never reads it" in problems[0]
    assert "reward.custom_reward_function" in problems[0]


def test_extra_overrides_cannot_reach_the_keys_verl_ignores_or_switch_the_trainer():
    """An extraOverrides entry under the legacy reward group, or one that picks verl's trainer,
    is refused before anything is created, naming the keys to set instead."""
    run = GrpoRunConfig(extra_overrides={"custom_reward_function.path": "/data/r.py",
                                         "trainer.use_v1": False})
    problems = resolve_run(run, profile("a4"), 2).problems
    legacy = next(p for p in problems if "custom_reward_function.path" in p)
    assert "never reads" in legacy and "rewardFunctionPath" in legacy
    assert any("trainer.use_v1" in p and "V1 trainer" in p for p in problems)


def test_what_the_pods_install_needs_only_what_the_image_has():
    """Each pod package is installed with --no-deps, so each module its own requirements name
    must already be in the image (or the standard library), and it must not be in the image
    already (else the install is noise on every pod's start)."""
    for image in set(pins.VERL_IMAGES.values()):
        modules = training_stack.image_modules(image)
        for package in pins.POD_PACKAGES:
            assert set(package.needs) <= set(modules) | set(sys.stdlib_module_names)
            assert package.module not in modules


def test_every_image_module_says_where_it_comes_from():
    """The image's package list is an inference; every entry carries its source."""
    data = yaml.safe_load((training_stack.IMAGES / "verl-vllm023.yaml").read_text())
    assert set(data["images"]) == set(pins.VERL_IMAGES.values())
    assert all(isinstance(source, str) and source.strip() for source in data["modules"].values())


def test_the_vendored_index_holds_the_imports_the_facts_cite():
    """Spot checks of third_party/verl/imports.json against lines components/facts/verl.py
    cites: the V1 trainer imports transfer_queue at module level (trainer_base.py:30), and
    TaskRunnerV1.run imports it when called (main_ppo.py:131)."""
    modules = training_stack.index()["modules"]
    assert ["transfer_queue", None] in modules["verl.trainer.ppo.v1.trainer_base"]["at_import"]
    run = modules["verl.trainer.main_ppo"]["functions"]["TaskRunnerV1.run"]
    assert ["transfer_queue", None] in run


SOURCE = '''
import os
from typing import TYPE_CHECKING
from . import sibling
if TYPE_CHECKING:
    import typed_only
try:
    import optional
except ImportError:
    optional = None
if os.environ.get("X"):
    import conditional
class Engine:
    import in_class_body
    def load(self):
        import on_call
        if self:
            import on_call_if
        def inner():
            import nested
'''


def test_only_imports_that_run_for_certain_are_read():
    """An import under `if`, TYPE_CHECKING or a `try` with a handler may not run and is left
    out; a class body's runs at import; a function's run when it is called, each under its
    qualified name; relative imports resolve against the package."""
    found = verl_imports.read(SOURCE, "verl.pkg.mod", is_package=False)
    assert found.at_import == [("os", None), ("typing", "TYPE_CHECKING"), ("verl.pkg", "sibling"),
                               ("in_class_body", None)]
    assert found.functions["Engine.load"] == [("on_call", None)]
    assert found.functions["Engine.load.inner"] == [("nested", None)]


def test_a_validation_before_training_is_not_a_step():
    """What the fake trainer prints (the pinned verl's lines, components/facts/verl.py): its
    validation's step line before training counts as no step for the program, its first
    training step does, and the phases are seen in order."""
    import subprocess
    from pathlib import Path

    from components.supervisor import protocol

    fake = Path(__file__).parent / "fakes" / "verl_trainer.py"
    log = subprocess.run([sys.executable, str(fake), "--steps", "1", "--sleep", "0",
                          "--val-before-train"], capture_output=True, text=True, check=True).stdout
    validation = log[: log.index("step:1 ")]
    assert "step:0 - val-core/" in validation
    assert protocol.last_metrics(validation) == {}
    assert protocol.phase(validation) == len(verl.PHASES)
    assert protocol.last_metrics(log)["step"] == 1.0


def test_every_verl_key_the_program_names_is_in_verls_config_at_the_pin():
    """The program's own lists of verl keys (the continuation keys that keep a run, the offload
    and protected keys, the reference dtype, where the reward is read, the trainer switch) name
    keys of verl's composed config at the pinned ref, and its copy of verl's trainer defaults is
    verl's: a key verl renamed would otherwise be silently inert."""
    from omegaconf import OmegaConf

    from components.forms import hydra_overrides
    from components.runspec import run, run_identity

    config = training_stack.compose([])
    keys = {*run_identity.CONTINUATION_OVERRIDES, *run._OFFLOAD_KEYS,
            *hydra_overrides.PROTECTED_KEYS, run_identity.REFERENCE_DTYPE[0],
            verl.REWARD_FUNCTION_PATH, verl.REWARD_FUNCTION_NAME, verl.USE_V1[0]}
    missing = sorted(key for key in keys
                     if OmegaConf.select(config, key, default="<absent>") == "<absent>")
    assert missing == []
    trainer = OmegaConf.to_container(config.trainer, resolve=False)
    assert {k: trainer[k] for k in hydra_overrides._VERL_TRAINER_DEFAULTS} == \
        hydra_overrides._VERL_TRAINER_DEFAULTS
