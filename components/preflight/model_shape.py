"""The model check: the shape of the model the run trains, read before any GPU is billed, and
the run resolved and checked for it (rollout TP against the heads, memory per GPU): the default
model's run as the config already resolved it (StackConfig.runs), any other model's resolved
again for the shape read here (`checked_runs`).

One reader for every model, whichever way it reaches the run (`shape_of`); what it reads is the
model's `config.json` and, where there is one, its `model.safetensors.index.json` (whose
`metadata.total_size` gives the weight bytes exactly, MoE experts included):
- the default model at its pinned revision: `components/facts/models.py` ships its shape as
  data, so an offline plan (and every test of the default stacks) reads nothing;
- any other staged model: both files at the staged revision, from
  `https://huggingface.co/<id>/resolve/<revision>/<file>`, read by the program process itself
  over plain HTTPS with the stack's `verl-gke:hfToken` (a gated model needs it), a timeout of
  TIMEOUT_S, and an error that names the key to fix on 401/403/404 (a missing index is a model
  stored in one file: the shape is then counted from config.json);
- a `verl-gke:job.modelPath` of the user's own: both files from where the pods will read them,
  the stack's bucket (a data source read at `pulumi preview`, like the preflight's); a missing
  config.json is an error naming the key;
- offline (`make plan MODEL_CONFIG=<config.json or its directory>`, `set_local_files`): the
  files the user passes, for whichever model the run trains.

A shape that cannot be read (a Hub that does not answer, an offline plan without
MODEL_CONFIG) is unknown. At preview and up an unknown shape is an error unless the user
acknowledges it with `job.acceptUnknownModelShape: true`: the defaults would be sized for
DEFAULT_MODEL and a larger model would OOM hours in (TRAINING-REVIEW-2.md finding 3). An offline
plan bills nothing, so there it is a warning that names MODEL_CONFIG.

Under Pulumi's mock runtime the program never reaches the network or the bucket: `set_source`,
`set_bucket_reader` and `set_local_files` install what answers instead.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Mapping

import pulumi

from components.facts.layout import DATA_MOUNT
from components.facts.models import DEFAULT_MODEL, ModelShape, UnreadMoe
from components.schema.config import ConfigError, StackConfig
from components.forms.pulumi_forms import Key
from components.runspec.run import GrpoRunConfig, ResolvedRun, runs_by_name
from components.runspec.run_inputs import is_gs, mounted
from components.schema.staging import model_path

HUB_URL = "https://huggingface.co/{model_id}/resolve/{revision}/{file}"
CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
TIMEOUT_S = 15
ACKNOWLEDGE = Key("job.acceptUnknownModelShape")

# A model's files as read: config.json, and model.safetensors.index.json or None.
Files = tuple[dict, dict | None]
# (model_id, revision, token) -> config.json, or (config.json, index or None); None: unread.
ConfigSource = Callable[[str, str, str | None], dict | Files | None]
# (bucket, {file: object name}) -> {file: the object's text, or None where there is none}.
BucketReader = Callable[[str, dict[str, str]], dict[str, str | None]]
_source: ConfigSource | None = None
_bucket_reader: BucketReader | None = None
_local: Path | None = None


def set_source(source: ConfigSource | None) -> None:
    """Answer Hub reads with `source` (tests and offline plans); None: the default."""
    global _source
    _source = source


def set_bucket_reader(reader: BucketReader | None) -> None:
    """Answer bucket reads with `reader` (tests); None: the data source."""
    global _bucket_reader
    _bucket_reader = reader


def set_local_files(path: Path | str | None) -> None:
    """Read the run's model from `path` (a config.json, or a directory holding it and maybe
    model.safetensors.index.json) instead of the Hub or the bucket: `make plan MODEL_CONFIG=`."""
    global _local
    _local = Path(path).expanduser() if path else None


def checked_runs(config: StackConfig) -> Mapping[str, ResolvedRun]:
    """The stack's runs, resolved for their model's shape: `config.runs` as they are when the
    config alone gave the shape (the default model), else each resolved again for the shape read
    here. ConfigError with every problem against it, and for a shape that could not be read
    unless `job.acceptUnknownModelShape` acknowledges it."""
    runs = config.runs
    shape, why = shape_of(config)
    if shape is None:
        guessed = (f"the batch, parallelism and memory defaults would be sized for "
                   f"{DEFAULT_MODEL.model_id} ({DEFAULT_MODEL.parameter_count / 1e9:.1f}B), and "
                   "the rollout TP and memory checks skipped")
        if config.run.accept_unknown_model_shape:
            pulumi.log.warn(f"{why}; acknowledged by {ACKNOWLEDGE}=true: {guessed}")
            return runs
        if _mocked():
            pulumi.log.warn(
                f"{why}: {guessed} in this offline plan; pass the model's config.json "
                "(`make plan MODEL_CONFIG=<file or directory>`) to check it here. `pulumi "
                f"preview` refuses an unknown shape unless {ACKNOWLEDGE} is true"
            )
            return runs
        raise ConfigError([
            f"{why}: {guessed}, and a larger model would run out of memory hours in. Make the "
            f"files readable, or set {ACKNOWLEDGE} to true to run unchecked at your risk"
        ])
    if any(run.model != shape for run in runs.values()):
        runs = runs_by_name(*(run.for_model(shape) for run in runs.values()))
    problems = [problem for run in runs.values() for problem in run.problems]
    if problems:
        raise ConfigError(problems)
    return runs


def shape_of(config: StackConfig) -> tuple[ModelShape | None, str]:
    """The run's model's shape, or None and why it is unknown."""
    staging, run = config.staging, config.run
    staged = run.model_path == model_path(staging.model_id)
    if config.shipped_shape is not None:
        return config.shipped_shape, ""
    if staged:
        name, revision, key = staging.model_id, staging.model_revision, Key("staging.modelId")
        where = f"{key}={staging.model_id!r} at {staging.model_revision}"
    else:
        name, revision, key = run.model_path, "", Key("job.modelPath")
        where = f"{key}={run.model_path!r}"
    if _local is not None:
        files = read_local(_local)
    elif staged:
        if _source is None and _mocked():
            return None, f"the shape of {where} is unknown offline"
        token = config.hf_token.get_secret_value() if config.hf_token else None
        files = _as_files((_source or read_hub)(name, revision, token))
    else:
        if _bucket_reader is None and _mocked():
            return None, f"the shape of {where} is unknown offline"
        files = read_bucket(config.bucket, _object_prefix(run), where)
    if files is None:
        return None, f"the shape of {where} could not be read"
    return parse(name, revision, files, where), ""


def parse(name: str, revision: str, files: Files, where: str) -> ModelShape:
    """The shape in a model's files, or ConfigError naming `where` and what it lacks."""
    config, index = files
    try:
        return ModelShape.from_config_json(name, revision, config, index)
    except UnreadMoe as error:
        raise ConfigError([
            f"{where} is {error}: the memory and TP checks would pass a model that cannot fit. "
            "Train a dense model or a MoE of a family listed, or add the family's layer layout "
            "to components/facts/models.py"
        ]) from None
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError([
            f"{where}: its {CONFIG_FILE} (or {INDEX_FILE}) lacks {error} or has it in a form "
            "this check does not read (a decoder's num_attention_heads, num_hidden_layers, "
            "hidden_size, intermediate_size, vocab_size; the index's metadata.total_size): "
            "train a causal language model of that kind"
        ]) from None


