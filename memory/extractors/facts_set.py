"""The labelled set of first-person facts (``memory/calibration/facts.json``; issue 39 item 1).

Utterances from chat and from a developer talking to a coding agent, each with the facts a
reader takes from it (subject, predicate, value) or none. A fact extractor chooses its rules
on the dev half and reports precision and recall on the test half. The file's header says how
the set was written, the predicates' meanings and how the halves were drawn; ``facts_split``
is that draw, so anyone can check that no item was placed in a half by hand.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

BUNDLED_FACTS = Path(__file__).resolve().parents[1] / "calibration" / "facts.json"
HALVES = ("dev", "test")


@dataclass(frozen=True)
class LabelledFact:
    """One fact a reader takes from an utterance: ``subject`` is ``"user"`` (the speaker) or
    one of the speaker's people, e.g. ``"Maya (daughter)"``."""

    subject: str
    predicate: str
    value: str


@dataclass(frozen=True)
class LabelledUtterance:
    """One turn of the set and the facts it states (none for a negative)."""

    id: str
    half: str
    source: str
    speaker: str
    text: str
    facts: tuple[LabelledFact, ...]
    note: str = ""


@cache
def _facts_file() -> dict[str, Any]:
    return json.loads(BUNDLED_FACTS.read_text())


def facts_header() -> dict[str, Any]:
    """The set's header: what it is, how it was written, the predicates and the split."""
    return {key: value for key, value in _facts_file().items() if key != "items"}


def facts_predicates() -> dict[str, str]:
    """The closed vocabulary of predicates, each with its one-line meaning."""
    return dict(_facts_file()["predicates"])


def facts_labelled(*, half: str | None = None) -> list[LabelledUtterance]:
    """The utterances of one half (``"dev"`` or ``"test"``), or of both when ``half`` is None."""
    if half is not None and half not in HALVES:
        raise ValueError(f"half must be one of {HALVES}, not {half!r}")
    return [
        LabelledUtterance(
            id=item["id"],
            half=item["half"],
            source=item["source"],
            speaker=item["speaker"],
            text=item["text"],
            facts=tuple(
                LabelledFact(
                    subject=fact["subject"], predicate=fact["predicate"], value=fact["value"]
                )
                for fact in item["facts"]
            ),
            note=item.get("note", ""),
        )
        for item in _facts_file()["items"]
        if half is None or item["half"] == half
    ]


def facts_split(*, items: Iterable[dict[str, Any]], seed: str) -> dict[str, str]:
    """Each item's half, drawn by a seeded shuffle within each stratum (source x whether the
    item states any fact): items are ordered by sha256(seed:id) and the first half of each
    stratum (rounded up) is dev. A hash rather than ``random`` so the draw is the same in any
    language and Python version."""
    strata: dict[tuple[str, bool], list[str]] = defaultdict(list)
    for item in items:
        strata[(item["source"], bool(item["facts"]))].append(item["id"])
    halves: dict[str, str] = {}
    for ids in strata.values():
        ids.sort(key=lambda item_id: hashlib.sha256(f"{seed}:{item_id}".encode()).hexdigest())
        cut = (len(ids) + 1) // 2
        halves.update({item_id: "dev" if n < cut else "test" for n, item_id in enumerate(ids)})
    return halves
