"""Decoded JSON values: one walk over their strings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def strings_mapped(value: Any, transform: Callable[[str], str]) -> Any:
    """``value`` (decoded JSON) with ``transform`` applied to every string in it, object keys
    included. Recursive: for values whose depth is bounded (request bodies are, by the parser's
    ``MAX_JSON_DEPTH``)."""
    if isinstance(value, str):
        return transform(value)
    if isinstance(value, dict):
        return {transform(key): strings_mapped(item, transform) for key, item in value.items()}
    if isinstance(value, list):
        return [strings_mapped(item, transform) for item in value]
    return value