def _as_files(found: dict | Files | None) -> Files | None:
    if found is None or isinstance(found, tuple):
        return found
    return found, None


def _object_prefix(run: GrpoRunConfig) -> str:
    """The model directory's object name in the stack's bucket, where the pods read it."""
    path = run.model_path
    if is_gs(path):
        path = mounted(path)
    elif not path.startswith("/") and run.working_dir is not None:
        base = mounted(run.working_dir) if is_gs(run.working_dir) else None
        path = f"{base}/{path}" if base else path
    return path.removeprefix(DATA_MOUNT).strip("/")


def read_local(path: Path) -> Files:
    """config.json (the file itself, or in the directory) and the index next to it, if any."""
    config_path = path / CONFIG_FILE if path.is_dir() else path
    where = f"MODEL_CONFIG={str(path)!r}"
    try:
        config = json.loads(config_path.read_text())
        index_path = config_path.parent / INDEX_FILE
        index = json.loads(index_path.read_text()) if index_path.is_file() else None
    except (OSError, ValueError) as error:
        raise ConfigError([
            f"{where}: {error}: pass the model's config.json, or the directory holding it "
            f"(and {INDEX_FILE})"
        ]) from None
    return config, index


def read_bucket(bucket: str, prefix: str, where: str) -> Files:
    """Both files from gs://<bucket>/<prefix>/; ConfigError naming `where` without config.json."""
    names = {f: f"{prefix}/{f}" if prefix else f for f in (CONFIG_FILE, INDEX_FILE)}
    texts = (_bucket_reader or _read_objects)(bucket, names)
    if texts.get(CONFIG_FILE) is None:
        raise ConfigError([
            f"{where}: there is no gs://{bucket}/{names[CONFIG_FILE]}, so the model's shape "
            "cannot be checked and verl would not find the model: copy the model's directory "
            f"there (`gcloud storage cp --recursive <dir> gs://{bucket}/{prefix}`), or fix the path"
        ])
    try:
        config = json.loads(texts[CONFIG_FILE])
        index = json.loads(texts[INDEX_FILE]) if texts.get(INDEX_FILE) else None
    except ValueError as error:
        raise ConfigError([f"{where}: gs://{bucket}/{prefix}: not JSON ({error})"]) from None
    return config, index


