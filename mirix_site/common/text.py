"""Text cut to fit: what a title, a summary or a lesson's field shows of a longer text."""

from __future__ import annotations


def clipped(text: str, limit: int) -> str:
    """The whole text on one line, cut to ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
