"""A skill's search vector is a prototype fit over its phrasings against its owner's other
skills: the fit itself, and what a write of skills leaves in the database."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from django.test import override_settings

from accounts.models import EndUser
from mirix_site.providers.embeddings import EmbeddingProvider, unit_rows
from mirix_site.search.spaces import write_embedders
from skills.content import SkillContent
from skills.models import Skill, SkillEmbedding, SkillPhrasing
from skills.prototypes import prototypes_fit, skill_phrasings
from skills.services.skills import Provenance, skill_version_write
from tests.factories import TenantFixture


def test_one_skill_alone_keeps_the_mean_of_its_phrasings() -> None:
    vectors = unit_rows(np.random.default_rng(0).normal(size=(6, 8)))
    [prototype] = prototypes_fit(vectors, np.zeros(6, dtype=int), 1)
    assert np.allclose(prototype, unit_rows(vectors.mean(axis=0)))


def test_the_fit_weighs_what_tells_two_skills_apart() -> None:
    # Two skills whose phrasings share most of their direction (axis 0) and differ by a little
    # (axis 1 or 2), with noise on every axis.
    rng = np.random.default_rng(1)
    first = np.column_stack([np.full(20, 0.9), np.full(20, 0.3), np.zeros(20)])
    second = np.column_stack([np.full(20, 0.9), np.zeros(20), np.full(20, 0.3)])
    noise = rng.normal(scale=0.15, size=(40, 8))
    vectors = unit_rows(np.hstack([np.vstack([first, second]), np.zeros((40, 5))]) + noise)
    labels = np.repeat([0, 1], 20)
    means = unit_rows(np.vstack([vectors[:20].mean(axis=0), vectors[20:].mean(axis=0)]))
    prototypes = prototypes_fit(vectors, labels, 2)
    assert np.allclose(np.linalg.norm(prototypes, axis=1), 1.0)
    # Pushed apart: the shared axis weighs less, each its own axis more.
    assert prototypes[0] @ prototypes[1] < means[0] @ means[1] - 0.2
    assert prototypes[0][0] < means[0][0] and prototypes[0][1] > means[0][1]
    # Every phrasing is nearer its own skill than the other by a wider margin.
    own = np.arange(40), labels

    def margins(centres: np.ndarray) -> np.ndarray:
        similarity = vectors @ centres.T
        return similarity[own] - similarity[np.arange(40), 1 - labels]

    assert (margins(prototypes) > margins(means)).all()


def test_a_skills_phrasings_are_what_it_says_what_it_was_learned_from_and_what_its_tools_do() -> (
    None
):
    skill = Skill(
        name="read-csv",
        description="Reads CSV files.",
        triggers=["Read orders.csv", "Load the CSV", "Read orders.csv"],
        tool_descriptions={"read_csv": "Read a CSV file.", "other": ""},
    )
    assert skill_phrasings(skill, lambda text: [text]) == [
        "read-csv\nReads CSV files.",
        "Read orders.csv",
        "Load the CSV",
        "Read a CSV file.",
    ]
    # Each as the pieces the model reads whole.
    lines = skill_phrasings(skill, lambda text: text.split("\n"))
    assert lines[:3] == ["read-csv", "Reads CSV files.", "Read orders.csv"]


class Recording(EmbeddingProvider):
    """The server's embedder, recording the texts each call embeds."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.model_name, self.dimensions = inner.model_name, inner.dimensions
        self.calls: list[list[str]] = []

    @property
    def max_chunk_tokens(self) -> int:
        return self.inner.max_chunk_tokens

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def _write(owner: dict, skill: Skill | None, content: SkillContent, embedder: Recording) -> Skill:
    return skill_version_write(
        owner=owner,
        skill=skill,
        content=content,
        provenance=Provenance(author="operator", operation="edit"),
        embedders=[embedder],
    ).skill


