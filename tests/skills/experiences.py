"""Recording experiences through the API, and embedding them as the worker does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from mirix_site.search.spaces import write_embedders
from skills.embedding_queue import experiences_embed
from skills.models import Experience
from tests.factories import TenantFixture


def record(owner: TenantFixture, user_id: str = "ada", **fields: Any) -> dict[str, Any]:
    """One experience through POST /experiences; returns it."""
    response = owner.api.post("/experiences", {"user_id": user_id, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["experience"]


def record_many(
    owner: TenantFixture, items: list[dict[str, Any]], user_id: str = "ada"
) -> list[dict[str, Any]]:
    """A batch through POST /experiences, embedded as the worker embeds it."""
    response = owner.api.post(
        "/experiences", {"user_id": user_id, "experiences": items}, format="json"
    )
    assert response.status_code == 201, response.json()
    embed_all()
    return response.json()["experiences"]


def aged(days: float) -> str:
    return (timezone.now() - timedelta(days=days)).isoformat()


def embed_all() -> None:
    """What the worker does after a record commits (tests in a transaction see no commit)."""
    experiences_embed(
        experience_ids=list(Experience.objects.values_list("pk", flat=True)),
        embedders=write_embedders(),
    )
