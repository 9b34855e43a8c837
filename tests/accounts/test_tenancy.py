from __future__ import annotations

from django.apps import apps
from django.db import models

from accounts.models import Organization
from accounts.services import organization_delete
from tests.factories import TenantFixture, tenant_rows_create

TENANT_APPS = ("accounts", "search", "conversations", "memory", "skills", "images")
# Configuration shared by every tenant, named here so that a new model is tenant-owned unless
# someone decides otherwise.
GLOBAL_MODELS = {
    "search.GateCalibration",
    "search.EmbeddingSpace",
    "search.SearchableKindCode",
    "skills.ActionGroupingCalibration",
}


def tenant_models() -> list[type[models.Model]]:
    return [
        model
        for label in TENANT_APPS
        for model in apps.get_app_config(label).get_models()
        if model._meta.label not in GLOBAL_MODELS
    ]


def rows_of(organization_id: str) -> dict[str, int]:
    counts = {}
    for model in tenant_models():
        if model is Organization:
            counts[model._meta.label] = model.objects.filter(pk=organization_id).count()
        else:
            counts[model._meta.label] = model.objects.filter(
                organization_id=organization_id
            ).count()
    return counts


def test_every_tenant_model_carries_its_organization() -> None:
    for model in tenant_models():
        if model is Organization:
            continue
        field = model._meta.get_field("organization")
        assert field.related_model is Organization, model


def test_deleting_an_organization_removes_everything_it_owns(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    tenant_rows_create(org)
    tenant_rows_create(other_org)
    mine = rows_of(org.organization.pk)
    theirs = rows_of(other_org.organization.pk)
    empty = [label for label, count in mine.items() if count == 0]
    assert not empty, f"tenant_rows_create makes no row in {empty}: extend it"

    organization_delete(organization=org.organization)

    assert set(rows_of(org.organization.pk).values()) == {0}
    assert rows_of(other_org.organization.pk) == theirs
    assert other_org.api.get("/users/rows-user").status_code == 200
    assert org.api.get("/users").status_code == 401


def test_a_scope_reads_the_same_rows_through_the_orm_and_in_sql(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    from datetime import UTC, datetime

    from django.db import connection

    from accounts.services import client_read_scopes_set, end_user_create_or_get
    from accounts.tenancy import Scope
    from tests.notes.models import Note

    sibling = org.another_client("scope-sibling")
    stranger = org.another_client("scope-stranger")
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    users = {}
    for owner in (org, sibling, stranger, other_org):
        for user_id in ("sam", "ana"):
            user, _ = end_user_create_or_get(tenant=owner.tenant, user_id=user_id, name=None)
            users[(owner.organization.pk, user_id)] = user
            Note.objects.create(
                organization=owner.organization,
                client=owner.client,
                end_user=user,
                title=f"{owner.client.name} {user_id}",
                written_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
    sam = users[(org.organization.pk, "sam")]

    def through_sql(scope: Scope) -> set[str]:
        where, params = scope.where("n.")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT n.title FROM {Note._meta.db_table} n WHERE {where}", params)  # noqa: S608
            return {title for (title,) in cursor.fetchall()}

    expected = {
        Scope.readable_by(org.tenant): {
            "alice-app sam",
            "alice-app ana",
            "scope-sibling sam",
            "scope-sibling ana",
        },
        Scope.readable_by(org.tenant, end_user=sam): {"alice-app sam", "scope-sibling sam"},
        Scope.owned_by(org.tenant): {"alice-app sam", "alice-app ana"},
        Scope.owned_by(org.tenant, end_user=sam): {"alice-app sam"},
    }
    for scope, titles in expected.items():
        assert set(Note.objects.in_scope(scope).values_list("title", flat=True)) == titles
        assert through_sql(scope) == titles
    assert (
        set(Note.objects.readable_by(org.tenant).values_list("title", flat=True))
        == (expected[Scope.readable_by(org.tenant)])
    )
