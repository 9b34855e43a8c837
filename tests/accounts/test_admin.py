from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from accounts.models import ApiKey
from memory.models import EpisodicEmbedding, EpisodicMemory, ExtractionJob
from mirix_site.search.models import RetrievalLog
from sessions.models import Message
from tests.factories import TenantFixture, api_client_with, tenant_rows_create


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def test_admin_creates_a_key_and_shows_it_once(operator, org: TenantFixture) -> None:
    response = operator.post(
        "/admin/accounts/apikey/add/",
        {"client": org.client.pk, "name": "from admin", "read_only": ""},
        follow=True,
    )
    assert response.status_code == 200
    page = response.content.decode()
    match = re.search(r"mxk_[0-9a-f]{16}_[A-Za-z0-9]{40}", page)
    assert match, "the new key's plaintext is shown after saving"
    key = match.group(0)
    assert api_client_with(key).get("/users").status_code == 200
    api_key = ApiKey.objects.get(name="from admin")
    assert api_key.organization == org.organization

    detail = operator.get(f"/admin/accounts/apikey/{api_key.pk}/change/").content.decode()
    assert key not in detail
    assert api_key.secret_digest not in detail
    assert key not in operator.get("/admin/accounts/apikey/").content.decode()


def test_a_read_scope_of_another_organization_is_a_form_error(
    operator, org: TenantFixture, other_org: TenantFixture
) -> None:
    sibling = org.another_client("sibling")
    page = f"/admin/accounts/client/{org.client.pk}/change/"
    response = operator.post(
        page,
        {"name": org.client.name, "read_scopes": [sibling.client.pk, other_org.client.pk]},
    )
    assert response.status_code == 200  # the form again, not a 500
    assert "Clients of another organization cannot be read" in response.content.decode()
    assert list(org.client.read_scopes.all()) == []
    # A client stays in its organization; its own organization's clients are fine.
    moved = operator.post(
        page,
        {
            "name": org.client.name,
            "organization": other_org.organization.pk,
            "read_scopes": [sibling.client.pk],
        },
    )
    assert moved.status_code == 302
    org.client.refresh_from_db()
    assert org.client.organization == org.organization
    assert list(org.client.read_scopes.all()) == [sibling.client]


