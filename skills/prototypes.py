"""A skill's search vector: a prototype of its phrasings, fit against its owner's other skills.

A skill is learned from phrasings: its name and description, the tasks it was learned from
(its triggers) and what its tools do. The mean of a skill's phrasings stands for all of them
but knows nothing of the owner's other skills, and two skills of neighbouring tools have
neighbouring means. The prototypes are fit instead as a classifier of the owner's phrasings:
starting from the means, each is moved so that a softmax over the cosine similarities
(times ``SCALE``) of every phrasing to every prototype gives the phrasing to its own skill,
by ``STEPS`` steps of gradient descent on the sphere. What tells a skill from its neighbours
gains weight; what they share loses it. One skill alone keeps its mean.

Measured on MetaTool (bench/skill_learning.py; bench/RESULTS.md, "skills searched by
prototypes"): better than the phrasings' means at 20 sessions per tool, level at 5.

Every write of a skill's vectors fits all of its owner's served skills again, in the
transaction that writes them; the phrasings' embeddings are kept (``SkillPhrasing``), so a
fit embeds only the phrasings it has not seen. Its cost grows with the skills times their
phrasings: past ``SKILL_PROTOTYPE_MAX_SKILLS`` served skills a user's vectors are the means. A
skill that stops being served keeps its vectors and leaves the others' as they are until the
owner's next write.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
from django.conf import settings
from django.db import connection

from mirix_site.providers.embeddings import EmbeddingProvider, unit_rows
from skills.lifecycle import SERVED_STATUSES
from skills.models import Skill, SkillEmbedding, SkillPhrasing

logger = logging.getLogger(__name__)

# The softmax's inverse temperature and the descent's steps and step size. Chosen on the dev
# halves of six seeded MetaTool splits, mean of 5 and 20 sessions per tool: scale 20 0.765,
# 10 0.764, the vectors before them (description, mean, means of parts) 0.760; 50 steps of
# 5.0 fit as 200 of 1.0 do, four times sooner.
SCALE = 20.0
STEPS = 50
STEP_SIZE = 5.0


def skill_phrasings(skill: Skill, chunk: Callable[[str], list[str]]) -> list[str]:
    """The texts a skill's prototype is fit from, each a piece the model reads whole: its name
    and description, its triggers, what its tools do (each once)."""
    said = [text for text in (skill.tool_descriptions or {}).values() if text]
    texts = [f"{skill.name}\n{skill.description}", *skill.triggers, *said]
    return list(dict.fromkeys(piece for text in texts for piece in chunk(text)))


def prototypes_fit(
    vectors: np.ndarray, labels: np.ndarray, count: int, *, steps: int = STEPS
) -> np.ndarray:
    """One unit prototype per label 0..count-1, fit over the labelled unit vectors: ``steps``
    steps down the gradient of the mean cross-entropy of softmax(SCALE · cosine) with respect
    to each prototype, through its normalisation, from the labels' means (0: the means)."""
    onehot = np.eye(count)[labels]
    prototypes = unit_rows(onehot.T @ vectors)
    for _ in range(steps):
        unit = unit_rows(prototypes)
        logits = SCALE * vectors @ unit.T
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        gradient = SCALE * (probabilities - onehot).T @ vectors / len(vectors)
        gradient -= (gradient * unit).sum(axis=1, keepdims=True) * unit
        prototypes = prototypes - STEP_SIZE * gradient / np.linalg.norm(
            prototypes, axis=1, keepdims=True
        )
    return unit_rows(prototypes)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _phrasing_vectors(
    skills: Sequence[Skill], embedder: EmbeddingProvider
) -> dict[int, list[np.ndarray]]:
    """Each skill's phrasings' embeddings by this model: the kept ones read, the new ones
    embedded (in one call) and kept, the ones it no longer has dropped."""
    texts = {skill.pk: skill_phrasings(skill, embedder.chunk) for skill in skills}
    kept: dict[tuple[int, str], np.ndarray] = {
        (skill_id, digest): np.asarray(vector, dtype=float)
        for skill_id, digest, vector in SkillPhrasing.objects.filter(
            skill_id__in=list(texts), model=embedder.model_name
        ).values_list("skill_id", "digest", "embedding")
    }
    wanted = {(skill_id, _digest(text)): text for skill_id, its in texts.items() for text in its}
    missing = [key for key in wanted if key not in kept]
    if missing:
        embedded = embedder.embed([wanted[key] for key in missing])
        by_id = {skill.pk: skill for skill in skills}
        SkillPhrasing.objects.bulk_create(
            [
                SkillPhrasing(
                    **by_id[skill_id].owner_ids,
                    skill_id=skill_id,
                    model=embedder.model_name,
                    digest=digest,
                    embedding=list(vector),
                )
                for (skill_id, digest), vector in zip(missing, embedded, strict=True)
            ],
            ignore_conflicts=True,
        )
        for key, vector in zip(missing, embedded, strict=True):
            kept[key] = np.asarray(vector, dtype=float)
    stale: dict[int, list[str]] = defaultdict(list)
    for skill_id, digest in kept:
        if (skill_id, digest) not in wanted:
            stale[skill_id].append(digest)
    for skill_id, digests in stale.items():
        SkillPhrasing.objects.filter(
            skill_id=skill_id, model=embedder.model_name, digest__in=digests
        ).delete()
    vectors: dict[int, list[np.ndarray]] = defaultdict(list)
    for key in wanted:
        vectors[key[0]].append(kept[key])
    return vectors


def _owner_lock(client_id: int, end_user_id: int) -> None:
    """Serialise fits of one owner (a learning run's and an operator's edit): each replaces
    every prototype of the owner."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))",
            [f"skill-prototypes:{client_id}:{end_user_id}"],
        )


def skill_vectors_write(skills: Sequence[Skill], embedder: EmbeddingProvider) -> None:
    """Write the search vectors of these skills' owners, by this model: every served skill of
    each owner gets the prototype fit over all of that owner's served skills' phrasings."""
    owners = {(skill.client_id, skill.end_user_id) for skill in skills}
    for client_id, end_user_id in sorted(owners):
        _owner_lock(client_id, end_user_id)
        served = list(
            Skill.objects.filter(
                client_id=client_id, end_user_id=end_user_id, status__in=SERVED_STATUSES
            ).order_by("pk")
        )
        if not served:
            continue
        by_skill = _phrasing_vectors(served, embedder)
        labels = np.asarray([k for k, skill in enumerate(served) for _ in by_skill[skill.pk]])
        vectors = unit_rows(np.vstack([v for skill in served for v in by_skill[skill.pk]]))
        steps = STEPS if len(served) <= settings.SKILL_PROTOTYPE_MAX_SKILLS else 0
        if not steps:
            logger.warning(
                "%d served skills of end user %d: past SKILL_PROTOTYPE_MAX_SKILLS (%d), their "
                "vectors are their phrasings' means, not fit",
                len(served),
                end_user_id,
                settings.SKILL_PROTOTYPE_MAX_SKILLS,
            )
        prototypes = prototypes_fit(vectors, labels, len(served), steps=steps)
        SkillEmbedding.objects.filter(skill__in=served, model=embedder.model_name).delete()
        SkillEmbedding.objects.bulk_create(
            [
                SkillEmbedding(
                    **skill.owner_ids,
                    skill=skill,
                    model=embedder.model_name,
                    chunk_index=0,
                    embedding=prototype.tolist(),
                )
                for skill, prototype in zip(served, prototypes, strict=True)
            ]
        )
