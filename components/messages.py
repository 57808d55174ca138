"""How error messages show a value the user gave: quoted, and never longer than a line."""

from __future__ import annotations

from typing import Any

MAX_SHOWN = 60  # characters of a value an error message quotes


def quoted(value: Any, limit: int = MAX_SHOWN) -> str:
    """repr() of `value`, cut to `limit` characters with the full length said, so that a pasted
    file or a runaway string cannot flood the terminal or the CI log."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(str(value))} characters)"
