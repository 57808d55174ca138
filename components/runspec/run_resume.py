"""Beginning a run from another run's work: a resume (`job.resumeFrom`) or a warm start
(`job.warmStartFrom`), and what each restores, as verl at the pinned ref does it.

A resume continues the other run's training: verl's `resume_mode=resume_path` sets the step
count from the directory's name (verl/trainer/ppo/v1/trainer_base.py:689), loads the actor's
weights, its optimizer state (fsdp_checkpoint_manager.py:185, `optimizer.load_state_dict`,
which puts back each parameter group's saved learning rate), the LR scheduler
(:200-202, the saved `base_lrs`), the RNG, and the dataloader's position (trainer_base.py:
706-709). So a changed learning rate does not apply (TRAINING-REVIEW-2.md finding 6: AdamW
configured at 1e-7 and loaded from a 1e-6 state trains at 1e-6), and a resumed finished run
starts past its last step and runs none (trainer_base.py:353). What a resume is for: the same
training, on a new cluster or under a new run name.

A warm start begins a new training from the other run's weights only: its exported Hugging Face
model (`<run>/huggingface`, which the supervisor writes when that run SUCCEEDS, the `job.modelUri`
output) becomes `actor_rollout_ref.model.path`, so verl builds the actor and the reference from
it as from any model: a fresh optimizer at this run's learning rate, step 0, the data from the
start, at any world size. verl's own `actor.checkpoint.load_contents=[model]`
(verl/trainer/config/actor/actor.yaml:135, read by the FSDP engine's checkpoint manager,
verl/utils/checkpoint/checkpoint_manager.py:52-65) loads weights only from a sharded
checkpoint too, but verl still takes the step count from the directory's name and restores the
dataloader's position (trainer_base.py:689, :706-709), and the shards need the same world size:
a fresh optimizer in the middle of the old schedule, not a new training. The export is merged
in bf16 (verl/model_merger/base_model_merger.py:390-417, with the tokenizer): the fp32 master
weights' low bits are not carried over, as for any model loaded from the Hub.
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from components.facts.layout import CHECKPOINT_ROOT
from components.messages import quoted
from components.runspec.run_config import CONFIG_KEY, HYDRA_KEYS

if TYPE_CHECKING:
    from components.runspec.run_config import GrpoRunConfig
# Where the export writes the merged model, inside a run's directory.
EXPORT_SUBDIR = "huggingface"
MODEL_PATH_KEY = HYDRA_KEYS["model_path"]
# Optimizer settings a resume would replace with the source run's (the optimizer state holds
# the learning rate; weight decay and betas are in its param groups as well).
_OPTIMIZER_PREFIX = "actor_rollout_ref.actor.optim."


def warm_start_model(run_dir: str) -> str:
    """The exported model of `run_dir`, on the mount: what a warm start trains from."""
    return f"{CHECKPOINT_ROOT}/{run_dir}/{EXPORT_SUBDIR}"


def warm_start_check(run_dir: str) -> str:
    """Shell that stops the attempt, with the reason, when the export is not there."""
    path = warm_start_model(run_dir)
    return (
        f'[ -f {path}/config.json ] || {{ echo "verl-gke: no exported model to warm-start from '
        f'at {path}: the run exports it when it SUCCEEDS (job.exportModel)" >&2; exit 1; }}'
    )


def begin_problems(run: GrpoRunConfig, user_set: Set[str]) -> list[str]:
    """A resume and a warm start together, and a resume with optimizer settings it would
    silently replace with the source run's."""
    problems = []
    if run.resume_from is not None and run.warm_start_from is not None:
        problems.append(
            f"{CONFIG_KEY}.resumeFrom={quoted(run.resume_from)} and {CONFIG_KEY}.warmStartFrom="
            f"{quoted(run.warm_start_from)} are both set: a resume continues a run (its optimizer, "
            "learning rate, step count and data position), a warm start begins a new one from a "
            "run's weights only; remove one"
        )
    elif run.resume_from is not None:
        changed = [f"{CONFIG_KEY}.learningRate={run.learning_rate!r}"] \
            if "learning_rate" in user_set else []
        changed += [f"{CONFIG_KEY}.extraOverrides[{quoted(key)}]" for key in run.extra_overrides
                    if key.lstrip("+~").startswith(_OPTIMIZER_PREFIX)]
        if changed:
            source = run.resume_from.split("/")[0]
            problems.append(
                f"{', '.join(changed)} with {CONFIG_KEY}.resumeFrom={quoted(run.resume_from)}: a "
                "resume loads the source run's optimizer state and LR schedule, which carry its "
                "learning rate, so this setting would not apply. To train on with new optimizer "
                f"settings, set {CONFIG_KEY}.warmStartFrom={source} instead (its weights, a fresh "
                "optimizer, step 0); to continue the run as it was, remove the setting"
            )
    return problems
