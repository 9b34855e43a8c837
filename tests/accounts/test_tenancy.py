from __future__ import annotations

from django.apps import apps
from django.db import models

from accounts.models import Organization
from accounts.services import organization_delete
from tests.factories import TenantFixture, tenant_rows_create

TENANT_APPS = ("accounts", "conversations", "memory", "skills", "images")
# Configuration shared by every tenant, named here so that a new model is tenant-owned unless
# someone decides otherwise.
GLOBAL_MODELS = {"memory.GateCalibration", "memory.EmbeddingSpace"}


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