def _read_objects(bucket: str, names: dict[str, str]) -> dict[str, str | None]:
    """Each object's text through the provider's data source, at once (reads.py); a read that
    fails (no such object) is None."""
    import pulumi_gcp as gcp

    from components.preflight.reads import later, together

    token = "gcp:storage/getBucketObjectContent:getBucketObjectContent"
    answers = together({
        key: later(token, gcp.storage.GetBucketObjectContentResult, bucket=bucket, name=name)
        for key, name in names.items()
    })
    return {key: None if isinstance(answer, Exception) else answer.content
            for key, answer in answers.items()}


def read_hub(model_id: str, revision: str, token: str | None) -> Files | None:
    """config.json and model.safetensors.index.json of the model at the revision (the index
    None where the model is one file); None when the Hub does not answer."""
    config = read_config(model_id, revision, token)
    if config is None:
        return None
    return config, _read_hub_file(model_id, revision, token, INDEX_FILE, missing_ok=True)


def read_config(model_id: str, revision: str, token: str | None) -> dict | None:
    """config.json of the model at the revision, over HTTPS; ConfigError naming the fix when
    the config is at fault (401, 403, 404), None with a warning when the Hub does not answer."""
    return _read_hub_file(model_id, revision, token, CONFIG_FILE, missing_ok=False)


def _read_hub_file(model_id: str, revision: str, token: str | None, file: str,
                   missing_ok: bool) -> dict | None:
    url = HUB_URL.format(model_id=model_id, revision=revision, file=file)
    request = urllib.request.Request(url, headers={"User-Agent": "verl-gke"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    where = f"{Key('staging.modelId')}={model_id!r} at modelRevision {revision}"
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 404 and missing_ok:
            return None
        if error.code in (401, 403):
            fix = (f"set {Key('hfToken')} (secret) to a token that can read it, and accept the "
                   "model's license on its page if it is gated")
        elif error.code == 404:
            fix = (f"check {Key('staging.modelId')} and {Key('staging.modelRevision')} (a commit "
                   "of that repository: `curl -s https://huggingface.co/api/models/<id>`)")
        else:
            return _unanswered(where, url, f"HTTP {error.code}")
        raise ConfigError([f"{where}: reading {url} failed with HTTP {error.code}: {fix}"]) from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as error:
        return _unanswered(where, url, str(error))


def _unanswered(where: str, url: str, why: str) -> None:
    pulumi.log.warn(
        f"{where}: could not read {url} within {TIMEOUT_S} s ({why}), so the model's shape is "
        "unknown this time; run `pulumi preview` where huggingface.co is reachable over HTTPS "
        "to check it"
    )
    return None


def _mocked() -> bool:
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(getattr(settings.SETTINGS, "monitor", None), MockMonitor)
