"""Reading, editing and deleting memories through the API."""

from __future__ import annotations

from django.apps import apps

from accounts.services import api_key_create, client_read_scopes_set
from memory.models import EpisodicEmbedding, EpisodicMemory, ExtractionJob, KnowledgeVaultItem
from memory.services import extraction_job_run
from tests.factories import TenantFixture, api_client_with, chat_turns, memories_create


def extract(org: TenantFixture, *texts: str, user_id: str = "sam") -> None:
    org.api.post("/memory/add", {"user_id": user_id, "messages": chat_turns(*texts)}, format="json")
    for job in ExtractionJob.objects.filter(status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)


def test_components_group_memories_by_type(
    org: TenantFixture, django_assert_max_num_queries
) -> None:
    memories_create(org, user_id="sam")
    with django_assert_max_num_queries(20):
        body = org.api.get("/memory/components", {"user_id": "sam"}).json()
    # MIRIX's shape (rest_api.py, get_memory_components): per type {total_count, items}, the
    # vault as "knowledge" (and our "knowledge_vault", the same).
    assert set(body["memories"]) == {
        "core",
        "episodic",
        "semantic",
        "procedural",
        "resource",
        "knowledge_vault",
        "knowledge",
    }
    assert body["memories"]["knowledge"] == body["memories"]["knowledge_vault"]
    assert body["counts"]["episodic"] == body["memories"]["episodic"]["total_count"] == 1
    episode = body["memories"]["episodic"]["items"][0]
    assert episode["memory_type"] == "episodic"
    assert episode["user_id"] == "sam"
    assert all(source.isdigit() for source in episode["source_message_ids"])
    vault = body["memories"]["knowledge_vault"]["items"][0]
    assert vault["secret_value"] == "********"
    revealer = api_client_with(
        api_key_create(client=org.client, name="ops", reveals_secrets=True).plaintext
    )
    revealed = revealer.get(
        "/memory/components",
        {"user_id": "sam", "memory_type": "knowledge", "include_secrets": "true"},
    ).json()
    assert set(revealed["memories"]) == {"knowledge_vault", "knowledge"}
    assert revealed["memories"]["knowledge"]["items"][0]["secret_value"] == "sam@example.com"
    assert (
        org.api.get("/memory/components", {"user_id": "sam", "memory_type": "dreams"}).status_code
        == 422
    )


