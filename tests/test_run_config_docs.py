"""docs/config.md's `job` table is held to the model: each field of GrpoRunConfig has its row, the
row names the field's Hydra key from run_config.HYDRA_KEYS (the one place it is written) and,
where the default is a plain value, that value: a field added, a key renamed or a default moved
in code fails here until the docs say so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic.alias_generators import to_camel

from components.runspec.run_config import HYDRA_KEYS, GrpoRunConfig

DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"


def _rows() -> dict[str, tuple[str, str]]:
    """{camelCase field: (default cell, Hydra key cell)} of the job table (a row may name
    several fields, `a` / `b`)."""
    text = DOCS.read_text()
    table = text[text.index("| field | default | Hydra key |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name in re.findall(r"`([A-Za-z]+)`", cells[0]):
            rows[name] = (cells[1], cells[2])
    return rows


FIELDS = list(GrpoRunConfig.model_fields)


@pytest.mark.parametrize("field", FIELDS)
def test_each_field_has_its_row_with_its_hydra_key_and_default(field):
    rows = _rows()
    name = to_camel(field)
    assert name in rows, f"docs/config.md has no row for job.{name}"
    default_cell, key_cell = rows[name]
    if field in HYDRA_KEYS:
        assert HYDRA_KEYS[field].rsplit(".", 1)[-1] in key_cell, (name, key_cell)
    default = GrpoRunConfig.model_fields[field].default
    if isinstance(default, (bool, int, float, str)):
        assert any(form in default_cell for form in _forms(default)), (name, default, default_cell)


def _forms(value: bool | int | float | str) -> set[str]:
    """How the docs may write a default: as Python prints it, in lower case (true), a float
    without exponent padding (1e-6), an enum by its value, a path by its last part when the
    row's cell shares the directory with a sibling's (`/data/gsm8k/train.parquet` / `test.parquet`)."""
    text = str(getattr(value, "value", value))
    forms = {text, text.lower()}
    if isinstance(value, float):
        forms.add(re.sub(r"e([-+])0*(\d)", r"e\1\2", f"{value:g}"))
    if text.startswith("/"):
        forms.add(text.rsplit("/", 1)[-1])
    return forms


def test_the_hydra_keys_are_the_models_fields():
    """HYDRA_KEYS names fields of the model, and the schema editors read says each field's key."""
    assert set(HYDRA_KEYS) - {"adv_estimator"} <= set(FIELDS)
    schema = GrpoRunConfig.model_json_schema(by_alias=True)["properties"]
    assert schema["trainFiles"]["description"].endswith("Hydra key: data.train_files.")
