"""manage.py reembed: a second model filled beside the first, resumably, then switched to."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from accounts.services import end_user_create_or_get
from memory.models import EpisodicEmbedding, EpisodicMemory
from memory.types import MEMORY_TYPES
from mirix_site.search.engine import SearchRequest
from mirix_site.search.models import EmbeddingSpace
from mirix_site.search.services import retrieval_search
from mirix_site.search.spaces import read_embedder, write_embedders
from mirix_site.search.vector_indexes import index_exists
from mirix_site.search.vectors import shared_index_name
from tests.factories import TenantFixture, memories_create
from tests.loopback import LoopbackServer, Reply
from tests.notes.factories import notes_create
from tests.notes.models import NOTE_KIND, NoteEmbedding

pytestmark = pytest.mark.django_db(transaction=True)
NEW_MODEL = "text-embedding-3-small-8d"


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    raw = [byte / 255 - 0.5 for byte in digest[:8]]
    norm = sum(value * value for value in raw) ** 0.5
    return [value / norm for value in raw]


@pytest.fixture
def embeddings_api(loopback: LoopbackServer) -> LoopbackServer:
    def answer(request) -> Reply:
        texts = request.json["input"]
        return Reply(
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": _vector(text)}
                    for i, text in enumerate(texts)
                ],
                "model": request.json["model"],
            },
        )

    loopback.respond(answer)
    return loopback


def reembed(api: LoopbackServer, *extra: str) -> str:
    out = StringIO()
    call_command(
        "reembed",
        "--model", NEW_MODEL, "--provider", "openai", "--api-base", f"{api.url}/v1",
        "--api-key", "sk-test", "--dimensions", "8", "--batch", "2", *extra,
        stdout=out,
    )  # fmt: skip
    return out.getvalue()


def test_reembed_resumes_indexes_and_switches_reads_only_when_complete(
    org: TenantFixture, embeddings_api: LoopbackServer, settings
) -> None:
    for user in ("ana", "ben", "cy"):
        memories_create(org, user_id=user)
    episodes = EpisodicMemory.objects.count()
    assert episodes == 3

    output = reembed(embeddings_api, "--max-batches", "1")
    assert "run again to resume" in output
    assert EpisodicEmbedding.objects.filter(model=NEW_MODEL).count() == 2
    assert EmbeddingSpace.objects.get(model=NEW_MODEL).status == "building"
    # The server switched its settings too early: searches keep reading the complete model.
    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_MODEL = NEW_MODEL
    settings.EMBEDDING_API_BASE = f"{embeddings_api.url}/v1"
    settings.EMBEDDING_DIMENSIONS = 8
    assert read_embedder().model_name == "all-MiniLM-L6-v2"
    assert [e.model_name for e in write_embedders()] == [NEW_MODEL, "all-MiniLM-L6-v2"]

    output = reembed(embeddings_api)
    assert f"{NEW_MODEL} is ready." in output
    assert EpisodicEmbedding.objects.filter(model=NEW_MODEL).count() == episodes
    assert EpisodicEmbedding.objects.filter(model="all-MiniLM-L6-v2").count() == episodes
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s",
            [shared_index_name(MEMORY_TYPES["episodic"].kind, NEW_MODEL)],
        )
        assert "vector(8)" in cursor.fetchone()[0]
    assert read_embedder().model_name == NEW_MODEL
    body = org.api.get(
        "/memory/search", {"user_id": "ana", "query": "draft", "search_method": "embedding"}
    ).json()
    # The loopback model's vectors are hashes of the text: which memory ranks first is chance;
    # that the vector lane of the new model answers is not.
    assert body["results"] and all(hit["ranks"]["embedding"] for hit in body["results"])


def test_reembed_fills_every_registered_kind_and_its_index(
    org: TenantFixture, embeddings_api: LoopbackServer, settings
) -> None:
    # The test app's notes are a kind reembed has never been told of.
    sam, _ = end_user_create_or_get(tenant=org.tenant, user_id="sam", name=None)
    notes = notes_create(org, sam, [("Kayak", "the red kayak"), ("Tea", "green tea at nine")])
    tea = notes[1]
    memories_create(org, user_id="sam")

    output = reembed(embeddings_api)

    assert f"{NEW_MODEL} is ready." in output
    assert sorted(
        NoteEmbedding.objects.filter(model=NEW_MODEL).values_list("note_id", flat=True)
    ) == sorted(note.pk for note in notes)
    assert index_exists(shared_index_name(NOTE_KIND, NEW_MODEL))
    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_MODEL = NEW_MODEL
    settings.EMBEDDING_API_BASE = f"{embeddings_api.url}/v1"
    settings.EMBEDDING_DIMENSIONS = 8
    found = retrieval_search(
        tenant=org.tenant,
        end_user=sam,
        endpoint="notes/search",
        request=SearchRequest(kinds=(NOTE_KIND,), query=NOTE_KIND.text(tea), method="embedding"),
    )
    # The loopback model's vectors are hashes of the text: only the same text is nearest.
    assert found.hits[0].row.title == "Tea"


def test_reembed_fits_each_users_served_skills_in_the_new_model(
    org: TenantFixture, embeddings_api: LoopbackServer
) -> None:
    from skills.content import SkillContent
    from skills.models import Skill, SkillEmbedding, SkillPhrasing
    from skills.services.skills import Provenance, skill_version_write

    ana, _ = end_user_create_or_get(tenant=org.tenant, user_id="ana", name=None)
    owner = {"organization_id": org.organization.pk, "client_id": org.client.pk}
    written = [
        skill_version_write(
            owner={**owner, "end_user_id": ana.pk},
            skill=None,
            content=SkillContent(name, f"Does {name}.", triggers=(f"please {name}",)),
            provenance=Provenance(author="operator", operation="create"),
            embedders=write_embedders(),
        ).skill
        for name in ("read-csv", "send-mail", "resize-image")
    ]
    Skill.objects.filter(pk=written[2].pk).update(status=Skill.Status.DEPRECATED)

    reembed(embeddings_api)
    # One prototype per served skill, fit over both of their phrasings; none for the other.
    fitted = SkillEmbedding.objects.filter(model=NEW_MODEL)
    assert sorted(fitted.values_list("skill_id", flat=True)) == [written[0].pk, written[1].pk]
    assert all(len(row.embedding) == 8 for row in fitted)
    assert SkillPhrasing.objects.filter(model=NEW_MODEL).count() == 4