def test_patch_edits_a_memory_and_its_embedding(org: TenantFixture) -> None:
    extract(org, "We hiked up the mountain", "Sounds fun")
    episode = EpisodicMemory.objects.get()
    before = list(EpisodicEmbedding.objects.get(memory=episode).embedding)
    response = org.api.patch(
        f"/memory/episodic/{episode.pk}",
        {"summary": "Quarterly tax filing was late"},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["summary"] == "Quarterly tax filing was late"
    after = list(EpisodicEmbedding.objects.get(memory=episode).embedding)
    assert after != before
    assert org.api.patch(f"/memory/episodic/{episode.pk}", {}, format="json").status_code == 422
    assert (
        org.api.patch(
            f"/memory/episodic/{episode.pk}", {"occurred_at": "soon"}, format="json"
        ).status_code
        == 422
    )
    # A field of another type (a core block's value) is refused, not silently dropped.
    mixed = {"summary": "Dropped too", "value": "not episodic"}
    refused = org.api.patch(f"/memory/episodic/{episode.pk}", mixed, format="json")
    assert refused.status_code == 422
    assert list(refused.json()["fields"]) == ["value"]
    episode.refresh_from_db()
    assert episode.summary == "Quarterly tax filing was late"


def test_get_reads_one_memory_as_the_lists_show_it(org: TenantFixture) -> None:
    memories_create(org, user_id="sam")
    listed = org.api.get("/memory/components", {"user_id": "sam"}).json()["memories"]
    for name in ("episodic", "semantic", "resource", "knowledge_vault", "core"):
        item = listed[name]["items"][0]
        response = org.api.get(f"/memory/{name}/{item['id']}")
        assert response.status_code == 200, (name, response.json())
        assert response.json() == item
    # MIRIX's name for the vault reads it too; a procedure is read within its user.
    vault = listed["knowledge_vault"]["items"][0]
    assert org.api.get(f"/memory/knowledge/{vault['id']}").json()["secret_value"] == "********"
    procedure = listed["procedural"]["items"][0]
    assert org.api.get(f"/memory/procedural/{procedure['id']}").status_code == 422
    assert org.api.get(f"/memory/procedural/{procedure['id']}?user_id=sam").json() == procedure
    # Secrets shown only to a key that may, as the lists do.
    assert (
        org.api.get(f"/memory/knowledge_vault/{vault['id']}?include_secrets=true").status_code
        == 403
    )
    revealer = api_client_with(
        api_key_create(client=org.client, name="ops", reveals_secrets=True).plaintext
    )
    shown = revealer.get(f"/memory/knowledge_vault/{vault['id']}", {"include_secrets": "true"})
    assert shown.json()["secret_value"] == "sam@example.com"
    missing = org.api.get("/memory/episodic/999999")
    assert missing.status_code == 404
    assert org.api.get("/memory/dreams/1").json() == missing.json()


def test_patch_a_vault_secret_is_stored_encrypted(org: TenantFixture) -> None:
    extract(org, "my email is sam@example.com", "ok")
    item = KnowledgeVaultItem.objects.get()
    org.api.patch(
        f"/memory/knowledge_vault/{item.pk}", {"secret_value": "new@example.com"}, format="json"
    )
    item.refresh_from_db()
    assert "new@example.com" not in item.secret_value_encrypted


def test_delete_a_memory(org: TenantFixture) -> None:
    extract(org, "We hiked up the mountain", "Sounds fun")
    episode = EpisodicMemory.objects.get()
    assert org.api.delete(f"/memory/episodic/{episode.pk}").status_code == 200
    assert not EpisodicMemory.objects.exists()
    assert not EpisodicEmbedding.objects.exists()
    assert org.api.delete(f"/memory/episodic/{episode.pk}").status_code == 404
    assert org.api.delete("/memory/dreams/1").status_code == 404


def test_procedural_delete_is_scoped_to_the_user(org: TenantFixture) -> None:
    memories_create(org, user_id="sam")
    procedure = apps.get_model("memory", "ProceduralMemory").objects.get()
    assert org.api.delete(f"/memory/procedural/{procedure.pk}").status_code == 422
    org.api.post("/users/create_or_get", {"user_id": "alex"}, format="json")
    assert org.api.delete(f"/memory/procedural/{procedure.pk}?user_id=alex").status_code == 404
    assert org.api.delete(f"/memory/procedural/{procedure.pk}?user_id=sam").status_code == 200


def test_a_sibling_clients_memory_is_readable_in_scope_but_not_writable(org: TenantFixture) -> None:
    sibling = org.another_client("sibling")
    extract(sibling, "We hiked up the mountain", "Sounds fun")
    episode = EpisodicMemory.objects.get()
    assert org.api.get("/memory/components", {"user_id": "sam"}).json()["counts"]["episodic"] == 0
    assert org.api.delete(f"/memory/episodic/{episode.pk}").status_code == 404
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    assert org.api.get("/memory/components", {"user_id": "sam"}).json()["counts"]["episodic"] == 1
    # Read-only in every sense: a write answers as for a missing memory.
    missing = org.api.delete("/memory/episodic/999999")
    for response in (
        org.api.delete(f"/memory/episodic/{episode.pk}"),
        org.api.patch(f"/memory/episodic/{episode.pk}", {"summary": "x"}, format="json"),
    ):
        assert (response.status_code, response.json()) == (404, missing.json())
    assert EpisodicMemory.objects.filter(summary__startswith="user: We hiked").exists()


def test_clear_removes_only_this_clients_memories(org: TenantFixture) -> None:
    sibling = org.another_client("sibling")
    memories_create(org, user_id="sam")
    memories_create(sibling, user_id="sam")
    response = org.api.post("/memory/clear", {"user_id": "sam"}, format="json")
    assert response.status_code == 200
    assert response.json()["deleted"]["episodic"] == 1
    assert not EpisodicMemory.objects.filter(client=org.client).exists()
    assert EpisodicMemory.objects.filter(client=sibling.client).count() == 1
    assert org.api.delete("/users/sam/memories").json()["deleted"]["episodic"] == 0
    assert org.api.post("/memory/clear", {}, format="json").status_code == 422


def _rows_of_user(user_pk: int) -> dict[str, int]:
    counts = {}
    for label in ("accounts", "conversations", "memory", "skills", "images"):
        for model in apps.get_app_config(label).get_models():
            if any(field.name == "end_user" for field in model._meta.get_fields()):
                counts[model._meta.label] = model.objects.filter(end_user_id=user_pk).count()
    return counts


def test_deleting_a_user_removes_everything_they_own(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    memories_create(org, user_id="sam")
    memories_create(other_org, user_id="sam")
    org.api.post(
        "/memory/add",
        {
            "user_id": "sam",
            "session_id": "t",
            "session_tag": "task",
            "messages": chat_turns("run it", "done"),
        },
        format="json",
    )
    sam = org.api.get("/users/sam").json()
    from accounts.models import EndUser

    user_pk = EndUser.objects.get(organization=org.organization, user_id="sam").pk
    before = _rows_of_user(user_pk)
    assert all(
        before[label] > 0
        for label in (
            "conversations.Session",
            "conversations.Message",
            "memory.EpisodicMemory",
            "memory.EpisodicEmbedding",
            "memory.KnowledgeVaultItem",
            "memory.CoreMemoryBlock",
            "memory.ExtractionJob",
        )
    ), before
    others_before = _rows_of_user(EndUser.objects.get(organization=other_org.organization).pk)

    response = org.api.delete("/users/sam")
    assert response.status_code == 200
    assert sam["id"] == "sam"
    assert set(_rows_of_user(user_pk).values()) == {0}
    assert (
        _rows_of_user(EndUser.objects.get(organization=other_org.organization).pk) == others_before
    )


def test_a_superseded_memory_answers_like_a_missing_one_unless_asked_for(
    org: TenantFixture,
) -> None:
    extract(org, "The kayak is in the garage", "ok")
    extract(org, "The kayak is in the shed now", "noted")
    old, new = EpisodicMemory.objects.order_by("id")
    EpisodicMemory.objects.filter(pk=old.pk).update(superseded_by=new)
    missing = org.api.patch("/memory/episodic/999999", {"summary": "x"}, format="json")
    assert missing.status_code == 404

    for response in (
        org.api.patch(f"/memory/episodic/{old.pk}", {"summary": "x"}, format="json"),
        org.api.delete(f"/memory/episodic/{old.pk}"),
    ):
        assert (response.status_code, response.json()) == (404, missing.json())
    components = org.api.get("/memory/components", {"user_id": "sam"}).json()
    assert [m["id"] for m in components["memories"]["episodic"]["items"]] == [str(new.pk)]
    found = org.api.get("/memory/search", {"user_id": "sam", "query": "kayak"}).json()
    assert [m["id"] for m in found["results"]] == [str(new.pk)]

    everything = org.api.get(
        "/memory/components", {"user_id": "sam", "include_superseded": "true"}
    ).json()
    assert {m["id"] for m in everything["memories"]["episodic"]["items"]} == {
        str(old.pk),
        str(new.pk),
    }
    edited = org.api.patch(
        f"/memory/episodic/{old.pk}?include_superseded=true", {"summary": "old"}, format="json"
    )
    assert edited.status_code == 200
    assert edited.json()["summary"] == "old"
    deleted = org.api.delete(f"/memory/episodic/{old.pk}?include_superseded=true")
    assert deleted.status_code == 200
    assert not EpisodicMemory.objects.filter(pk=old.pk).exists()
