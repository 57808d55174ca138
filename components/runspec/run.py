"""The GRPO training run resolved once (`ResolvedRun`): its command line, resuming, export,
and its problems.

`resolve_run` turns a `GrpoRunConfig`, a `HardwareProfile`, the node count and the model's shape
into one frozen value, and every later reader takes that value: the stack's config holds its runs
resolved (StackConfig.runs), the model check resolves a run again only for a shape the config
alone could not give, and the components (GrpoJob, RunSupervisor, ClusterCheck, the working
directory's upload) and the tools read its fields. Nothing here talks to Ray or Pulumi;
`components/run/grpo_job.py` turns the value into a submitted Ray job. By concern:
- run_sizing.py: the defaults of every unset field, from the tutorial, the cluster and the
  model (`resolve`);
- run_checks.py and run_memory.py: what verl or vLLM would refuse, and what would not fit;
- run_identity.py: what names the run's checkpoint directory, and what keeps it;
- run_env.py: the Ray runtime env, and the env verl's workers really get;
- run_config.py: the config model (`GrpoRunConfig`) and each field's Hydra key;
- here: the resolution itself (`resolve_run`): placing the paths, sizing, the identity, the
  Hydra overrides and entrypoint, resuming, export, and the problems of a run in one list.

Every run checkpoints to its own directory on the bucket and always resumes from it
(`resume_mode=auto`, tutorial defect 6): `/checkpoint-bucket/checkpoints/<runName>-<N>gpu-<12
hex of its identity>`. What it does not do: stage the model, data or verl source (model staging
owns that), or validate Hydra keys it does not model (`extraOverrides` is passed through as
written, after Hydra's own parser and merge check them against the program's keys).

verl's checks mirror verl at its pinned ref (components/facts/verl.py); each names the file it
mirrors, and tools/training_stack.py composes every override the program writes with verl's
own config at that ref.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Set
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic.alias_generators import to_camel

from components.facts import pins, verl
from components.facts.hardware import HardwareProfile
from components.facts.models import ModelShape
from components.facts.layout import (
    CHECKPOINT_ROOT,
    CHECKPOINT_STEP_DIR,
    CHECKPOINT_SUBPATH,
    CHECKPOINT_TRACKER,
    VERL_DIR,
)
from components.messages import quoted
from components.forms.hydra_overrides import PROTECTED_KEYS, override_problems, override_text
from components.runspec.lifecycle import RunLifecycle, prune_command
from components.forms.pulumi_forms import Key
from components.runspec.run_checks import batch_problems, hardware_problems, model_problems
from components.runspec.run_config import (  # noqa: F401 (GrpoRunConfig and CONFIG_KEY re-exported)
    CONFIG_KEY,
    HYDRA_KEYS,
    RUN_DIR,
    TENSORBOARD_SUBDIR,
    GrpoRunConfig,
    OverrideValue,
)
from components.runspec.run_env import effective_env, runtime_env  # noqa: F401 (re-exported)
from components.runspec.run_identity import (  # noqa: F401 (re-exported)
    CONTINUATION_FIELDS,
    CONTINUATION_OVERRIDES,
    REFERENCE_DTYPE,
    digest,
    identity_of,
)
from components.runspec.run_inputs import is_gs, path_problems, placed, working_dir_problems
from components.runspec.run_memory import Offload
from components.runspec.run_resume import (
    EXPORT_SUBDIR,
    MODEL_PATH_KEY,
    begin_problems,
    warm_start_check,
    warm_start_model,
)
from components.runspec.run_sizing import SIZED_FIELDS, resolve  # noqa: F401 (re-exported)

# Keys a typed field sets through something other than HYDRA_KEYS.
_OFFLOAD_KEYS = {
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": (Offload.OPTIMIZER, Offload.ALL),
    "actor_rollout_ref.actor.fsdp_config.param_offload": (Offload.ALL,),
    "actor_rollout_ref.ref.fsdp_config.param_offload": (Offload.ALL,),
}
_OVERRIDE_KEY = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")

# With resumeFrom, the entrypoint decides at run time (the bucket is only visible there) whether
# the run resumes from its own checkpoints or starts from the other run's: these shell variables
# carry the decision into the two overrides.
_RESUME_MODE_VAR, _RESUME_PATH_VAR = "VERL_GKE_RESUME_MODE", "VERL_GKE_RESUME_PATH"


@dataclass(frozen=True)
class ResolvedRun:
    """One run, resolved once: what every component and tool asks of it, computed together.

    `resolve_run` builds it from the run's config, the cluster and the model's shape; nothing
    downstream resolves the run again (pulumi-eks's CoreData: computed once, handed down). The
    stack's runs are a mapping of these by name (StackConfig.runs): one today.
    """

    config: GrpoRunConfig  # as the stack configures it: paths as written, unset sizes None
    # Every setting as the trainer gets it: each path as the pods read it (run_inputs.placed),
    # each unset field filled (run_sizing.resolve), the model's shape when known (`model`).
    settings: GrpoRunConfig
    profile: HardwareProfile  # the target's hardware row
    nodes: int  # GPU worker replicas of the RayCluster
    model_revision: str | None  # the staged model's revision; None for a model of the user's own
    identity: dict[str, Any]  # what names the checkpoint directory (run_identity.py)
    run_dir: str  # <runName>-<N>gpu-<12 hex of the identity>
    overrides: dict[str, str]  # main_ppo's Hydra overrides, in command-line order
    entrypoint: str  # the exact shell command Ray runs on the head
    runtime_env: dict[str, Any]  # the job's Ray runtime env (run_env.py)
    problems: tuple[str, ...]  # every reason verl would refuse it on this cluster, with its fix

    @property
    def name(self) -> str:
        """The run's name (`job.runName`): its key among the stack's runs."""
        return self.config.run_name

    @property
    def model(self) -> ModelShape | None:
        """The model's shape it was resolved for; None: unknown (sized for DEFAULT_MODEL)."""
        return self.settings.model

    @property
    def world_size(self) -> int:
        return self.identity["world_size"]

    @property
    def lifecycle(self) -> RunLifecycle:
        """How far `pulumi up` follows the run and what happens to it afterwards."""
        return self.config

    @property
    def image(self) -> str:
        """The training image: job.image, or the pinned verl image of the target's arch."""
        return self.settings.image or pins.VERL_IMAGES[self.profile.arch]

    @property
    def upload_dir(self) -> str | None:
        """The local working directory to upload (run_inputs.py); None for none or a gs:// one."""
        workdir = self.config.working_dir
        return workdir if workdir is not None and not is_gs(workdir) else None

    @property
    def worker_env(self) -> dict[str, Any]:
        """The runtime env a training worker ends up with (run_env.effective_env)."""
        return effective_env(self.profile, self.nodes)

    @property
    def export_entrypoint(self) -> str | None:
        """The export's command when the run exports its model (job.exportModel), else None."""
        return export_command(self.run_dir) if self.lifecycle.export_model else None

    def for_model(self, shape: ModelShape) -> ResolvedRun:
        """This run resolved for a model of `shape` (the model check's, once it has read it)."""
        return resolve_run(self.config, self.profile, self.nodes, self.model_revision, shape)


def resolve_run(
    config: GrpoRunConfig, profile: HardwareProfile, nodes: int,
    model_revision: str | None = None, shape: ModelShape | None = None,
) -> ResolvedRun:
    """The run resolved, once, for this cluster and model (`shape`, else the one `config`
    carries): placed, sized, named, its command line, env and problems (ResolvedRun)."""
    if shape is not None:
        config = config.with_model(shape)
    placed_run = placed(config)
    sized = resolve(placed_run, profile, nodes)
    identity = identity_of(sized, placed_run, profile, model_revision)
    run_dir = f"{placed_run.run_name}-{identity['world_size']}gpu-{digest(identity)}"
    overrides = _hydra_overrides(sized, run_dir)
    return ResolvedRun(
        config=config, settings=sized, profile=profile, nodes=nodes, model_revision=model_revision,
        identity=identity, run_dir=run_dir, overrides=overrides,
        entrypoint=_entrypoint(sized, overrides),
        runtime_env=runtime_env(profile, nodes, tensorboard_dir(sized, run_dir)),
        problems=tuple(_problems(sized, config.model_fields_set, profile, nodes, run_dir)),
    )


def runs_by_name(*runs: ResolvedRun) -> Mapping[str, ResolvedRun]:
    """A stack's runs, keyed by name (read-only)."""
    return MappingProxyType({run.name: run for run in runs})


def _hydra_overrides(run: GrpoRunConfig, run_dir: str) -> dict[str, str]:
    """main_ppo's overrides: the tutorial's, in its order, then checkpointing, then extras.
    `run` is resolved (every field filled)."""
    values = {"adv_estimator": "grpo", **run.model_dump()}
    if not run.use_kl_loss:
        values["kl_coef"] = None  # no KL loss: the coefficient is refused when set (run_checks)
    overrides = {
        hydra_key: _hydra_value(values[field])
        for field, hydra_key in HYDRA_KEYS.items()
        if values[field] is not None
    }
    if run.reward_function_path is not None and run.reward_function_name is None:
        # The reward group's own default, written out: the run says which function it calls.
        overrides[verl.REWARD_FUNCTION_NAME] = verl.DEFAULT_REWARD_FUNCTION_NAME
    if run.use_kl_loss:
        overrides[REFERENCE_DTYPE[0]] = REFERENCE_DTYPE[1]
    # verl's GRPO recipes drop prompts over max_prompt_length once, at start (components/facts/
    # verl.py): the agent loop no longer truncates (TRAINING-REVIEW-2.md finding 5).
    overrides[verl.FILTER_OVERLONG_PROMPTS[0]] = verl.FILTER_OVERLONG_PROMPTS[1]
    if run.warm_start_from is not None:
        overrides[MODEL_PATH_KEY] = warm_start_model(run.warm_start_from)
    # The trainer the offline check walks (tools/training_stack.py), named rather than left to
    # verl's default of the day (components/facts/verl.py USE_V1).
    overrides[verl.USE_V1[0]] = verl.USE_V1[1]
    overrides.update({
        key: "True" for key, modes in _OFFLOAD_KEYS.items() if run.offload in modes
    })
    overrides.update(_checkpoint_overrides(run, run_dir))
    # verl prunes what this process saved (checkpoint_manager.py ensure_checkpoint_capacity);
    # the entrypoint's prune_command covers earlier attempts (lifecycle.py).
    overrides["trainer.max_actor_ckpt_to_keep"] = str(run.keep_checkpoints)
    overrides.update({key: _hydra_value(value) for key, value in run.extra_overrides.items()})
    return overrides


def _checkpoint_overrides(run: GrpoRunConfig, run_dir: str) -> dict[str, str]:
    own = f"{CHECKPOINT_ROOT}/{run_dir}"
    overrides = {"trainer.default_local_dir": own, "trainer.resume_mode": "auto"}
    if run.resume_from is not None:
        overrides["trainer.resume_mode"] = f"${_RESUME_MODE_VAR}"
        overrides["trainer.resume_from_path"] = f"${_RESUME_PATH_VAR}"
    return overrides


def _hydra_value(value: OverrideValue) -> str:
    # repr keeps a float's full precision (1e-05); str gives True/False, which Hydra reads.
    return repr(value) if isinstance(value, float) else str(value)


def _entrypoint(run: GrpoRunConfig, overrides: dict[str, str]) -> str:
    """The exact shell command Ray runs on the head: the tutorial's, each argument quoted."""
    arguments = " ".join(_shell_argument(key, value) for key, value in overrides.items())
    prelude = prune_command(overrides["trainer.default_local_dir"], run.keep_checkpoints) + "; "
    if run.resume_from is not None:
        prelude += _resume_choice(overrides["trainer.default_local_dir"], run.resume_from) + " && "
    if run.warm_start_from is not None:
        prelude += warm_start_check(run.warm_start_from) + " && "
    # The driver starts in the working directory the user brought (run_inputs.placed), else in
    # verl's source; verl itself comes from PYTHONPATH (run_env.py) either way.
    return (
        f"cd {shlex.quote(run.working_dir or VERL_DIR)} && {prelude}PYTHONUNBUFFERED=1 python3 -m "
        "verl.trainer.main_ppo "
        f"{arguments}"
    )


def _shell_argument(key: str, value: str) -> str:
    if value in (f"${_RESUME_MODE_VAR}", f"${_RESUME_PATH_VAR}"):
        return f'"{key}={value}"'  # expanded by the shell; the values are plain paths and words
    return shlex.quote(override_text(key, value))


def _resume_choice(own_dir: str, resume_from: str) -> str:
    """Shell that resumes from the run's own checkpoints once it has any, else from another's.

    verl's resume_mode=resume_path loads resume_from_path, which must name a global_step_<n>
    directory, on every start (verl/trainer/ppo/ray_trainer.py _load_checkpoint); deciding per
    start keeps a restarted run from going back to the other run's step.
    """
    match = RUN_DIR.match(resume_from)
    source = f"{CHECKPOINT_ROOT}/{match.group('dir')}"
    if match.group("step"):
        path = f"{source}/{match.group('step')}"
        find = f"[ -d {path} ] && {_RESUME_PATH_VAR}={path}"
    else:
        step = CHECKPOINT_STEP_DIR.format(f"$(cat {source}/{CHECKPOINT_TRACKER})")
        find = f"{_RESUME_PATH_VAR}={source}/{step}"
        path = source
    missing = f'{{ echo "verl-gke: no checkpoint to resume from at {path}" >&2; exit 1; }}'
    return (
        f"if [ -f {own_dir}/{CHECKPOINT_TRACKER} ]; then {_RESUME_MODE_VAR}=auto "
        f"{_RESUME_PATH_VAR}=null; else {_RESUME_MODE_VAR}=resume_path; {find} || {missing}; fi"
    )


def tensorboard_dir(run: GrpoRunConfig, run_dir: str) -> str | None:
    """The run's TensorBoard directory on the bucket, when the run logs to TensorBoard."""
    if "tensorboard" not in run.loggers:
        return None
    return f"{CHECKPOINT_ROOT}/{run_dir}/{TENSORBOARD_SUBDIR}"


# Where the exported Hugging Face model goes, inside the run's directory: EXPORT_SUBDIR
# (run_resume.py, where a warm start reads it).
# verl's FSDP checkpoint merger (verl/model_merger/__main__.py: `python -m verl.model_merger
# merge --backend fsdp --local_dir <...>/global_step_<n>/actor --target_dir <dir>`).
MODEL_MERGER = "python3 -m verl.model_merger"


def export_command(
    run_dir: str, merger: str = MODEL_MERGER, root: str = CHECKPOINT_ROOT, workdir: str = VERL_DIR
) -> str:
    """The shell command that merges the run's last checkpoint into `<run>/huggingface`.

    The step comes from verl's tracker file; the merger writes to a scratch directory that is
    renamed into place only when complete (a rename on the bucket's hierarchical namespace), so
    `<run>/huggingface` is either the previous export or a whole new one, never half of one.
    """
    own = f"{root}/{run_dir}"
    target, scratch = f"{own}/{EXPORT_SUBDIR}", f"{own}/{EXPORT_SUBDIR}.partial"
    step = f"$(cat {own}/{CHECKPOINT_TRACKER})"
    actor = f"{own}/{CHECKPOINT_STEP_DIR.format(step)}/actor"
    return (
        f"cd {workdir} && rm -rf {scratch} && PYTHONUNBUFFERED=1 {merger} merge --backend fsdp "
        f"--local_dir {actor} --target_dir {scratch} && rm -rf {target} && mv {scratch} {target}"
    )


def checkpoint_uri(bucket_url: str) -> str:
    """Where every run's checkpoint directory lives in the bucket: gs://bucket/checkpoints."""
    return f"{bucket_url.rstrip('/')}/{CHECKPOINT_SUBPATH}"


def _problems(
    run: GrpoRunConfig, user_set: Set[str], profile: HardwareProfile, nodes: int, run_dir: str,
) -> list[str]:
    """Every reason verl would refuse this run on this cluster, each with its fix; [] if none.
    `run` is resolved; `user_set` the fields the user set."""
    return [
        *hardware_problems(run, profile, nodes, user_set),
        *batch_problems(run, user_set),
        *model_problems(run, profile, user_set),
        *_resume_problems(run),
        *begin_problems(run, user_set),
        *_override_problems(run, run_dir),
    ]


def brought_problems(run: GrpoRunConfig, bucket: str) -> list[str]:
    """What the user brings that the pods could not read: the working directory (a local one
    within the upload's limits, a gs:// one in the stack's bucket) and the run's paths."""
    problems = []
    if run.working_dir is not None:
        problems += working_dir_problems(_key("working_dir"), run.working_dir, bucket)
    return problems + path_problems(run, bucket, _key)


def _key(field: str) -> str:
    return f"{CONFIG_KEY}.{to_camel(field)}"


def _resume_problems(run: GrpoRunConfig) -> list[str]:
    if run.resume_from is None:
        return []
    saved_by = int(RUN_DIR.match(run.resume_from).group("gpus"))
    gpus = run.nnodes * run.n_gpus_per_node
    if saved_by == gpus:
        return []
    return [
        f"{_key('resume_from')}={quoted(run.resume_from)} was saved by {saved_by} GPUs, but "
        f"this run has {gpus} (nnodes x nGpusPerNode): verl's FSDP shards are per rank and "
        f"cannot be loaded by another world size. Run it on {saved_by} GPUs "
        f"({Key('gpuNodes')}, {_key('nnodes')}), or remove {_key('resume_from')} to start clean"
    ]


def _override_problems(run: GrpoRunConfig, run_dir: str) -> list[str]:
    typed = {hydra_key: field for field, hydra_key in HYDRA_KEYS.items()}
    typed.update(dict.fromkeys(_OFFLOAD_KEYS, "offload"))
    problems = []
    checked = {}
    for key, value in run.extra_overrides.items():
        where = f"{_key('extra_overrides')}[{quoted(key)}]"
        bare = key.lstrip("+~")
        if not _OVERRIDE_KEY.match(key):
            problems.append(
                f"{where} is not a Hydra key: use dotted names such as "
                "actor_rollout_ref.actor.entropy_coeff (optionally prefixed +, ++ or ~)"
            )
        elif bare in typed:
            field = typed[bare]
            hint = (
                "algorithm.adv_estimator is always grpo" if field == "adv_estimator"
                else f"set {_key(field)} instead"
            )
            problems.append(f"{where} duplicates a typed setting: {hint}")
        elif bare == verl.USE_V1[0]:
            problems.append(
                f"{where} chooses verl's trainer, which the program sets: it runs the V1 trainer, "
                "the one its training stack is checked for (docs/training.md); remove the entry"
            )
        elif ignored := next((group for group in verl.IGNORED_GROUPS
                              if bare == group or bare.startswith(group + ".")), None):
            problems.append(
                f"{where} is under `{ignored}`, which the pinned verl composes but never reads "
                f"(it reads {verl.IGNORED_GROUPS[ignored]}): for a reward function set "
                f"{_key('reward_function_path')} and {_key('reward_function_name')}"
            )
        else:
            checked[key] = value
    # Every other override is parsed and merged with Hydra itself; the program's checkpoint keys
    # come before the extras on the command line, as they do here.
    program = {
        key: value for key, value in _checkpoint_overrides(run, run_dir).items()
        if key in PROTECTED_KEYS
    }
    return problems + override_problems(checked, program, _key("extra_overrides"))