def test_admin_revoke_action(operator, org: TenantFixture) -> None:
    response = operator.post(
        "/admin/accounts/apikey/",
        {"action": "revoke_selected", "_selected_action": [org.api_key.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert "Revoked 1 API key" in response.content.decode()
    assert org.api.get("/users").status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/admin/accounts/organization/",
        "/admin/accounts/client/",
        "/admin/accounts/apikey/",
        "/admin/accounts/enduser/",
        "/admin/memory/metaagent/",
        "/admin/accounts/apikey/add/",
        "/admin/conversations/session/",
        "/admin/conversations/message/",
        "/admin/memory/extractionjob/",
        "/admin/memory/corememoryblock/",
        "/admin/memory/episodicmemory/",
        "/admin/memory/semanticmemory/",
        "/admin/memory/proceduralmemory/",
        "/admin/memory/resourcememory/",
        "/admin/memory/knowledgevaultitem/",
        "/admin/search/retrievallog/",
        "/admin/search/retrievallog/?latency=fast",
        "/admin/search/gatecalibration/",
        "/admin/search/embeddingspace/",
        "/admin/skills/experience/",
        "/admin/skills/recommendation/",
        "/admin/skills/actionphrase/",
        "/admin/skills/actiongroupingcalibration/",
        "/admin/skills/experiencesettings/",
        "/admin/skills/learningrun/",
        "/admin/skills/skill/",
        "/admin/skills/skillversion/",
        "/admin/images/imageobject/",
        "/admin/images/imagefetch/",
        "/admin/images/imagefetch/?status=failed",
        "/admin/accounts/userimport/",
        "/admin/skills/skillproposal/",
        "/admin/",
    ],
)
def test_admin_pages_render(operator, org: TenantFixture, path: str) -> None:
    tenant_rows_create(org)
    page = operator.get(path)
    assert page.status_code == 200
    detail_links = re.findall(r'href="(/admin/[a-z]+/[a-z]+/\d+/change/)"', page.content.decode())
    for link in detail_links[:2]:
        assert operator.get(link).status_code == 200, link


def test_operators_correct_a_memory_and_its_embedding_follows(operator, org: TenantFixture) -> None:
    tenant_rows_create(org)
    episode = EpisodicMemory.objects.get(client=org.client)
    before = list(EpisodicEmbedding.objects.get(memory=episode).embedding)
    page = operator.get(f"/admin/memory/episodicmemory/{episode.pk}/change/")
    form = {
        "event_type": episode.event_type,
        "summary": "Corrected: the meeting moved to Tuesday",
        "details": episode.details,
        "actor": episode.actor,
        "occurred_at_0": episode.occurred_at.strftime("%Y-%m-%d"),
        "occurred_at_1": episode.occurred_at.strftime("%H:%M:%S"),
        "superseded_by": "",
        "fingerprint": episode.fingerprint,
    }
    assert page.status_code == 200
    response = operator.post(
        f"/admin/memory/episodicmemory/{episode.pk}/change/", form, follow=True
    )
    assert response.status_code == 200
    episode.refresh_from_db()
    assert episode.summary == "Corrected: the meeting moved to Tuesday"
    assert list(EpisodicEmbedding.objects.get(memory=episode).embedding) != before


def test_an_admin_save_that_changes_nothing_writes_nothing(operator, org: TenantFixture) -> None:
    from django.contrib.admin.models import LogEntry

    tenant_rows_create(org)
    episode = EpisodicMemory.objects.get(client=org.client)
    # Text as the API stores it: LF line breaks, a trailing one.
    EpisodicMemory.objects.filter(pk=episode.pk).update(
        details="Line one\nline two\n", occurred_at=episode.occurred_at.replace(microsecond=123456)
    )
    episode.refresh_from_db()
    vector = list(EpisodicEmbedding.objects.get(memory=episode).embedding)
    url = f"/admin/memory/episodicmemory/{episode.pk}/change/"
    form = {
        "event_type": episode.event_type,
        "summary": episode.summary,
        "details": episode.details.replace("\n", "\r\n"),  # as a browser sends a textarea
        "actor": episode.actor,
        "occurred_at_0": episode.occurred_at.strftime("%Y-%m-%d"),
        "occurred_at_1": episode.occurred_at.strftime("%H:%M:%S"),  # as the page shows it
        "superseded_by": "",
        "fingerprint": episode.fingerprint,
    }
    assert episode.occurred_at.microsecond  # which the page does not show
    response = operator.post(url, form, follow=True)
    assert response.status_code == 200
    assert "Nothing changed." in response.content.decode()
    unchanged = EpisodicMemory.objects.get(pk=episode.pk)
    assert (unchanged.details, unchanged.occurred_at, unchanged.updated_at) == (
        episode.details,
        episode.occurred_at,
        episode.updated_at,
    )
    assert list(EpisodicEmbedding.objects.get(memory=episode).embedding) == vector
    assert not LogEntry.objects.filter(object_id=str(episode.pk)).exists()

    # A real edit of the same form writes, with the line breaks as stored.
    operator.post(url, form | {"details": "Line one\r\nline three\r\n"}, follow=True)
    edited = EpisodicMemory.objects.get(pk=episode.pk)
    assert edited.details == "Line one\nline three\n"
    assert edited.occurred_at == episode.occurred_at
    assert edited.updated_at > episode.updated_at
    [entry] = LogEntry.objects.filter(object_id=str(episode.pk))
    assert "Details" in entry.get_change_message()


def test_audit_tables_refuse_changes(operator, org: TenantFixture) -> None:
    tenant_rows_create(org)
    job = ExtractionJob.objects.filter(client=org.client).first()
    assert operator.get("/admin/memory/extractionjob/add/").status_code == 403
    assert (
        operator.post(f"/admin/memory/extractionjob/{job.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    log = RetrievalLog.objects.filter(client=org.client).first()
    assert (
        operator.post(f"/admin/search/retrievallog/{log.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert operator.get("/admin/search/retrievallog/add/").status_code == 403
    message = Message.objects.filter(client=org.client).first()
    assert (
        operator.post(
            f"/admin/conversations/message/{message.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert ExtractionJob.objects.filter(pk=job.pk).exists()
    assert RetrievalLog.objects.filter(pk=log.pk).exists()
    assert Message.objects.filter(pk=message.pk).exists()


def test_the_image_admin_shows_thumbnails_references_and_fetch_failures(
    operator, org: TenantFixture
) -> None:
    from images.models import ImageFetch, ImageObject
    from images.services import image_fetch_run

    tenant_rows_create(org)
    image = ImageObject.objects.get(organization=org.organization)
    page = operator.get("/admin/images/imageobject/").content.decode()
    [thumbnail] = re.findall(r'<img src="(/admin/images/imageobject/\d+/thumbnail)"', page)
    response = operator.get(thumbnail)
    assert response.status_code == 200 and response["Content-Type"] == "image/jpeg"
    assert response.content.startswith(b"\xff\xd8")  # an opaque image's thumbnail: a JPEG
    detail = operator.get(f"/admin/images/imageobject/{image.pk}/change/").content.decode()
    message = Message.objects.get(images__image=image)
    assert f"/admin/conversations/message/{message.pk}/change/" in detail  # what shows it

    fetch = ImageFetch.objects.filter(client=org.client, status="pending").first()
    image_fetch_run(fetch_id=fetch.pk)  # images.test resolves to nothing: a recorded failure
    failures = operator.get("/admin/images/imagefetch/?status=failed").content.decode()
    fetch.refresh_from_db()
    assert fetch.status == "failed" and fetch.reason in failures
