"""The `verl-gke:staging` stack config: what ModelStaging stages, and its rules.

Part of the config schema (components/schema/config.py reads it); the component that acts on it
is components/storage/model_staging.py.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components.facts import pins
from components.facts.layout import DATA_MOUNT
from components.messages import quoted
from components.forms.pulumi_forms import Key

CONFIG_KEY = Key("staging")  # `<project>:staging`, under the project's name
# The image pull, the pinned wheels and verl's clone take a few minutes before any model byte.
MIN_TIMEOUT_MINUTES = 10
MAX_TIMEOUT_MINUTES = 24 * 60
# Top-level names a model must not be staged over: verl's source, the data, and HF_HOME of the
# training pods.
RESERVED_NAMES = ("verl", "gsm8k", "huggingface_cache")

_HF_NAME = r"[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9])?"
_HF_REPO_ID = re.compile(rf"{_HF_NAME}/{_HF_NAME}")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class StagingConfig(BaseModel):
    """The `verl-gke:staging` stack config: what to stage and how long `pulumi up` may wait."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    model_id: str = Field(
        pins.STAGING_MODEL_ID,
        description="Hugging Face model (`owner/name`), staged at /data/<name> "
        f"(default: {pins.STAGING_MODEL_ID}).",
    )
    model_revision: str = Field(
        pins.STAGING_MODEL_REVISION,
        description="Commit (40 hex characters) of the model repository; required when modelId "
        "is set (default: the pinned commit of the default model).",
    )
    skip: bool = Field(
        False,
        description="Create no staging Job, for a bucket the user already filled in the same "
        "layout: /data/verl, /data/gsm8k, /data/<model name> (default: false, stage).",
    )
    timeout_minutes: int = Field(
        180,
        description="How long the Job may run (its activeDeadlineSeconds) and `pulumi up` waits "
        "for it (default: 180 minutes).",
    )


def model_dir_name(model_id: str) -> str:
    return model_id.rsplit("/", 1)[-1]


def model_path(model_id: str) -> str:
    """Where the model lands on the bucket mount: /data/<last part of the model id>."""
    return f"{DATA_MOUNT}/{model_dir_name(model_id)}"


def staging_problems(cfg: StagingConfig) -> list[str]:
    """Every problem of the staging config, each naming the key, the bad value and the fix."""
    return [
        *_model_id_problems(cfg),
        *_revision_problems(cfg),
        *_timeout_problems(cfg),
    ]


def _is_repo_id(model_id: str) -> bool:
    # Hugging Face's own rules: owner/name, word characters, '-' and '.', no '--' or '..'.
    return bool(_HF_REPO_ID.fullmatch(model_id)) and "--" not in model_id and ".." not in model_id


def _model_id_problems(cfg: StagingConfig) -> list[str]:
    key = f"{CONFIG_KEY}.modelId"
    if not _is_repo_id(cfg.model_id):
        return [
            f"{key} = {quoted(cfg.model_id)} is not a Hugging Face model id: use `owner/name` as in "
            f"the model's huggingface.co address, e.g. {pins.STAGING_MODEL_ID!r}"
        ]
    if model_dir_name(cfg.model_id) in RESERVED_NAMES:
        return [
            f"{key} = {quoted(cfg.model_id)} would be staged at {model_path(cfg.model_id)}, a path the "
            f"training pods use for something else ({', '.join(RESERVED_NAMES)} are reserved): "
            "choose a model whose name is none of them"
        ]
    return []


def _revision_problems(cfg: StagingConfig) -> list[str]:
    key = f"{CONFIG_KEY}.modelRevision"
    valid_id = _is_repo_id(cfg.model_id)
    model = cfg.model_id if valid_id else "<owner>/<name>"
    find = (
        f"`curl -s https://huggingface.co/api/models/{model}/revision/main` prints the commit "
        'of main as "sha"'
    )
    if not _COMMIT.fullmatch(cfg.model_revision):
        return [
            f"{key} = {quoted(cfg.model_revision)} is not a commit: use the 40-hex-character commit "
            f"(a branch or tag moves, and a re-run would stage other weights); {find}"
        ]
    other_model = valid_id and cfg.model_id != pins.STAGING_MODEL_ID
    if other_model and "model_revision" not in cfg.model_fields_set:
        return [
            f"{key} is not set but {CONFIG_KEY}.modelId is {quoted(cfg.model_id)}: the default revision "
            f"is a commit of {pins.STAGING_MODEL_ID}; set the commit of your model ({find})"
        ]
    return []


def _timeout_problems(cfg: StagingConfig) -> list[str]:
    if MIN_TIMEOUT_MINUTES <= cfg.timeout_minutes <= MAX_TIMEOUT_MINUTES:
        return []
    return [
        f"{CONFIG_KEY}.timeoutMinutes = {cfg.timeout_minutes} is out of range: use "
        f"{MIN_TIMEOUT_MINUTES} to {MAX_TIMEOUT_MINUTES} minutes (setting up takes a few "
        "minutes before the first model byte; a 66 GB model needs about an hour at 20 MB/s)"
    ]
