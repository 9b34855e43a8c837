"""Test data built through the real services, so tests exercise the same code paths as users."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework.test import APIClient

from accounts.models import ApiKey, Client, Organization
from accounts.services import api_key_create, client_create, organization_create
from accounts.tenancy import Tenant


@dataclass
class TenantFixture:
    """An organization with one client and one read-write key, and an API client using it."""

    organization: Organization
    client: Client
    api_key: ApiKey
    key: str
    api: APIClient

    @property
    def tenant(self) -> Tenant:
        return Tenant(organization=self.organization, client=self.client, api_key=self.api_key)

    def new_key(self, *, read_only: bool = False) -> tuple[ApiKey, str]:
        issued = api_key_create(client=self.client, read_only=read_only)
        return issued.api_key, issued.plaintext

    def another_client(self, name: str) -> TenantFixture:
        client = client_create(organization=self.organization, name=name)
        return tenant_fixture_for(client)


def api_client_with(key: str | None) -> APIClient:
    api = APIClient()
    if key is not None:
        api.credentials(HTTP_X_API_KEY=key)
    return api


def tenant_fixture_for(client: Client) -> TenantFixture:
    issued = api_key_create(client=client, name="test")
    return TenantFixture(
        organization=client.organization,
        client=client,
        api_key=issued.api_key,
        key=issued.plaintext,
        api=api_client_with(issued.plaintext),
    )


def tenant_fixture(name: str) -> TenantFixture:
    organization = organization_create(name=name)
    return tenant_fixture_for(client_create(organization=organization, name=f"{name}-app"))


def tenant_rows_create(owner: TenantFixture) -> None:
    """At least one row in every tenant-owned table, for tests that must see them all go.
    Extend it with every new tenant-owned model: the organization-deletion test checks that."""
    from accounts.services import client_read_scopes_set, end_user_create_or_get
    from memory.agent_config import meta_agent_settings_from_provider
    from memory.services import meta_agent_initialize
    from memory.services.agents import agent_system_prompt_set

    sibling = owner.another_client(f"{owner.client.name}-sibling")
    client_read_scopes_set(client=owner.client, scopes=[sibling.client])
    end_user_create_or_get(tenant=owner.tenant, user_id="rows-user", name=None)
    # The sibling names the user too: it holds them (EndUserClient).
    end_user_create_or_get(tenant=sibling.tenant, user_id="rows-user", name=None)
    meta_agent, _ = meta_agent_initialize(
        tenant=owner.tenant,
        agent_settings=meta_agent_settings_from_provider(
            provider="openai", api_key="k", model=None
        ),
        update=True,
    )
    agent_system_prompt_set(meta_agent=meta_agent, component=None, system_prompt="Remember.")
    memories_create(owner, user_id="rows-user")
    experiences_create(owner, user_id="rows-user", recommended=True)
    _rows_changed(owner)
    from images.services import image_fetch_request

    owner.api.post(
        "/memory/add",
        {
            "user_id": "rows-user",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": data_url(png_bytes())}}],
                }
            ],
        },
        format="json",
    )
    image_fetch_request(
        organization=owner.organization, client=owner.client, url="https://images.test/b.png"
    )
    learning_run_create(owner, user_id="rows-user")
    # A dream run of the user (its core blocks have no repeated line: it changes nothing).
    owner.api.post("/memory/auto_dream?user_id=rows-user", {"mode": "core"}, format="json")
    # A bulk import of one turn (its row records the import).
    owner.api.post(
        "/memory/import?import_id=rows-import",
        {
            "lines": [
                {
                    "user_id": "rows-user",
                    "role": "user",
                    "content": "imported",
                    "client_message_id": "rows-1",
                }
            ]
        },
        format="json",
    )
    from mirix_site.search.spaces import write_embedders
    from sessions.models import Session
    from skills.services.skills import skill_uses_record, skills_embed

    skill = skill_create(owner, user_id="rows-user")
    skills_embed(skill_ids=[skill.pk], embedders=write_embedders())
    from dataclasses import replace

    from skills.content import SkillContent
    from skills.services.skills import Provenance, skill_proposal_write

    skill_proposal_write(
        skill=skill,
        content=replace(SkillContent.of(skill), description="A curator's proposed change."),
        provenance=Provenance(
            author="curator", operation="edit", operation_key=f"rows-{owner.organization.pk}"
        ),
    )
    session = Session.objects.filter(client=owner.client, end_user=skill.end_user).first()
    skill_uses_record(skills=[skill], session_id=session.pk)
    # A change of its status (as its uses would promote it): its status history holds a row.
    skill.status = "active"
    skill.save(update_fields=["status"])
    # Two phrasings of actions, grouped, then merged by an operator: the phrasings' history
    # holds a row.
    from skills.models import ActionPhrase, Experience
    from skills.services.grouping import action_groups_merge, action_phrases_assign

    action_phrases_assign(
        experiences=list(Experience.objects.filter(organization=owner.organization)),
        embedder=write_embedders()[0],
    )
    first = ActionPhrase.objects.filter(organization=owner.organization).order_by("pk").first()
    other = ActionPhrase.objects.create(
        organization=first.organization,
        client=first.client,
        end_user=first.end_user,
        key="memo result",
        text="memoize the result",
        group_key="memo result",
    )
    action_groups_merge(into=first, phrases=[other])
    from accounts.selectors import end_user_export
    from accounts.services import end_user_import

    # An import's record: the sibling's rows about the user (none), imported for the owner.
    end_user_import(
        tenant=owner.tenant,
        user_id="rows-user",
        lines=end_user_export(
            organization=owner.organization,
            end_user=skill.end_user,
            client_ids=[sibling.client.pk],
        ),
    )
    # Posting segments of the user's episodic memories, as beat builds them for a large owner,
    # and an edit since (listed by the index writer).
    from memory.types import MEMORY_TYPES
    from mirix_site.search.models import SegmentChange
    from mirix_site.search.segments import segments_build

    episodic = MEMORY_TYPES["episodic"]
    segments_build(episodic.kind, owner.organization.pk, owner.client.pk, skill.end_user.pk)
    row = episodic.model.objects.filter(client=owner.client, end_user=skill.end_user).first()
    owner.api.patch(
        f"/memory/episodic/{row.pk}",
        {episodic.editable_fields[0]: "edited after the segments were built"},
        format="json",
    )
    assert SegmentChange.objects.filter(client=owner.client).exists()
    # The user recorded as a shared graph's holder, as the vector index sync records one holding
    # most of a kind's vectors (one holder a kind and model: the first kind still free).
    from mirix_site.search.kinds import kinds
    from mirix_site.search.models import SharedGraphHolder

    model = write_embedders()[0].model_name
    held = set(SharedGraphHolder.objects.filter(model=model).values_list("kind", flat=True))
    free = next(kind for kind in kinds() if kind.code not in held)
    SharedGraphHolder.objects.create(
        organization=owner.organization,
        end_user=skill.end_user,
        kind=free.code,
        model=model,
        share=1.0,
    )


def _rows_changed(owner: TenantFixture) -> None:
    """A change of one row of each tracked model: their history tables hold a row."""
    from memory.types import MEMORY_TYPES
    from skills.models import Experience

    for memory_type in MEMORY_TYPES.values():
        row = memory_type.model.objects.filter(client=owner.client).first()
        name = memory_type.editable_fields[0]
        setattr(row, name, f"{getattr(row, name)} (edited)")
        row.save(update_fields=[name])
    experience = Experience.objects.filter(client=owner.client).first()
    experience.title = f"{experience.title} (edited)"
    experience.save(update_fields=["title"])


def learning_run_create(owner: TenantFixture, *, user_id: str) -> Any:
    """Five task sessions of the user, closed: the learning run they queue (the trigger is
    called here too, since a test's transaction never commits)."""
    from sessions.models import Session
    from skills.services.learning import learning_run_trigger

    for index in range(5):
        session_id = f"task-{user_id}-{index}"
        owner.api.post(
            "/memory/add",
            {
                "user_id": user_id,
                "session_id": session_id,
                "session_tag": "task",
                "messages": chat_turns("make the build pass", "fixed the import"),
            },
            format="json",
        )
        owner.api.post(f"/sessions/{session_id}/close", {"user_id": user_id}, format="json")
    last = Session.objects.get(client=owner.client, session_id=f"task-{user_id}-4")
    return learning_run_trigger(session=last)


def skill_create(owner: TenantFixture, *, user_id: str, name: str = "read-csv-files") -> Any:
    """A skill of the user, as an operator's import writes it (its first version)."""
    from accounts.services import end_user_create_or_get
    from skills.content import SkillContent
    from skills.models import SkillVersion
    from skills.services.skills import Provenance, skill_version_write

    end_user, _ = end_user_create_or_get(tenant=owner.tenant, user_id=user_id, name=None)
    written = skill_version_write(
        owner={
            "organization_id": owner.organization.pk,
            "client_id": owner.client.pk,
            "end_user_id": end_user.pk,
        },
        skill=None,
        content=SkillContent(
            name=name,
            description="Read CSV files whatever their encoding.",
            triggers=("load a csv file",),
            instructions="# Reading CSV\n\n1. Try utf-8, then latin-1.\n",
        ),
        provenance=Provenance(author=SkillVersion.Author.IMPORT, operation="create"),
        embedders=[],
    )
    return written.skill


def chat_turns(*texts: str) -> list[dict[str, object]]:
    """Alternating user/assistant turns in the MIRIX message shape."""
    roles = ("user", "assistant")
    return [
        {"role": roles[index % 2], "content": [{"type": "text", "text": text}]}
        for index, text in enumerate(texts)
    ]


def memories_create(owner: TenantFixture, *, user_id: str) -> None:
    """Turns through the real add and extraction path (episodic, resource, vault memories and
    their embeddings), plus one proposal of each kind the deterministic extractor cannot make."""
    from accounts.selectors import end_user_get
    from memory.extractors import Proposal
    from memory.models import ExtractionJob
    from memory.services import extraction_job_run, memories_store, memory_add
    from memory.services.records import Owner
    from mirix_site.providers.embeddings import embedding_provider_from_settings
    from sessions.content import message_normalize

    texts = chat_turns(
        "My email is sam@example.com, the draft is at https://example.com/draft and notes.pdf",
        "Noted, I will read the draft.",
    )
    memory_add(
        tenant=owner.tenant,
        user_id=user_id,
        messages=[message_normalize(raw, roles=("user", "assistant"), where="m") for raw in texts],
        session_id=None,
        session_tag=None,
        filter_tags={},
        occurred_at=None,
        meta_agent_id=None,
    )
    for job in ExtractionJob.objects.filter(client=owner.client, status="queued"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    end_user = end_user_get(tenant=owner.tenant, user_id=user_id)
    memories_store(
        owner=Owner(owner.organization.pk, owner.client.pk, end_user.pk),
        proposals=[
            Proposal("core", {"label": "human", "value": "Sam likes tea.", "mode": "append"}, []),
            Proposal("semantic", {"name": "Tea", "summary": "Sam likes tea."}, []),
            Proposal("procedural", {"summary": "Brew tea", "steps": ["boil", "steep"]}, []),
        ],
        embedders=[embedding_provider_from_settings()],
        enabled_types={"core", "semantic", "procedural"},
    )
    # A retrieval, so that the retrieval log has a row too.
    owner.api.get("/memory/search", {"user_id": user_id, "query": "draft"})


def experiences_create(owner: TenantFixture, *, user_id: str, recommended: bool = False) -> Any:
    """Two experiences of one action through the real record path, embedded and grouped as the
    worker does it; with ``recommended``, a recommendation made from them too. Returns one."""
    from accounts.selectors import end_user_get
    from mirix_site.search.spaces import write_embedders
    from skills.embedding_queue import experiences_embed
    from skills.services.experiences import (
        ExperienceInput,
        experience_settings_set,
        experiences_record,
    )
    from skills.services.retrieval import experience_recommend

    recorded = experiences_record(
        tenant=owner.tenant,
        user_id=user_id,
        items=[
            ExperienceInput(task="fix the slow login", action="add a cache", outcome=outcome)
            for outcome in ("success", "failure")
        ],
    )
    experiences_embed(
        experience_ids=[row.pk for row in recorded.experiences], embedders=write_embedders()
    )
    if recommended:
        experience_settings_set(tenant=owner.tenant, half_life_days=30.0)
        experience_recommend(
            tenant=owner.tenant,
            end_user=end_user_get(tenant=owner.tenant, user_id=user_id),
            task="the login is slow",
        )
    return recorded.experiences[0]


def png_bytes(
    *, color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (8, 6)
) -> bytes:
    """A small PNG of one colour: distinct colours make distinct images."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    import base64

    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_create(owner: TenantFixture, *, data: bytes | None = None) -> Any:
    """An image of the owner's organization, stored as an upload stores it."""
    from images.services import image_store_bytes

    return image_store_bytes(
        organization=owner.organization, client=owner.client, data=data or png_bytes()
    )
