"""A task that repeats one of a skill's learned requests finds that skill first, even when the
embedding leans a little to another skill whose requests share the task's words only piecemeal
(the phrasing lane, skills.phrasing_lane); a paraphrase that repeats no request is left to the
vectors."""

from __future__ import annotations

import numpy as np
import pytest
from django.test import override_settings

from accounts.models import EndUser
from mirix_site.providers.embeddings import unit_rows
from mirix_site.search.spaces import write_embedders
from skills.content import SkillContent
from skills.models import Skill, SkillEmbedding
from skills.phrasing_lane import phrasing_matches
from skills.services.skills import Provenance, skill_version_write
from tests.factories import TenantFixture

TASK = "Thumbs down the top post in gadgets"
# The skill learned from the task's very words, among requests for other things.
LEARNED_FROM_IT = (TASK, "Archive the old newsletters", "Rename the billing folder")
# A skill whose requests hold each of the task's words, but never more than two in one.
PIECEMEAL = (
    "Top post of the week",
    "Post a thumbs up",
    "Gadgets forum thumbs",
    "Top gadgets list",
)


@pytest.fixture
def two_skills(org: TenantFixture) -> dict[str, int]:
    """The two skills, their search vectors set so that the task's embedding is nearer the
    piecemeal one (cosine 0.815 against 0.80): the embedding's lean, made exact. The piecemeal
    skill's requests also hold more of the task's words in all, so BM25 over each skill as one
    document leans to it too."""
    org.api.post("/users/create_or_get", {"user_id": "agent-user"}, format="json")
    end_user = EndUser.objects.get(user_id="agent-user", organization=org.organization)
    owner = {
        "organization_id": org.organization.pk,
        "client_id": org.client.pk,
        "end_user_id": end_user.pk,
    }
    embedder = write_embedders()[0]
    written = {}
    for name, triggers in (("exact-match", LEARNED_FROM_IT), ("piecemeal", PIECEMEAL)):
        skill = skill_version_write(
            owner=owner,
            skill=None,
            content=SkillContent(name, "A skill.", triggers=triggers),
            provenance=Provenance(author="operator", operation="edit"),
            embedders=[embedder],
        ).skill
        Skill.objects.filter(pk=skill.pk).update(tools=[name.replace("-", "_")])
        written[name] = skill.pk
    task = unit_rows(np.asarray(embedder.embed([TASK]), dtype=float))[0]
    other = np.zeros_like(task)
    other[int(np.argmin(np.abs(task)))] = 1.0
    aside = unit_rows((other - (other @ task) * task)[None, :])[0]
    for name, cosine in (("exact-match", 0.80), ("piecemeal", 0.815)):
        vector = cosine * task + np.sqrt(1 - cosine**2) * aside
        SkillEmbedding.objects.filter(skill_id=written[name]).update(embedding=vector.tolist())
    return written


def _found(org: TenantFixture, task: str) -> list[dict]:
    answer = org.api.post(
        "/skills/retrieve", {"user_id": "agent-user", "task": task, "limit": 2}, format="json"
    )
    assert answer.status_code == 200, answer.content
    return answer.json()["skills"]


def _ranked(org: TenantFixture, task: str) -> list[str]:
    return [skill["id"] for skill in _found(org, task)]


def test_the_skill_learned_from_the_tasks_words_comes_first(
    org: TenantFixture, two_skills: dict[str, int]
) -> None:
    exact, piecemeal = str(two_skills["exact-match"]), str(two_skills["piecemeal"])
    # Without the lane, the embedding's lean and the piecemeal skill's many matching words win.
    with override_settings(SKILL_SEARCH_PHRASING_WEIGHT=0.0):
        assert _ranked(org, TASK) == [piecemeal, exact]
    assert _ranked(org, TASK) == [exact, piecemeal]
    # A task whose words are spread over several requests, none holding most of them, gains
    # nothing: the vectors and the whole skills' BM25 rank it as before.
    paraphrase = "archive thumbs gadgets"
    with override_settings(SKILL_SEARCH_PHRASING_WEIGHT=0.0):
        unchanged = [(skill["id"], skill["score"]) for skill in _found(org, paraphrase)]
    assert len(unchanged) == 2
    assert [(skill["id"], skill["score"]) for skill in _found(org, paraphrase)] == unchanged


@pytest.mark.django_db
def test_a_match_is_the_best_request_and_the_share_of_the_task_it_holds() -> None:
    learned_from_it, piecemeal = phrasing_matches(TASK, [LEARNED_FROM_IT, PIECEMEAL])
    assert learned_from_it.coverage == pytest.approx(1.0)
    assert 0 < piecemeal.coverage < 0.7
    assert learned_from_it.bm25 > piecemeal.bm25 > 0
    # The share is of the task's words some request holds: words none holds (a new name)
    # leave it as it was; a task of none matches nothing.
    [with_unseen] = phrasing_matches(f"{TASK} zebra", [LEARNED_FROM_IT])
    assert with_unseen.coverage == pytest.approx(1.0)
    assert phrasing_matches("zebra", [LEARNED_FROM_IT, PIECEMEAL])[0].coverage == 0.0
