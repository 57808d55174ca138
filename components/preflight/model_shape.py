"""The model check: the shape of the model the stack stages, read at preview, and the run
checked against it (rollout TP against the heads, memory per GPU) before any GPU is billed.

Where the shape comes from:
- the default model at its pinned revision: `components/facts/models.py` ships its shape as
  data, so an offline plan (and every test of the default stacks) reads nothing;
- any other staged model: its `config.json` at the staged revision, from
  `https://huggingface.co/<id>/resolve/<revision>/config.json`, read by the program process
  itself over plain HTTPS with the stack's `verl-gke:hfToken` (a gated model needs it), a
  timeout of TIMEOUT_S, and an error that names the key to fix on 401/403/404. This runs at
  `pulumi preview` as well as `up`: it is a read, like the preflight invokes. A Hub that does
  not answer (timeout, 5xx) is not the config's fault and must not block a day-two `up` at
  3 a.m.: the shape is then unknown, with a warning, as below;
- a `verl-gke:job.modelPath` of the user's own (not the staged model): unknown. The defaults
  are derived for the default model's shape and the shape checks are skipped, with a warning.

Under Pulumi's mock runtime (the offline plan, the tests) the program never reaches the network:
`set_source` installs what answers instead; without one, a non-default model's shape is
unknown offline, as for a model path of the user's own, and a warning says so.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Callable

import pulumi

from components.facts.models import DEFAULT_MODEL, ModelShape
from components.schema.config import ConfigError, StackConfig
from components.schema.run import GrpoRunConfig, run_problems
from components.schema.staging import model_path
from components.schema.pulumi_forms import Key

CONFIG_URL = "https://huggingface.co/{model_id}/resolve/{revision}/config.json"
TIMEOUT_S = 15

# (model_id, revision, token) -> the parsed config.json. None: HTTPS, or refuse under mocks.
ConfigSource = Callable[[str, str, str | None], dict]
_source: ConfigSource | None = None


def set_source(source: ConfigSource | None) -> None:
    """Answer config.json reads with `source` (tests and offline plans); None: the default."""
    global _source
    _source = source


def checked_run(config: StackConfig) -> GrpoRunConfig:
    """The stack's run, for its model's shape; ConfigError with every problem against it."""
    run = config.run
    shape = shape_of(config)
    if shape is None:
        pulumi.log.warn(
            f"the shape of the model at {Key('job.modelPath')}={run.model_path!r} is unknown "
            "here (a model path of your own, or another model in an offline plan): the batch "
            f"and parallelism defaults assume {DEFAULT_MODEL.model_id}, and the rollout TP and "
            "memory checks are left to `pulumi preview`"
        )
        return run
    run = run.with_model(shape)
    problems = run_problems(run, config.hardware, config.nodes)
    if problems:
        raise ConfigError(problems)
    return run


def shape_of(config: StackConfig) -> ModelShape | None:
    """The staged model's shape, or None if the run trains a model the program did not stage."""
    staging = config.staging
    if config.run.model_path != model_path(staging.model_id):
        return None
    if (staging.model_id, staging.model_revision) == (DEFAULT_MODEL.model_id,
                                                      DEFAULT_MODEL.revision):
        return DEFAULT_MODEL
    token = config.hf_token.get_secret_value() if config.hf_token else None
    if _source is None and _mocked():
        return None  # offline: no network, and no shape but the default model's
    found = (_source or read_config)(staging.model_id, staging.model_revision, token)
    if found is None:
        return None
    try:
        return ModelShape.from_config_json(staging.model_id, staging.model_revision, found)
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError([
            f"{Key('staging.modelId')}={staging.model_id!r} at {staging.model_revision}: its "
            f"config.json lacks {error} or has it in a form this check does not read (a dense "
            "decoder's num_attention_heads, num_hidden_layers, hidden_size, intermediate_size, "
            "vocab_size): stage a causal language model of that kind"
        ]) from None


def read_config(model_id: str, revision: str, token: str | None) -> dict | None:
    """config.json of the model at the revision, over HTTPS; ConfigError naming the fix when
    the config is at fault (401, 403, 404), None with a warning when the Hub does not answer."""
    url = CONFIG_URL.format(model_id=model_id, revision=revision)
    request = urllib.request.Request(url, headers={"User-Agent": "verl-gke"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    where = f"{Key('staging.modelId')}={model_id!r} at modelRevision {revision}"
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
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
        f"{where}: could not read {url} within {TIMEOUT_S} s ({why}), so the rollout TP and "
        "memory checks are skipped this time; run `pulumi preview` where huggingface.co is "
        "reachable over HTTPS to check them"
    )
    return None


def _mocked() -> bool:
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(getattr(settings.SETTINGS, "monitor", None), MockMonitor)
