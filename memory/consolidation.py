"""Auto-dream's rule for near-duplicates: when two memories (or experiences) say the same thing
again, and how a user's rows are grouped by it. Pure functions over texts and vectors; the
services that read and write rows are ``memory.services.dreams`` (memory types) and
``skills.dreams`` (experiences).

Two texts are one memory when their normalised texts are equal, or when their stored
embeddings' cosine similarity reaches ``MERGE_SIMILARITY`` and no guard holds them apart. A
guard is the words saying the two differ whatever the embedding thinks: a negation on one side
only ("I like coffee" / "I don't like coffee"), opposite words ("likes" / "dislikes", "love" /
"hate"), or numbers that do not match ("3 kids" / "2 kids"). all-MiniLM-L6-v2 scores such
opposites as near as paraphrases (bench/RESULTS.md, bench/action_pairs.py: "CSV to Parquet" /
"Parquet to CSV" 0.99), so the guard, not the threshold, is what keeps them apart.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import snowballstemmer

# all-MiniLM-L6-v2 on labelled pairs (bench/dream_pairs.py, bench/RESULTS.md): different facts
# of the fact set (same predicate, another value) reach 0.69; the action pairs' hard negatives
# that pass the guard reach 0.99 (word order), 4 of 3,393 at 0.95 or more. A merge is only for
# a fact said again nearly word for word; anything looser is left to the LLM.
MERGE_SIMILARITY = 0.95

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SPACES = re.compile(r"\s+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "once": "1", "twice": "2", "a couple": "2",
}  # fmt: skip
_NEGATIONS = frozenset(
    (  # noqa: SIM905
        "not no never none nobody nothing nowhere neither nor without cannot cant dont doesnt "
        "didnt isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent hadnt aint"
    ).split()
)
# Opposite poles: a text with words of one pole and none of the other leans that way. No
# antonym resource installs offline from PyPI with its data (see skills.services.grouping), so
# these are the opposites people say of themselves and their things.
_POLES = (
    ("like likes liked love loves loved enjoy enjoys enjoyed adore adores fond prefer prefers",
     "dislike dislikes disliked hate hates hated loathe loathes detest detests despise"),
    ("can able could", "unable"),
    ("always", "never rarely"),
    ("yes true correct right", "false wrong incorrect"),
    ("start began begin", "stop end quit"),
    ("open opened opens", "close closed closes shut"),
    ("increase more higher larger bigger raise grow extend longer",
     "decrease less fewer lower smaller reduce shrink cut shorter"),
    ("add enable install join", "remove disable uninstall leave drop delete stop"),
    ("lazy lazily", "eager eagerly"),
    ("before earlier", "after later"),
    ("good great better best", "bad worse worst terrible awful"),
    ("happy glad pleased", "sad unhappy upset"),
    ("allow allowed allows", "forbid forbidden forbids block blocked"),
    ("win won wins", "lose lost loses"),
    ("pass passed", "fail failed"),
    ("accept accepted", "reject rejected decline declined"),
    ("buy bought", "sell sold"),
    ("arrive arrived", "depart departed"),
    ("on", "off"),
)  # fmt: skip
_stemmer = snowballstemmer.stemmer("english")
_POLE_WORDS = tuple(
    (frozenset(_stemmer.stemWords(up.split())), frozenset(_stemmer.stemWords(down.split())))
    for up, down in _POLES
)


def text_normalise(text: str) -> str:
    """A text as compared for equality: case, accents, punctuation and spacing aside."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return _SPACES.sub(" ", " ".join(_WORD.findall(folded.replace("\u2019", "'")))).strip()


@dataclass(frozen=True)
class _Reading:
    words: frozenset[str]
    negated: bool
    poles: frozenset[tuple[int, int]]
    numbers: frozenset[str]


def _reading(text: str) -> _Reading:
    normal = text_normalise(text)
    spoken = normal.split()
    words = [word.replace("'", "") for word in spoken]
    numbers = set(_NUMBER.findall(normal)) | {
        value for word, value in _NUMBER_WORDS.items() if f" {word} " in f" {normal} "
    }
    # An odd count of negations negates ("I don't not like it" is rare enough to ignore).
    negations = sum(
        1 for word in spoken if word.replace("'", "") in _NEGATIONS or word.endswith("n't")
    )
    poles = set()
    stems = frozenset(_stemmer.stemWords(words))
    for index, (up, down) in enumerate(_POLE_WORDS):
        has_up, has_down = bool(up.intersection(stems)), bool(down.intersection(stems))
        if has_up != has_down:
            poles.add((index, 1 if has_up else -1))
    return _Reading(
        words=frozenset(words),
        negated=negations % 2 == 1,
        poles=frozenset(poles),
        numbers=frozenset(numbers),
    )


def texts_opposed(left: str, right: str) -> str | None:
    """Why two texts cannot be one memory whatever their similarity: ``"negation"``,
    ``"opposite"`` or ``"number"``; None when no guard holds them apart."""
    return _readings_opposed(_reading(left), _reading(right))


