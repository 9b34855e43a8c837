"""Which phrasings of an action are one action ("Added Redis cache", "use redis caching"), so
that ``recommend`` pools their evidence instead of splitting it.

Every phrasing is first its key (``action_key``: the stems of the words that name what was
done, in any order). The worker, once it has embedded a phrasing, joins it to a group of the
owner's when no guard holds it apart from any of that group's phrasings (opposites, other
numbers, a negation, a swapped target: ``action_guard``) and the rule finds it the same action
as one of them (``actions_same``: its words contain or are contained in the other's, or the
embedding's similarity clears the model's calibrated thresholds); otherwise it starts its own.
A phrasing keeps its group: a group grows, and only an operator merges or splits one. Before the
worker has embedded a phrasing, recommend groups it by its words alone (``action_groups_of``).
The thresholds are chosen on the dev half of ``action_pairs.json``; bench/action_pairs.py
reports both halves (bench/RESULTS.md).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import snowballstemmer
from django.db import transaction

from mirix_site.common.errors import ConflictError
from mirix_site.providers.embeddings import EmbeddingProvider, cosines
from skills.models import ActionGroupingCalibration, ActionPhrase, Experience

logger = logging.getLogger(__name__)

BUNDLED_PAIRS = Path(__file__).resolve().parents[1] / "calibration" / "action_pairs.json"
MIN_PAIRS = 10
# The share of different pairs the calibration keeps apart (issue 41's goal: 0.97).
APART = 0.97
_SPACES = re.compile(r"\s+")


# Words that say nothing of which action it was: articles, pronouns, fillers, and the verbs of
# doing something at all ("added a cache", "use a cache", "implemented caching"). Negations,
# prepositions and every other verb stay: "retry" and "do not retry", "move to" and "move
# from", "add dropout" and "remove dropout" are different actions.
_EMPTY_WORDS = frozenset(
    (  # noqa: SIM905 (a word list reads best as words)
        "a an the this that these those it its our my your their we i me us some any just also "
        "then ahead went go going gone so add adding added adds use using used uses implement "
        "implementing implemented implements introduce introduced introducing apply applied "
        "applying applies put putting"
    ).split()
)
_WORD = re.compile(r"[a-z0-9][a-z0-9._+/-]*[a-z0-9]|[a-z0-9]")
# A snowball stemmer keeps the word it works on in itself: one per thread (gunicorn's threads
# record experiences at once).
_stemmers = threading.local()


@lru_cache(maxsize=65_536)  # words recur across actions: the stemmer is pure Python
def _stem(word: str) -> str:
    stemmer = getattr(_stemmers, "stemmer", None)
    if stemmer is None:
        stemmer = _stemmers.stemmer = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)


@lru_cache(maxsize=4096)
def action_key(action: str) -> str:
    """An action's key: the stems of its words that name what was done, sorted, so that
    "Added Redis cache", "use redis caching" and "a Redis cache." are one action while
    "a larger batch size" and "a smaller batch size" stay two. Text with no such word keys by
    its normalized self. Cached: a batch names few actions many times, and stemming was a
    large part of its time (bench/RESULTS.md)."""
    words = _WORD.findall(action.lower())
    stems = sorted({_stem(word) for word in words if word not in _EMPTY_WORDS})
    return " ".join(stems) if stems else _SPACES.sub(" ", action.lower()).strip()[:500]


# ---------------------------------------------------------------------------------------------
# The rule: may two phrasings be one action? (bench/action_pairs.py measures it)
#
# A guard keeps two phrasings apart whatever their similarity, when the words say they differ:
# a number one names and the other does not match ("retry 3 times" / "retry 5 times"), a step
# and its negation ("retry" / "do not retry"), opposite directions ("increase" / "decrease",
# "enable" / "disable", "add" / "remove"), opposite ends ("CSV to Parquet" / "Parquet to
# CSV"), or one word swapped for another in the same frame ("a Redis cache" / "a Memcached
# cache"). No maintained antonym resource installs from PyPI with its data here (WordNet's
# packages fetch their data at run time), so the opposites are a small curated list.
# Past the guards, the embedding decides: at or above ``threshold`` always, at or above
# ``guarded_threshold`` only when no content word of either side is left unmatched in the
# other (``_unmatched``). Before a phrasing is embedded, the words alone may join it to a group:
# when one side's content words are all the other's (``actions_same`` with no similarity).
# ---------------------------------------------------------------------------------------------

# Function words: not what was done.
_FUNCTION_WORDS = _EMPTY_WORDS | frozenset(
    (  # noqa: SIM905
        "to for of in on at by with from into onto over as and or before after up down out off "
        "back instead rather than all every each one was were be been is are"
    ).split()
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "once": "1", "twice": "2",
}  # fmt: skip
_NEGATIONS = frozenset(["not", "no", "never", "without", "don't", "dont", "doesn't", "didn't"])
# Opposite poles: a phrasing with words of one pole and none of the other is that pole's.
_POLES = (
    (
        "increase raise larger bigger more higher grow boost bump extend longer up lengthen "
        "expand maximize double",
        "decrease lower reduce smaller less fewer shrink cut halve shorter down shorten minimize",
    ),
    ("enable activate", "disable deactivate off"),
    ("add install insert include introduce create", "remove delete drop uninstall strip rid"),
    ("lazy lazily defer", "eager eagerly preload"),
    ("parallel concurrent concurrently parallelize", "serial serially sequential sequentially"),
    ("upgrade", "downgrade"),
    ("encrypt encrypted", "decrypt decrypted"),
    ("block deny", "allow unblock"),
    ("show display", "hide collapse"),
    ("merge combine join", "split divide"),
    ("forward", "back backward rollback"),
    ("normalize", "denormalize"),
)
# Leading verbs that undo or skip a step: "remove the cache" is not "use the cache".
_UNDOING = (
    "remove delete drop uninstall strip disable deactivate stop skip avoid revoke clear "
    "ignore keep unpin unblock eliminate"
)
_LEAD_FILLER = frozenset(
    ["i", "we", "then", "so", "just", "also", "went", "ahead", "and", "go", "going", "please"]
)
_TO, _FROM = frozenset(["to", "into", "onto", "as"]), frozenset(["from", "off"])
# Words whose difference says nothing (verbs of doing something, generic nouns), and sets of
# words that name one thing, so that a paraphrase's changed word is matched in the other.
_GENERIC = "make set use do run apply get have keep now always whole entire new"
_SYNONYMS = (
    "increase raise larger bigger more higher grow boost bump",
    "decrease lower reduce smaller less fewer shrink cut",
    "enable turn switch activate",
    "disable deactivate",
    "add introduce include insert install create put",
    "remove delete drop strip eliminate",
    "migrate move switch transfer port convert change",
    "db database",
    "postgres postgresql pg",
    "lr learning",
    "intro introduction",
    "doc docs documentation document",
    "config configuration settings",
    "test tests testing",
    "rollback roll revert back",
    "previous last prior",
    "release version deploy deployment",
    "network model",
    "route endpoint",
    "limit limiter limiting throttle",
    "cache caching cached",
    "key keys credentials",
    "run execute perform do make",
    "request requests call",
    "retry retries re-attempt reattempt",
    "standardize normalize scale",
    "image images picture",
    "summary summarize summarise",
    "stream streaming",
    "spinner indicator",
)


def _stems(words: Sequence[str]) -> frozenset[str]:
    return frozenset(_stem(word) for word in words)


_POLE_STEMS = tuple((_stems(up.split()), _stems(down.split())) for up, down in _POLES)
_UNDOING_STEMS = _stems(_UNDOING.split())
_GENERIC_STEMS = _stems(_GENERIC.split())
_SYNONYM_SETS: dict[str, set[int]] = {}
for _index, _line in enumerate(_SYNONYMS):
    for _word in _line.split():
        _SYNONYM_SETS.setdefault(_stem(_word), set()).add(_index)


@dataclass(frozen=True)
class _Phrasing:
    """What the rule reads of one phrasing."""

    words: tuple[str, ...]
    stems: frozenset[str]
    content: tuple[str, ...]  # content words' stems, in order
    numbers: frozenset[str]
    negated: bool
    undoing: bool
    poles: frozenset[tuple[int, int]]
    to: str | None
    source: str | None


@lru_cache(maxsize=4096)
def _phrasing(action: str) -> _Phrasing:
    words = tuple(_WORD.findall(action.lower().replace("\u2019", "'")))
    stems = _stems(words)
    numbers = {
        *_NUMBER.findall(action.lower()),
        *(_NUMBER_WORDS[w] for w in words if w in _NUMBER_WORDS),
    }
    lead = [word for word in words if word not in _LEAD_FILLER]
    first = lead[0] if lead else ""
    negated = any(word in _NEGATIONS or word.endswith("n't") for word in lead[:3])
    undoing = (
        _stem(first) in _UNDOING_STEMS
        or "off" in words
        or bool(stems & _POLE_STEMS[1][1])  # disable, deactivate
    )
    poles = set()
    for index, (up, down) in enumerate(_POLE_STEMS):
        has_up = bool(stems & up) or (index == 1 and "on" in words and bool(stems & _SWITCH))
        has_down = bool(stems & down)
        if has_up != has_down:
            poles.add((index, 1 if has_up else -1))
    ends: dict[frozenset[str], str | None] = {_TO: None, _FROM: None}
    for position, word in enumerate(words):
        for marker, found in list(ends.items()):
            if word in marker and found is None:
                ends[marker] = next(
                    (
                        _stem(other)
                        for other in words[position + 1 :]
                        if other not in _FUNCTION_WORDS
                        and other not in _NUMBER_WORDS
                        and not any(c.isdigit() for c in other)
                    ),
                    None,
                )
    return _Phrasing(
        words=words,
        stems=stems,
        content=tuple(
            _stem(word)
            for word in words
            if word not in _FUNCTION_WORDS and not _NUMBER.fullmatch(word)
        ),
        numbers=frozenset(numbers),
        negated=negated,
        undoing=undoing,
        poles=frozenset(poles),
        to=ends[_TO],
        source=ends[_FROM],
    )


_SWITCH = _stems(["turn", "switch", "flip"])


def _same_word(left: str, right: str) -> bool:
    """One word, or one the start of the other ("postgres", "postgresql")."""
    if left == right:
        return True
    return min(len(left), len(right)) >= 4 and (left.startswith(right) or right.startswith(left))


def _matched(word: str, others: frozenset[str]) -> bool:
    if word in _GENERIC_STEMS or any(_same_word(word, other) for other in others):
        return True
    sets = _SYNONYM_SETS.get(word)
    return bool(sets) and any(sets & _SYNONYM_SETS.get(other, set()) for other in others)


def action_guard(left: str, right: str) -> str | None:  # noqa: PLR0911 (one return per guard)
    """Why two phrasings cannot be one action, whatever their similarity (the module's
    docstring): "number", "negation", "opposite", "direction" or "swap"; None when no guard
    holds them apart."""
    a, b = _phrasing(left), _phrasing(right)
    if a.numbers - b.numbers and b.numbers - a.numbers:
        return "number"
    if a.negated != b.negated or a.undoing != b.undoing:
        return "negation"
    if any((pole, -sign) in b.poles for pole, sign in a.poles):
        return "opposite"
    for x, y in ((a, b), (b, a)):
        if any(
            w.startswith("un") and len(w) > 4 and _stem(w[2:]) in y.stems - x.stems for w in x.words
        ):
            return "opposite"
    if a.to and b.to and not _same_word(a.to, b.to):
        return "direction"
    if (a.to and b.source and _same_word(a.to, b.source)) or (
        b.to and a.source and _same_word(b.to, a.source)
    ):
        return "direction"
    only_a, only_b = set(a.content) - set(b.content), set(b.content) - set(a.content)
    if len(only_a) == 1 and len(only_b) == 1 and set(a.content) & set(b.content):
        (word_a,), (word_b,) = only_a, only_b
        verbs_differ = a.content[0] == word_a and b.content[0] == word_b
        same_pole = any(
            {word_a, word_b} <= (up if sign > 0 else down)
            for (up, down), sign in ((p, s) for p in _POLE_STEMS for s in (1, -1))
        )
        if not (_same_word(word_a, word_b) or verbs_differ or same_pole):
            return "swap"
    return None


def _unmatched(left: str, right: str) -> bool:
    """Whether each side has a content word the other does not match: two different things
    done, though the embedding may find them near ("a Redis cache" / "the session store")."""
    a, b = set(_phrasing(left).content), set(_phrasing(right).content)
    only_a = {w for w in a - b if not _matched(w, frozenset(b))}
    only_b = {w for w in b - a if not _matched(w, frozenset(a))}
    return bool(only_a and only_b)


@dataclass(frozen=True)
class GroupingRule:
    """The similarities from which two phrasings that no guard holds apart are one action:
    ``threshold`` always, ``guarded_threshold`` when no content word is left unmatched."""

    threshold: float
    guarded_threshold: float


def actions_same(
    *, left: str, right: str, similarity: float | None, rule: GroupingRule | None
) -> bool:
    """Whether two phrasings are one action (see the rule's comment above). ``similarity`` None:
    not embedded yet, the words alone decide."""
    if action_guard(left, right):
        return False
    a, b = set(_phrasing(left).content), set(_phrasing(right).content)
    if len(a & b) >= 2 and (a <= b or b <= a):
        return True
    if similarity is None or rule is None:
        return False
    return similarity >= rule.threshold or (
        similarity >= rule.guarded_threshold and not _unmatched(left, right)
    )


def action_pairs_similarities(
    *, embedder: EmbeddingProvider, pairs: Sequence[tuple[str, str]]
) -> list[float]:
    vectors = np.asarray(embedder.embed([text for pair in pairs for text in pair]), dtype=float)
    return [float(cosines(vectors[2 * i], vectors[2 * i + 1])) for i in range(len(pairs))]


def action_pairs_score(
    *,
    rule: GroupingRule,
    same: Sequence[tuple[str, str]],
    different: Sequence[tuple[str, str]],
    same_similarities: Sequence[float],
    different_similarities: Sequence[float],
) -> tuple[float, float]:
    """(recall: the share of same pairs joined, apart: the share of different pairs not)."""
    joined = [
        actions_same(left=a, right=b, similarity=value, rule=rule)
        for (a, b), value in zip(same, same_similarities, strict=True)
    ]
    kept = [
        not actions_same(left=a, right=b, similarity=value, rule=rule)
        for (a, b), value in zip(different, different_similarities, strict=True)
    ]
    return sum(joined) / len(joined), sum(kept) / len(kept)


def grouping_measure(
    *,
    embedder: EmbeddingProvider,
    same: Sequence[tuple[str, str]],
    different: Sequence[tuple[str, str]],
) -> dict[str, float | int]:
    """The rule's thresholds for the model, and their evidence: ActionGroupingCalibration's
    fields. The pair with the most same pairs joined while at least ``APART`` of the different
    pairs stay apart (ties: the higher thresholds), on these (the dev) pairs."""
    if len(same) < MIN_PAIRS or len(different) < MIN_PAIRS:
        raise ValueError(f"At least {MIN_PAIRS} pairs of each are needed.")
    same_values = action_pairs_similarities(embedder=embedder, pairs=same)
    different_values = action_pairs_similarities(embedder=embedder, pairs=different)
    best: tuple[float, float, float, float] | None = None
    for high in np.arange(0.60, 0.98, 0.01):
        for low in np.arange(0.40, high + 0.001, 0.02):
            rule = GroupingRule(
                threshold=round(float(high), 2), guarded_threshold=round(float(low), 2)
            )
            recall, apart = action_pairs_score(
                rule=rule,
                same=same,
                different=different,
                same_similarities=same_values,
                different_similarities=different_values,
            )
            if apart >= APART and (best is None or (recall, high, low) >= best[:3]):
                best = (recall, rule.threshold, rule.guarded_threshold, apart)
    recall, high, low, apart = best if best is not None else (0.0, 1.0, 1.0, 1.0)
    return {
        "threshold": high,
        "guarded_threshold": low,
        "same_pairs": len(same_values),
        "different_pairs": len(different_values),
        "same_mean": round(statistics.fmean(same_values), 4),
        "different_max": round(max(different_values), 4),
        "same_above": round(recall, 4),
        "different_apart": round(apart, 4),
    }


def bundled_pairs(half: str = "dev") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The (same, different) pairs of one half of the set the project ships (its "about")."""
    data = json.loads(BUNDLED_PAIRS.read_text())
    same: list[tuple[str, str]] = []
    different: list[tuple[str, str]] = []
    for cluster in data["clusters"]:
        if cluster["half"] == half:
            same += list(itertools.combinations(cluster["same"], 2))
            different += [(a, b) for b in cluster["different"] for a in cluster["same"]]
    if half == "dev":
        same += [(a, b) for a, b in data["pairs"]["same"]]
        different += [(a, b) for a, b in data["pairs"]["different"]]
    return same, different


def grouping_calibrate(
    *,
    embedder: EmbeddingProvider,
    same: Sequence[tuple[str, str]],
    different: Sequence[tuple[str, str]],
) -> ActionGroupingCalibration:
    calibration, _ = ActionGroupingCalibration.objects.update_or_create(
        model=embedder.model_name,
        defaults=grouping_measure(embedder=embedder, same=same, different=different),
    )
    return calibration


# The bundled pairs' measurement by model: the pairs ship with the code and a model embeds
# them alike every time, so a process measures them once (a test database flushed between
# tests asks again for each).
_bundled_measured: dict[str, dict[str, float]] = {}


def grouping_calibration_ensure(embedder: EmbeddingProvider) -> ActionGroupingCalibration | None:
    """The model's calibration on the bundled pairs, unless it has one: what setup runs. None
    when there was one already."""
    if ActionGroupingCalibration.objects.filter(model=embedder.model_name).exists():
        return None
    measured = _bundled_measured.get(embedder.model_name)
    if measured is None:
        same, different = bundled_pairs()
        measured = grouping_measure(embedder=embedder, same=same, different=different)
        _bundled_measured[embedder.model_name] = measured
    calibration, _ = ActionGroupingCalibration.objects.update_or_create(
        model=embedder.model_name, defaults=measured
    )
    return calibration


@cache
def _warn_uncalibrated(model: str) -> None:
    logger.warning(
        "no action-grouping calibration for embedding model %s: actions are grouped by their "
        "text only (run `manage.py calibrate_action_grouping`)",
        model,
    )


@dataclass(frozen=True)
class _Member:
    """A phrasing a new one may join: its group, key, text, embedding (None: not embedded, or
    read without it) and the keys of the phrasings an operator split it from."""

    group: str
    key: str
    text: str
    vector: np.ndarray | None = None
    apart: frozenset[str] = frozenset()


def _group_choose(
    *, text: str, vector: np.ndarray | None, members: Sequence[_Member], rule: GroupingRule | None
) -> tuple[str | None, float | None]:
    """The group a phrasing joins among ``members`` and its similarity to the nearest member:
    a group none of whose phrasings a guard holds apart from it (so no chain of near phrasings
    carries an opposite in), one of which is the same action (``actions_same``); the nearest
    such. An operator's split holds as a guard does: a phrasing that is the same action as one
    side of a split joins no group of the other side's phrasings. (None, None): it starts its
    own."""
    blocked = {member.group for member in members if action_guard(text, member.text)}
    same: list[tuple[float, _Member]] = []
    for member in members:
        similarity = (
            float(cosines(vector, member.vector))
            if vector is not None and member.vector is not None
            else None
        )
        if actions_same(left=text, right=member.text, similarity=similarity, rule=rule):
            same.append((similarity if similarity is not None else 1.0, member))
    split_from = frozenset().union(*(member.apart for _, member in same))
    blocked |= {member.group for member in members if member.key in split_from}
    best: tuple[float, str] | None = None
    for score, member in same:
        if member.group not in blocked and (best is None or score > best[0]):
            best = (score, member.group)
    if best is None:
        return None, None
    return best[1], (best[0] if vector is not None else None)


@transaction.atomic
def action_phrases_assign(*, experiences: Sequence[Experience], embedder: EmbeddingProvider) -> int:
    """Give each new phrasing among these experiences' actions its group (see the module's
    docstring); phrasings already grouped keep theirs, so a group never splits by itself.
    Returns how many were new."""
    wanted: dict[tuple[int, str, str], Experience] = {}
    for experience in experiences:
        wanted.setdefault(
            (experience.end_user_id, experience.client_id, experience.action_key), experience
        )
    if not wanted:
        return 0
    known = set(
        ActionPhrase.objects.filter(
            end_user_id__in={user for user, _, _ in wanted},
            key__in={key for _, _, key in wanted},
        ).values_list("end_user_id", "client_id", "key")
    )
    new = [(owner, row) for owner, row in wanted.items() if owner not in known]
    if not new:
        return 0
    calibration = ActionGroupingCalibration.objects.filter(model=embedder.model_name).first()
    if calibration is None:
        _warn_uncalibrated(embedder.model_name)
    rule = (
        GroupingRule(
            threshold=calibration.threshold,
            guarded_threshold=calibration.guarded_threshold or calibration.threshold,
        )
        if calibration is not None
        else None
    )
    vectors = np.asarray(embedder.embed([row.action for _, row in new]), dtype=float)
    by_owner: dict[tuple[int, str], list[int]] = {}
    for index, ((user, client, _key), _row) in enumerate(new):
        by_owner.setdefault((user, client), []).append(index)
    phrases: list[ActionPhrase] = []
    for (user, client), indexes in by_owner.items():
        members = [
            _Member(
                group=group,
                key=key,
                text=text or key,
                vector=None if vector is None else np.asarray(vector, dtype=float),
                apart=frozenset(apart),
            )
            for group, key, text, vector, apart in ActionPhrase.objects.filter(
                end_user_id=user, client_id=client
            ).values_list("group_key", "key", "text", "embedding", "apart_from")
        ]
        for index in indexes:
            row = new[index][1]
            group, similarity = _group_choose(
                text=row.action, vector=vectors[index], members=members, rule=rule
            )
            group = group or row.action_key
            phrases.append(
                _phrase(
                    row,
                    group_key=group,
                    text=row.action[:2000],
                    model=embedder.model_name,
                    embedding=vectors[index].tolist(),
                    similarity=similarity,
                )
            )
            members.append(
                _Member(group=group, key=row.action_key, text=row.action, vector=vectors[index])
            )
    ActionPhrase.objects.bulk_create(phrases, ignore_conflicts=True)
    return len(phrases)


def _phrase(row: Experience, **fields: object) -> ActionPhrase:
    return ActionPhrase(
        organization_id=row.organization_id,
        client_id=row.client_id,
        end_user_id=row.end_user_id,
        key=row.action_key,
        **fields,
    )


def action_groups_of(experiences: Sequence[Experience]) -> dict[int, str]:
    """Each experience's group (by id): its phrasing's group; for a phrasing not grouped yet
    (the worker has not embedded it), the group its words alone join (``actions_same``
    without a similarity), else its own key. One query of the experiences' own phrasings when
    the worker has grouped them all, one more of every phrasing of their users when not."""
    users = {experience.end_user_id for experience in experiences}
    groups = {
        (user, client, key): group
        for user, client, key, group in ActionPhrase.objects.filter(
            end_user_id__in=users, key__in={experience.action_key for experience in experiences}
        ).values_list("end_user_id", "client_id", "key", "group_key")
    }
    members: dict[tuple[int, str], list[_Member]] = {}
    if any(
        (experience.end_user_id, experience.client_id, experience.action_key) not in groups
        for experience in experiences
    ):
        for user, client, key, group, text, apart in ActionPhrase.objects.filter(
            end_user_id__in=users
        ).values_list("end_user_id", "client_id", "key", "group_key", "text", "apart_from"):
            members.setdefault((user, client), []).append(
                _Member(group=group, key=key, text=text or key, apart=frozenset(apart))
            )
    result: dict[int, str] = {}
    for experience in sorted(experiences, key=lambda row: row.pk):
        owner = (experience.end_user_id, experience.client_id)
        found = groups.get((*owner, experience.action_key))
        if found is None:
            found, _ = _group_choose(
                text=experience.action, vector=None, members=members.get(owner, []), rule=None
            )
            found = found or experience.action_key
            groups[(*owner, experience.action_key)] = found
            members.setdefault(owner, []).append(
                _Member(group=found, key=experience.action_key, text=experience.action)
            )
        result[experience.pk] = found
    return result


# ---------------------------------------------------------------------------------------------
# An operator's curation: merge two groups, split a phrasing out. Both lock the owner's
# phrasings, so that the worker grouping a new phrasing meanwhile sees the groups before or
# after, never half-moved; their changes are tracked (``ActionPhrase``'s history), authored by
# whoever opened the history context (the admin: the operator).
# ---------------------------------------------------------------------------------------------


class ActionGroupingError(ConflictError):
    """A merge or split that cannot be made as asked."""


def _owner_phrases_lock(phrase: ActionPhrase) -> list[ActionPhrase]:
    return list(
        ActionPhrase.objects.select_for_update()
        .filter(**phrase.owner_ids)
        .defer("embedding")
        .order_by("created_at", "id")
    )


@transaction.atomic
def action_groups_merge(*, into: ActionPhrase, phrases: Sequence[ActionPhrase]) -> int:
    """Every phrasing of the groups of ``phrases`` joins ``into``'s group: recommend pools
    their evidence from now on, and a split between them is undone. Returns how many
    phrasings moved."""
    if any(phrase.owner_ids != into.owner_ids for phrase in phrases):
        raise ActionGroupingError("Only groups of one user, written by one client, merge.")
    rows = {row.pk: row for row in _owner_phrases_lock(into)}
    target = rows[into.pk].group_key
    merged = {rows[phrase.pk].group_key for phrase in phrases} - {target}
    if not merged:
        raise ActionGroupingError("They are one group already.")
    keys = {row.key for row in rows.values() if row.group_key in merged | {target}}
    moved = 0
    for row in rows.values():
        if row.group_key not in merged | {target}:
            continue
        fields = []
        if row.group_key != target:
            row.group_key = target
            fields.append("group_key")
            moved += 1
        if set(row.apart_from) & keys:
            row.apart_from = [key for key in row.apart_from if key not in keys]
            fields.append("apart_from")
        if fields:
            row.save(update_fields=fields)
    return moved


@transaction.atomic
def action_phrase_split(*, phrase: ActionPhrase) -> ActionPhrase:
    """``phrase`` leaves its group for one of its own, held apart from the phrasings it left
    (``apart_from``, on both sides): recommend counts them apart, a new recording of it stays
    in its own group, and the rule joins no new phrasing across the split. When it was the
    phrasing the group is keyed by, the rest take the key of the oldest of them."""
    rows = _owner_phrases_lock(phrase)
    current = next(row for row in rows if row.pk == phrase.pk)
    rest = [row for row in rows if row.group_key == current.group_key and row.pk != current.pk]
    if not rest:
        raise ActionGroupingError("It is alone in its group already.")
    rest_key = rest[0].key if current.group_key == current.key else current.group_key
    for row in rest:
        row.group_key = rest_key
        row.apart_from = sorted({*row.apart_from, current.key})
        row.save(update_fields=["group_key", "apart_from"])
    current.group_key = current.key
    current.apart_from = sorted({*current.apart_from, *(row.key for row in rest)})
    current.save(update_fields=["group_key", "apart_from"])
    return current
