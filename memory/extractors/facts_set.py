"""The labelled set of first-person facts (``memory/calibration/facts.json``; issue 39 item 1).

Utterances from chat and from a developer talking to a coding agent, each with the facts a
reader takes from it (subject, predicate, value) or none. A fact extractor chooses its rules
on the dev half and reports precision and recall on the test half. The file's header says how
the set was written, the predicates' meanings and how the halves were drawn; ``facts_split``
is that draw, so anyone can check that no item was placed in a half by hand.

A second dev set (``memory/calibration/facts_dev2.json``, half ``"dev2"``; issue 15/18 item 1)
was written later by another author, with the same vocabulary and labelling rules, to give
rules more varied wording to be chosen on. It is for choosing rules only, never a reported
figure, so ``facts_labelled()`` without a half still means facts.json's dev and test halves.
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
BUNDLED_FACTS_DEV2 = BUNDLED_FACTS.with_name("facts_dev2.json")
HALVES = ("dev", "test")
SECOND_DEV = "dev2"


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
def _facts_read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _facts_file(half: str | None = None) -> dict[str, Any]:
    """The parsed file that holds ``half``: facts.json, or facts_dev2.json for ``"dev2"``."""
    if half is not None and half not in (*HALVES, SECOND_DEV):
        raise ValueError(f"half must be one of {(*HALVES, SECOND_DEV)}, not {half!r}")
    return _facts_read(BUNDLED_FACTS_DEV2 if half == SECOND_DEV else BUNDLED_FACTS)


def facts_header(*, half: str | None = None) -> dict[str, Any]:
    """The header of the file holding ``half`` (facts.json unless ``"dev2"``): what the set is,
    how it was written, the predicates and (for facts.json) the split."""
    return {key: value for key, value in _facts_file(half).items() if key != "items"}


def facts_predicates() -> dict[str, str]:
    """The closed vocabulary of predicates, each with its one-line meaning."""
    return dict(_facts_file()["predicates"])


def facts_labelled(*, half: str | None = None) -> list[LabelledUtterance]:
    """The utterances of one half (``"dev"`` or ``"test"`` of facts.json, or ``"dev2"``, the
    second dev set), or facts.json's two halves when ``half`` is None."""
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
        for item in _facts_file(half)["items"]
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
