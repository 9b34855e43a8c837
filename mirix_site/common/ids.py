"""Row ids as the API reads them, in a path or a body: ASCII digits without a leading zero,
within PostgreSQL's bigint. ``017`` and 17 in Arabic-Indic digits (which Python's ``int``
reads as 17) name nothing: one spelling per row, as a cache, a log or a rate limit keyed by
the path expects."""

from __future__ import annotations

import re

ROW_ID_PATTERN = "[1-9][0-9]{0,17}"
_ROW_ID = re.compile(ROW_ID_PATTERN)


def row_id(text: str) -> int | None:
    """The row id ``text`` spells, or None when it spells none."""
    return int(text) if _ROW_ID.fullmatch(text) else None


class RowIdConverter:
    """``<id:name>`` in a URL pattern: a row id as ``row_id`` reads it."""

    regex = ROW_ID_PATTERN

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)
