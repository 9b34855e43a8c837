"""Cutting a text into chunks that an embedding model reads whole.

A model reads a bounded number of tokens and silently drops (or refuses) the rest, so a memory
longer than that is embedded chunk by chunk. The cuts fall where the meaning breaks least:
between paragraphs, else sentences, else words. Which tokenizer counts is the provider's
business; these functions take its counter and its limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

__all__ = ["chunk_text"]

TokenCounter = Callable[[str], int]
Span = tuple[int, int]

# Boundaries tried in order when a text is too long for one chunk: paragraphs (a blank line),
# then sentences, then words. CJK sentence ends (the ideographic full stop and the full-width
# exclamation and question marks) carry no space after them, hence the match that may be empty.
_CHUNK_BOUNDARIES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\n[^\S\n]*\n\s*"),
    re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*"),
    re.compile(r"\s+"),
)


def chunk_text(text: str, *, count_tokens: TokenCounter, max_tokens: int) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens each, as ``count_tokens``
    counts them.

    A text that fits is returned unchanged as the only chunk, so ``""`` gives ``[""]`` and
    callers can count on at least one chunk per text. A longer text is cut at paragraph
    boundaries where possible, else at sentence ends, else between words, else (a single
    over-long "word", such as a pasted blob) between characters. Chunks are slices of ``text``
    in order, stripped of the whitespace they were cut at.
    """
    if count_tokens(text) <= max_tokens:
        return [text]
    spans = _split(text, (0, len(text)), level=0, count_tokens=count_tokens, max_tokens=max_tokens)
    # Only a text of nothing but whitespace (too long by the remote estimate) has no words.
    return [text[start:end] for start, end in spans] or [""]


def _split(
    text: str, span: Span, *, level: int, count_tokens: TokenCounter, max_tokens: int
) -> list[Span]:
    if level == len(_CHUNK_BOUNDARIES):
        return _split_characters(text, span, count_tokens=count_tokens, max_tokens=max_tokens)
    chunks: list[Span] = []
    group: list[Span] = []
    group_tokens = 0
    for unit in _units(text, span, _CHUNK_BOUNDARIES[level]):
        unit_tokens = count_tokens(text[unit[0] : unit[1]])
        if unit_tokens > max_tokens:
            chunks += _fitted(text, group, count_tokens=count_tokens, max_tokens=max_tokens)
            group, group_tokens = [], 0
            chunks += _split(
                text, unit, level=level + 1, count_tokens=count_tokens, max_tokens=max_tokens
            )
            continue
        if group:
            gap_tokens = count_tokens(text[group[-1][1] : unit[0]])
            if group_tokens + gap_tokens + unit_tokens <= max_tokens:
                group.append(unit)
                group_tokens += gap_tokens + unit_tokens
                continue
            chunks += _fitted(text, group, count_tokens=count_tokens, max_tokens=max_tokens)
        group, group_tokens = [unit], unit_tokens
    chunks += _fitted(text, group, count_tokens=count_tokens, max_tokens=max_tokens)
    return chunks


def _fitted(
    text: str, group: list[Span], *, count_tokens: TokenCounter, max_tokens: int
) -> list[Span]:
    """The group as one chunk, or halved until each part fits.

    Units were packed by adding their token counts, which is exact for a tokenizer that splits
    at whitespace first but not for every tokenizer (or estimate); halving ends at single units,
    each of which was measured to fit on its own.
    """
    if not group:
        return []
    whole = (group[0][0], group[-1][1])
    if len(group) == 1 or count_tokens(text[whole[0] : whole[1]]) <= max_tokens:
        return [whole]
    middle = len(group) // 2
    return _fitted(
        text, group[:middle], count_tokens=count_tokens, max_tokens=max_tokens
    ) + _fitted(text, group[middle:], count_tokens=count_tokens, max_tokens=max_tokens)


def _split_characters(
    text: str, span: Span, *, count_tokens: TokenCounter, max_tokens: int
) -> list[Span]:
    start, end = span
    if end - start <= 1 or count_tokens(text[start:end]) <= max_tokens:
        return [span]
    middle = (start + end) // 2
    return _split_characters(
        text, (start, middle), count_tokens=count_tokens, max_tokens=max_tokens
    ) + _split_characters(text, (middle, end), count_tokens=count_tokens, max_tokens=max_tokens)


def _units(text: str, span: Span, boundary: re.Pattern[str]) -> Iterator[Span]:
    """The non-blank pieces of ``text[span]`` between matches of ``boundary``, stripped."""
    start, end = span
    position = start
    for match in boundary.finditer(text, start, end):
        yield from _stripped(text, (position, match.start()))
        position = match.end()
    yield from _stripped(text, (position, end))


def _stripped(text: str, span: Span) -> Iterator[Span]:
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        yield (start, end)
