"""Which phrasings of an action are one action ("Added Redis cache", "use redis caching"), so
that ``recommend`` pools their evidence instead of splitting it.

Every phrasing is first its key (``action_key``: the stems of the words that name what was
done, in any order): the grouping when no calibration exists for the embedding model, and the
one a phrasing keeps until the worker has embedded it. The worker then compares its embedding
with the first phrasing of each of the owner's groups and joins the nearest at or above the
model's threshold. The threshold sits above every pair of *different* actions measured
(``action_pairs.json``): pooling two strategies would corrupt both their track records, while
splitting one only makes its confidence more cautious. all-MiniLM-L6-v2 scores "a larger
batch size" and "a smaller batch size" 0.98, above most true paraphrases, so for it the
threshold lets only near-identical phrasings join; the key does the work (bench/RESULTS.md).
"""

from __future__ import annotations

import json
import logging
import re
import statistics
import threading
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import snowballstemmer
from django.db import transaction

from mirix_site.providers.embeddings import EmbeddingProvider, cosines
from skills.models import ActionGroupingCalibration, ActionPhrase, Experience

logger = logging.getLogger(__name__)

BUNDLED_PAIRS = Path(__file__).resolve().parents[1] / "calibration" / "action_pairs.json"
MIN_PAIRS = 10
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


def grouping_measure(
    *,
    embedder: EmbeddingProvider,
    same: Sequence[tuple[str, str]],
    different: Sequence[tuple[str, str]],
) -> dict[str, float | int]:
    """The threshold and its evidence for the model: ActionGroupingCalibration's fields."""
    if len(same) < MIN_PAIRS or len(different) < MIN_PAIRS:
        raise ValueError(f"At least {MIN_PAIRS} pairs of each are needed.")
    pairs = [*same, *different]
    vectors = np.asarray(embedder.embed([text for pair in pairs for text in pair]), dtype=float)
    similarities = [float(cosines(vectors[2 * i], vectors[2 * i + 1])) for i in range(len(pairs))]
    same_values, different_values = similarities[: len(same)], similarities[len(same) :]
    # The smallest value (to 4 decimals) above every different pair.
    threshold = float(np.floor(max(different_values) * 10_000) + 1) / 10_000
    return {
        "threshold": threshold,
        "same_pairs": len(same_values),
        "different_pairs": len(different_values),
        "same_mean": round(statistics.fmean(same_values), 4),
        "different_max": round(max(different_values), 4),
        "same_above": round(sum(v >= threshold for v in same_values) / len(same_values), 4),
    }


def bundled_pairs() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The (same, different) pairs the project ships."""
    data = json.loads(BUNDLED_PAIRS.read_text())
    return [tuple(p) for p in data["same"]], [tuple(p) for p in data["different"]]


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


def grouping_calibration_ensure(embedder: EmbeddingProvider) -> ActionGroupingCalibration | None:
    """The model's calibration on the bundled pairs, unless it has one: what setup runs. None
    when there was one already."""
    if ActionGroupingCalibration.objects.filter(model=embedder.model_name).exists():
        return None
    same, different = bundled_pairs()
    return grouping_calibrate(embedder=embedder, same=same, different=different)


@cache
def _warn_uncalibrated(model: str) -> None:
    logger.warning(
        "no action-grouping calibration for embedding model %s: actions are grouped by their "
        "text only (run `manage.py calibrate_action_grouping`)",
        model,
    )


@transaction.atomic
def action_phrases_assign(*, experiences: Sequence[Experience], embedder: EmbeddingProvider) -> int:
    """Give each new phrasing among these experiences' actions its group (see the module's
    docstring); phrasings already grouped keep theirs. Returns how many were new."""
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
        ActionPhrase.objects.bulk_create(
            [_phrase(row, group_key=row.action_key) for _, row in new], ignore_conflicts=True
        )
        return len(new)
    vectors = np.asarray(embedder.embed([row.action for _, row in new]), dtype=float)
    by_owner: dict[tuple[int, str], list[int]] = {}
    for index, ((user, client, _key), _row) in enumerate(new):
        by_owner.setdefault((user, client), []).append(index)
    phrases: list[ActionPhrase] = []
    for (user, client), indexes in by_owner.items():
        # Each group's first phrasing stands for it (a group never drifts phrasing by phrasing).
        leaders = list(
            ActionPhrase.objects.filter(
                end_user_id=user, client_id=client, model=embedder.model_name
            ).values_list("group_key", "key", "embedding")
        )
        leader_keys = [group for group, key, _ in leaders if group == key]
        leader_vectors = [np.asarray(v, dtype=float) for g, k, v in leaders if g == k]
        for index in indexes:
            row = new[index][1]
            group, similarity = row.action_key, None
            if leader_vectors:
                scores = cosines(vectors[index], np.vstack(leader_vectors))
                best = int(np.argmax(scores))
                if scores[best] >= calibration.threshold:
                    group, similarity = leader_keys[best], float(scores[best])
            phrases.append(
                _phrase(
                    row,
                    group_key=group,
                    model=embedder.model_name,
                    embedding=vectors[index].tolist(),
                    similarity=similarity,
                )
            )
            if group == row.action_key:
                leader_keys.append(group)
                leader_vectors.append(vectors[index])
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
    """Each experience's group (by id): its phrasing's group, or its own text when the
    phrasing is not grouped yet. One query."""
    keys = {experience.action_key for experience in experiences}
    users = {experience.end_user_id for experience in experiences}
    groups = {
        (user, client, key): group
        for user, client, key, group in ActionPhrase.objects.filter(
            end_user_id__in=users, key__in=keys
        ).values_list("end_user_id", "client_id", "key", "group_key")
    }
    return {
        experience.pk: groups.get(
            (experience.end_user_id, experience.client_id, experience.action_key),
            experience.action_key,
        )
        for experience in experiences
    }