def _readings_opposed(a: _Reading, b: _Reading) -> str | None:
    if a.negated != b.negated:
        return "negation"
    if any((pole, -sign) in b.poles for pole, sign in a.poles):
        return "opposite"
    for x, y in ((a, b), (b, a)):  # "un-" or "dis-" of a word the other says ("tidy" / "untidy")
        if any(
            (word[:2] in ("un", "in") and word[2:] in y.words - x.words)
            or (word[:3] == "dis" and word[3:] in y.words - x.words)
            for word in x.words
            if len(word) > 5
        ):
            return "opposite"
    if a.numbers != b.numbers:
        return "number"
    return None


Row = TypeVar("Row")


@dataclass
class Cluster(Generic[Row]):
    """Rows that say one thing: ``keeper`` stays current, ``others`` are superseded by it."""

    keeper: Row
    others: list[Row]


@dataclass(frozen=True)
class Candidate(Generic[Row]):
    """A row as the grouping reads it: its text, and its stored vector (None: not embedded
    yet, compared by its text alone)."""

    row: Row
    text: str
    vector: np.ndarray | None


# Rows whose similarities to every earlier row are computed at once (one matrix product of
# this many rows by the rows before them): 512 by 20,000 earlier rows is 40 MB of floats.
SIMILARITY_BLOCK = 512


def _unit_rows(candidates: Sequence[Candidate[Row]]) -> tuple[np.ndarray, np.ndarray]:
    """The candidates' vectors as unit rows of one matrix (a row not embedded: zeros), and
    which rows have one."""
    dimensions = next((len(c.vector) for c in candidates if c.vector is not None), 0)
    matrix = np.zeros((len(candidates), dimensions), dtype="f4")
    present = np.zeros(len(candidates), dtype=bool)
    for index, candidate in enumerate(candidates):
        if candidate.vector is None:
            continue
        vector = np.asarray(candidate.vector, dtype="f4")
        norm = float(np.linalg.norm(vector))
        matrix[index] = vector / norm if norm else vector
        present[index] = True
    return matrix, present


def duplicates_group(
    candidates: Sequence[Candidate[Row]],
    *,
    threshold: float = MERGE_SIMILARITY,
    comparable: Callable[[Row, Row], bool] | None = None,
) -> list[Cluster[Row]]:
    """Group ``candidates`` (given newest first) into clusters of one memory each: a row joins
    the first cluster whose keeper it repeats (equal normalised text, or similarity at or above
    ``threshold`` with no guard against it), else keeps a cluster of its own; ``comparable``
    says whether two rows may be compared at all (same tags, same kind of event). Comparing with
    keepers only, never through a chain of members, makes a second pass over the keepers find
    nothing to merge: a run is idempotent. Returns the clusters with more than one row.

    The similarities come a block of rows at a time from one matrix product against the rows
    before them, and only the keepers they reach are compared in Python: thousands of rows
    take seconds, where comparing each with every keeper one by one took minutes (a user's
    10,000 memories, 50 million comparisons)."""
    normals = [text_normalise(candidate.text) for candidate in candidates]
    matrix, present = _unit_rows(candidates)
    keeper = np.zeros(len(candidates), dtype=bool)
    keepers_by_text: dict[str, list[int]] = {}
    clusters: dict[int, Cluster[Row]] = {}
    readings: dict[int, _Reading] = {}

    def reading(index: int) -> _Reading:
        if index not in readings:
            readings[index] = _reading(candidates[index].text)
        return readings[index]

    for start in range(0, len(candidates), SIMILARITY_BLOCK):
        stop = min(start + SIMILARITY_BLOCK, len(candidates))
        similarities = matrix[start:stop] @ matrix[:stop].T
        for index in range(start, stop):
            candidate, normal = candidates[index], normals[index]
            reached: set[int] = set(keepers_by_text.get(normal, ())) if normal else set()
            if normal and present[index]:
                similar = np.flatnonzero(similarities[index - start, :index] >= threshold)
                reached.update(int(j) for j in similar if keeper[j] and present[j])
            for earlier in sorted(reached):
                kept = candidates[earlier]
                if comparable is not None and not comparable(kept.row, candidate.row):
                    continue
                opposed = normal != normals[earlier] and _readings_opposed(
                    reading(earlier), reading(index)
                )
                if not opposed:
                    clusters.setdefault(earlier, Cluster(kept.row, [])).others.append(candidate.row)
                    break
            else:
                keeper[index] = True
                keepers_by_text.setdefault(normal, []).append(index)
    return [clusters[index] for index in sorted(clusters)]


def lines_fold(value: str) -> tuple[str, int]:
    """A core block's value with its repeated lines folded into their first (equal once
    normalised; blank lines kept as they are), and how many lines went."""
    seen: set[str] = set()
    kept, folded = [], 0
    for line in value.split("\n"):
        normal = text_normalise(line)
        if normal and normal in seen:
            folded += 1
            continue
        seen.add(normal)
        kept.append(line)
    return "\n".join(kept), folded
