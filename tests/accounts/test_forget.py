"""Operators' deletions (the admin's and ``forget_user``): everything goes, in one transaction,
after a confirmation that counts it kind by kind; a dry run counts the same and changes nothing."""

from __future__ import annotations

import html
import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from accounts.models import Client, EndUser, Organization
from accounts.services import end_user_delete, removal_summary
from tests.accounts.test_tenancy import rows_of, tenant_models
from tests.factories import TenantFixture, tenant_rows_create


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


def _user_rows(user_pk: int) -> dict[str, int]:
    """Rows keyed to the end user, table by table (every model with an ``end_user`` key)."""
    counts = {}
    for model in tenant_models():
        if any(field.name == "end_user" for field in model._meta.concrete_fields):
            counts[model._meta.label] = model.objects.filter(end_user_id=user_pk).count()
    return counts


def _removed(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {label: before[label] - after[label] for label in before if before[label] > after[label]}


def _summary_shown(page: str) -> dict[str, int]:
    """The confirmation page's summary: "Episodic memories: 2" per kind."""
    summary = page[page.index("<h2>Summary</h2>") :]
    summary = summary[: summary.index("</ul>")]
    return {
        html.unescape(name): int(count)
        for name, count in re.findall(r"<li>([^<]+?): (\d+)</li>", summary)
    }


def _rows_user(org: TenantFixture) -> EndUser:
    return EndUser.objects.get(organization=org.organization, user_id="rows-user")


def test_an_operator_forgets_a_user_after_seeing_the_counts(
    operator, org: TenantFixture, other_org: TenantFixture
) -> None:
    tenant_rows_create(org)
    tenant_rows_create(other_org)
    user = _rows_user(org)
    kept = _user_rows(user.pk)
    assert kept["memory.EpisodicMemory"] and kept["conversations.Message"]
    before, theirs = rows_of(org.organization.pk), rows_of(other_org.organization.pk)

    page = operator.get(f"/admin/accounts/enduser/{user.pk}/delete/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Cannot delete" not in text and "permission" not in text
    shown = _summary_shown(text)
    assert rows_of(org.organization.pk) == before  # counting changed nothing

    response = operator.post(f"/admin/accounts/enduser/{user.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302

    after = rows_of(org.organization.pk)
    removed = _removed(before, after)
    assert shown == removal_summary(removed)
    assert set(_user_rows(user.pk).values()) == {0}
    assert not EndUser.objects.filter(pk=user.pk).exists()
    # The image only their message showed goes too; the organization's other rows stay.
    assert removed["images.ImageObject"] == 1
    assert after["accounts.Client"] == before["accounts.Client"]
    assert rows_of(other_org.organization.pk) == theirs
    assert org.api.get("/users/rows-user").status_code == 404
    assert other_org.api.get("/users/rows-user").status_code == 200
    message = operator.get("/admin/accounts/enduser/").content.decode()
    [said] = re.findall(r"Deleted rows-user: [^<]*\.", message)
    assert f" {removed['memory.EpisodicMemory']} episodic memories," in said


def test_the_delete_action_counts_every_selected_user_first(operator, org: TenantFixture) -> None:
    tenant_rows_create(org)
    org.api.post("/users/create_or_get", {"user_id": "second"}, format="json")
    users = list(EndUser.objects.filter(organization=org.organization))
    assert len(users) == 2
    selected = [user.pk for user in users]
    before = rows_of(org.organization.pk)

    page = operator.post(
        "/admin/accounts/enduser/",
        {"action": "delete_selected", "_selected_action": selected},
    )
    assert page.status_code == 200
    shown = _summary_shown(page.content.decode())
    assert shown["End users"] == 2
    assert rows_of(org.organization.pk) == before

    done = operator.post(
        "/admin/accounts/enduser/",
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
    )
    assert done.status_code == 302
    assert shown == removal_summary(_removed(before, rows_of(org.organization.pk)))
    assert not EndUser.objects.filter(organization=org.organization).exists()


def test_an_operator_deletes_a_client_and_then_the_organization(
    operator, org: TenantFixture, other_org: TenantFixture
) -> None:
    tenant_rows_create(org)
    theirs = rows_of(other_org.organization.pk)
    sibling = Client.objects.get(organization=org.organization, name=f"{org.client.name}-sibling")
    before = rows_of(org.organization.pk)

    page = operator.get(f"/admin/accounts/client/{org.client.pk}/delete/")
    shown = _summary_shown(page.content.decode())
    assert (
        operator.post(
            f"/admin/accounts/client/{org.client.pk}/delete/", {"post": "yes"}
        ).status_code
        == 302
    )
    after = rows_of(org.organization.pk)
    assert shown == removal_summary(_removed(before, after))
    assert shown["Episodic memories"] >= 1 and shown["API keys"] == 1
    assert org.api.get("/users").status_code == 401
    # The user stays: the sibling client holds them; nothing the client stored is left.
    assert EndUser.objects.filter(organization=org.organization, user_id="rows-user").exists()
    for model in tenant_models():
        if any(field.name == "client" for field in model._meta.concrete_fields):
            assert not model.objects.filter(client_id=org.client.pk).exists(), model
    assert Client.objects.filter(pk=sibling.pk).exists()

    page = operator.get(f"/admin/accounts/organization/{org.organization.pk}/delete/")
    shown = _summary_shown(page.content.decode())
    assert shown["Organizations"] == 1 and shown["Clients"] == 1
    assert (
        operator.post(
            f"/admin/accounts/organization/{org.organization.pk}/delete/", {"post": "yes"}
        ).status_code
        == 302
    )
    assert shown == removal_summary(_removed(after, rows_of(org.organization.pk)))
    assert set(rows_of(org.organization.pk).values()) == {0}
    assert not Organization.objects.filter(pk=org.organization.pk).exists()
    assert rows_of(other_org.organization.pk) == theirs


def test_a_dry_run_counts_what_the_deletion_removes_and_changes_nothing(
    org: TenantFixture,
) -> None:
    tenant_rows_create(org)
    user = _rows_user(org)
    before = rows_of(org.organization.pk)

    planned = end_user_delete(end_user=user, dry_run=True)
    assert rows_of(org.organization.pk) == before
    done = end_user_delete(end_user=user)
    assert planned == done == _removed(before, rows_of(org.organization.pk))


def test_forget_user_dry_run_then_forget(org: TenantFixture, other_org: TenantFixture) -> None:
    tenant_rows_create(org)
    tenant_rows_create(other_org)
    user = _rows_user(org)
    before, theirs = rows_of(org.organization.pk), rows_of(other_org.organization.pk)
    organization_id = org.organization.pk

    out = StringIO()
    call_command("forget_user", organization_id, "rows-user", "--dry-run", stdout=out)
    assert rows_of(organization_id) == before
    dry = out.getvalue()
    assert f"Dry run: forgetting rows-user of {organization_id} would delete" in dry
    assert "Nothing was changed." in dry

    out = StringIO()
    call_command("forget_user", organization_id, "rows-user", stdout=out)
    removed = removal_summary(_removed(before, rows_of(organization_id)))
    lines = out.getvalue().splitlines()
    assert lines[:-1] == dry.splitlines()[:-1]  # the dry run's counts, kind by kind
    listed = {
        line.rsplit(None, 1)[0].strip(): int(line.split()[-1].replace(",", ""))
        for line in lines[:-1]
    }
    assert listed == removed
    total = sum(removed.values())
    assert lines[-1] == (
        f"Forgot rows-user of {organization_id}: {total:,} rows of {len(removed)} kinds deleted."
    )
    assert set(_user_rows(user.pk).values()) == {0}
    assert rows_of(other_org.organization.pk) == theirs

    with pytest.raises(CommandError, match="No end user 'rows-user' in organization"):
        call_command("forget_user", organization_id, "rows-user")


def test_a_users_page_shows_what_every_app_holds_about_them(
    operator, org: TenantFixture, other_org: TenantFixture
) -> None:
    from accounts.admin import user_rows_url
    from memory.types import MEMORY_TYPES
    from mirix_site.search.models import RetrievalLog
    from sessions.models import Session
    from skills.models import Experience, LearningRun, Skill

    tenant_rows_create(org)
    tenant_rows_create(other_org)
    org.api.get("/memory/search", {"user_id": "rows-user", "query": "anything"})
    user, theirs = _rows_user(org), _rows_user(other_org)

    page = operator.get(f"/admin/accounts/enduser/{user.pk}/change/").content.decode()
    parts = {
        "Sessions": Session,
        "Skills": Skill,
        "Experiences": Experience,
        "Learning runs": LearningRun,
        "Recent retrievals": RetrievalLog,
    } | {
        str(memory_type.model._meta.verbose_name_plural).capitalize(): memory_type.model
        for memory_type in MEMORY_TYPES.values()
    }
    for title, model in parts.items():
        total = model.objects.filter(end_user=user).count()
        heading = f'<h2>{title} <span class="user-page-total">({total})</span></h2>'
        assert heading in page, title
        assert total, f"no {title} of the user: the test shows nothing"
        for row in model.objects.filter(end_user=user)[:10]:
            meta = row._meta
            assert f'href="/admin/{meta.app_label}/{meta.model_name}/{row.pk}/change/"' in page
        for row in model.objects.filter(end_user=theirs)[:10]:
            meta = row._meta
            assert f'href="/admin/{meta.app_label}/{meta.model_name}/{row.pk}/change/"' not in page
        listed = operator.get(user_rows_url(model, user))
        assert listed.status_code == 200, title
    assert f'href="/admin/accounts/enduser/{user.pk}/delete/"' in page  # the forget
