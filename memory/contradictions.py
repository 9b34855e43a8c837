"""Auto-dream's rule for facts a later turn contradicts: when a structured fact (subject,
predicate, value: ``memory.extractors.facts``' vocabulary, ``memory/calibration/facts.json``)
is replaced by one said later, and which replaces which. Pure functions over facts and their
times; ``memory.services.dreams`` reads and writes the rows.

A later fact supersedes an earlier one of the same subject when:

- both state a predicate that holds one value at a time (``SINGLE_VALUED``) with another value:
  a new name, age, home, employer, job, partner, birthday or diet. ``lives_in`` and
  ``moved_to`` are one slot, where the person lives now ("I live in Paris" … "we moved to
  Berlin", and a later move after that). A diet that is a restriction ("gluten free", "dairy
  free") sits beside another diet rather than replacing it.
- it is a change that names what it ends: ``switched_to`` "A -> B" ends ``uses`` A,
  ``prefers`` A and an earlier switch to A; ``no_longer`` X ends ``uses``, ``likes``,
  ``hobby``, ``has_pet``, ``diet``, ``lives_in``, ``works_at`` or ``works_as`` X (read with
  or without its verb: "no longer: using Vim" ends "uses: Vim", "no longer: have a dog" ends
  "has_pet: dog: Rex"; a move is where one lives, a switch to X a use of X).
- it says again what an earlier ``no_longer`` ended, by the same reading: "I no longer use
  Postgres" … "I use Postgres again" ("I'm back on Postgres", "I switched back to Postgres"),
  "no longer: live in Rome" … "moved_to: Rome".

Everything else may hold together (several likes, pets, languages, tools) and is never
superseded here: a false supersession hides a true fact, a missed one leaves an old fact
beside the new. Facts said at the same moment (one turn) never contradict each other; a fact
is replaced by the earliest later fact that contradicts it, so its validity ends then.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

T = TypeVar("T")

# Predicates that hold one value at a time for a person.
SINGLE_VALUED = frozenset(
    ("name", "age", "lives_in", "moved_to", "works_at", "works_as", "partner", "birthday", "diet")
)
# Predicates that fill the same slot as another: a move is where one lives now.
_SLOTS = {"moved_to": "lives_in"}
# A diet of this kind is a restriction kept beside another diet ("vegan" and "gluten free").
_RESTRICTION = re.compile(r"\b(?:free|low[- ]carb|intolerant)\b", re.IGNORECASE)

# What "no longer X" ends, per predicate: the verbs X may start with before the earlier value.
_ENDED_BY_NO_LONGER: dict[str, str] = {
    "uses": r"use|using|used",
    "likes": r"like|liking|love|loving|enjoy|enjoying",
    "hobby": r"play|playing|do|doing|practi[sc]e|practi[sc]ing|go|going",
    "has_pet": r"have|having|own|owning",
    "diet": r"be|being|eat|eating",
    "lives_in": r"live in|living in",
    "works_at": r"work at|working at|work for|working for",
    "works_as": r"work as|working as|be|being",
}
_ENDED_BY_SWITCH = frozenset(("uses", "prefers", "switched_to"))

_LEADING = re.compile(r"^(?:a|an|the|my|our)\s+", re.IGNORECASE)
_PUNCTUATION = re.compile(r"[^\w\s:'+#.-]+")


@dataclass(frozen=True)
class Stated(Generic[T]):
    """A fact as said: what it is about, its predicate and value, and when (its turn's
    time); ``item`` is whatever the caller keeps it as (a row)."""

    item: T
    subject: str
    predicate: str
    value: str
    said_at: datetime


def _normal(value: str) -> str:
    text = " ".join(_PUNCTUATION.sub(" ", value.casefold()).split()).strip(" .")
    return _LEADING.sub("", text)


def _slot(predicate: str) -> str | None:
    if predicate not in SINGLE_VALUED:
        return None
    return _SLOTS.get(predicate, predicate)


def _switched(value: str) -> tuple[str | None, str]:
    """A switch's (from, to); from is None when the turn did not say it."""
    if " -> " in value:
        old, new = value.split(" -> ", 1)
        return _normal(old), _normal(new)
    return None, _normal(value)


def _values_of(fact: Stated[T]) -> set[str]:
    """The forms a later change may name the fact's value by."""
    value = _normal(fact.value)
    if fact.predicate == "prefers":
        return {_normal(value.split(" over ", 1)[0])}
    if fact.predicate == "switched_to":
        return {_switched(fact.value)[1]}
    if fact.predicate in ("has_pet", "partner") and ": " in value:
        kind, name = value.split(": ", 1)
        return {value, _normal(kind), _normal(name)}
    return {value}


def _stoppable(fact: Stated[T]) -> str | None:
    """The predicate a "no longer" names the fact under (``_ENDED_BY_NO_LONGER``): its own,
    its slot's (a move is where one lives), ``uses`` for a switch (to what it switched to);
    None when no "no longer" ends it."""
    predicate = "uses" if fact.predicate == "switched_to" else _SLOTS.get(fact.predicate)
    predicate = predicate or fact.predicate
    return predicate if predicate in _ENDED_BY_NO_LONGER else None


def _stopped(no_longer: Stated[T], fact: Stated[T]) -> bool:
    """Whether ``no_longer`` says that what ``fact`` states stopped."""
    predicate = _stoppable(fact)
    return predicate is not None and bool(_ended(no_longer.value, predicate) & _values_of(fact))


def _ended(stopped: str, predicate: str) -> set[str]:
    """What "no longer ``stopped``" may end among facts of ``predicate``: the words as said,
    and without the predicate's verb."""
    said = _normal(stopped)
    ended = {said}
    verbs = _ENDED_BY_NO_LONGER[predicate]
    found = re.match(rf"^(?:{verbs})\s+(.+)$", said)
    if found:
        ended.add(_normal(found.group(1)))
    return ended


def contradicts(*, newer: Stated[T], older: Stated[T]) -> bool:
    """Whether ``newer``, said later of the same subject, replaces ``older``."""
    if newer.said_at <= older.said_at or newer.subject.casefold() != older.subject.casefold():
        return False
    slot = _slot(newer.predicate)
    if slot is not None and slot == _slot(older.predicate):
        if newer.predicate == "diet" and (
            _RESTRICTION.search(newer.value) or _RESTRICTION.search(older.value)
        ):
            return False
        return _normal(newer.value) != _normal(older.value)
    if newer.predicate == "switched_to" and older.predicate in _ENDED_BY_SWITCH:
        old, _new = _switched(newer.value)
        return old is not None and old in _values_of(older)
    if "no_longer" in (newer.predicate, older.predicate):
        # "No longer X" ends X; X said again after it ends the "no longer".
        stop, fact = (newer, older) if newer.predicate == "no_longer" else (older, newer)
        return _stopped(stop, fact)
    return False


def contradictions_find(facts: Sequence[Stated[T]]) -> list[tuple[T, T]]:
    """The (older, newer) pairs among ``facts``: each fact a later one contradicts, with the
    earliest that does (ties: the first given)."""
    ordered = sorted(enumerate(facts), key=lambda pair: (pair[1].said_at, pair[0]))
    pairs: list[tuple[T, T]] = []
    for index, (_, older) in enumerate(ordered):
        for _, newer in ordered[index + 1 :]:
            if contradicts(newer=newer, older=older):
                pairs.append((older.item, newer.item))
                break
    return pairs