@pytest.fixture
def owner(org: TenantFixture) -> dict:
    org.api.post("/users/create_or_get", {"user_id": "agent-user"}, format="json")
    end_user = EndUser.objects.get(user_id="agent-user", organization=org.organization)
    return {
        "organization_id": org.organization.pk,
        "client_id": org.client.pk,
        "end_user_id": end_user.pk,
    }


def test_each_served_skill_has_one_prototype_and_a_change_embeds_only_new_phrasings(
    owner: dict,
) -> None:
    embedder = Recording(write_embedders()[0])
    csv = _write(
        owner,
        None,
        SkillContent("read-csv", "Reads CSV files.", triggers=("Read orders.csv",)),
        embedder,
    )
    mail = _write(
        owner,
        None,
        SkillContent("send-mail", "Sends e-mail.", triggers=("Mail the report to Ann",)),
        embedder,
    )
    assert embedder.calls == [
        ["read-csv\nReads CSV files.", "Read orders.csv"],
        ["send-mail\nSends e-mail.", "Mail the report to Ann"],  # read-csv's were kept
    ]
    vectors = {
        row.skill_id: np.asarray(row.embedding)
        for row in SkillEmbedding.objects.filter(model=embedder.model_name)
    }
    assert sorted(vectors) == sorted([csv.pk, mail.pk])
    assert SkillEmbedding.objects.count() == 2 and SkillPhrasing.objects.count() == 4

    # A new trigger: that phrasing alone is embedded; both skills' prototypes are fit again.
    embedder.calls.clear()
    content = SkillContent.of(csv)
    csv = _write(
        owner,
        csv,
        SkillContent(content.name, content.description, triggers=("Read orders.csv", "Load a CSV")),
        embedder,
    )
    assert embedder.calls == [["Load a CSV"]]
    moved = {
        row.skill_id: np.asarray(row.embedding)
        for row in SkillEmbedding.objects.filter(model=embedder.model_name)
    }
    assert SkillEmbedding.objects.count() == 2 and SkillPhrasing.objects.count() == 5
    assert not np.allclose(moved[mail.pk], vectors[mail.pk])

    # A deprecated skill is no longer fit; a trigger dropped drops its kept phrasing.
    embedder.calls.clear()
    mail = _write(owner, mail, SkillContent("send-mail", "Sends e-mail."), embedder)
    assert SkillPhrasing.objects.filter(skill=mail).count() == 1
    Skill.objects.filter(pk=mail.pk).update(status=Skill.Status.DEPRECATED)
    _write(owner, csv, SkillContent.of(csv), embedder)
    [alone] = SkillEmbedding.objects.filter(skill=csv, model=embedder.model_name)
    assert np.allclose(np.asarray(alone.embedding), _mean_of_phrasings(csv), atol=1e-5)


def _mean_of_phrasings(skill: Skill) -> np.ndarray:
    kept = SkillPhrasing.objects.filter(skill=skill).values_list("embedding", flat=True)
    mean = np.mean([np.asarray(vector) for vector in kept], axis=0)
    return mean / np.linalg.norm(mean)


@override_settings(SKILL_PROTOTYPE_MAX_SKILLS=1)
def test_past_the_most_skills_fit_together_each_vector_is_its_phrasings_mean(
    owner: dict, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = Recording(write_embedders()[0])
    csv = _write(owner, None, SkillContent("read-csv", "Reads CSV files."), embedder)
    assert "SKILL_PROTOTYPE_MAX_SKILLS" not in caplog.text  # one skill: fit (as its mean)
    mail = _write(
        owner,
        None,
        SkillContent("send-mail", "Sends e-mail.", triggers=("Mail the report to Ann",)),
        embedder,
    )
    assert "2 served skills" in caplog.text and "SKILL_PROTOTYPE_MAX_SKILLS" in caplog.text
    for skill in (csv, mail):
        [row] = SkillEmbedding.objects.filter(skill=skill)
        assert np.allclose(np.asarray(row.embedding), _mean_of_phrasings(skill), atol=1e-5)
