"""The per-item history endpoints' answer (``GET /memory/{type}/{id}/history``,
``GET /experiences/{id}/history``): a row's changes, oldest first (mirix_site.common.history)."""

from __future__ import annotations

from typing import Any

from django.db import models
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from accounts.tenancy import Tenant
from mirix_site.api.fields import TextChoiceField, TextField
from mirix_site.common.history import (
    API,
    AUTO_DREAM,
    CURATOR,
    EXTRACTION,
    OPERATOR,
    history_of,
)

HISTORY_ENTRY_FIELDS: dict[str, serializers.Field] = {
    "at": serializers.DateTimeField(),
    "actor": TextChoiceField(
        [API, OPERATOR, CURATOR, AUTO_DREAM, EXTRACTION],
        allow_null=True,
        help_text="who changed it (null: a change outside the server's own paths)",
    ),
    "client_id": TextField(allow_null=True, help_text="the client whose key changed it"),
    "key_id": TextField(
        allow_null=True, help_text="the key that changed it (shown to that key's client only)"
    ),
    "run_id": TextField(allow_null=True, help_text="the learning run that changed it"),
    "job_id": TextField(allow_null=True, help_text="the extraction job that changed it"),
    "changes": serializers.DictField(
        child=serializers.DictField(),
        help_text="each changed field's value before and after",
    ),
}


def history_response(tenant: Tenant, row: models.Model, **about: Any) -> dict[str, Any]:
    """``{**about, "history": [...]}``: the row's changes as a client sees them (who, by actor,
    client and, for its own client's changes, key; an operator by role only)."""
    entries = []
    for entry in history_of(row):
        own = entry["client_id"] == tenant.client.pk
        entries.append(
            {
                "at": entry["at"],
                "actor": entry["actor"],
                "client_id": entry["client_id"],
                "key_id": entry["key_id"] if own else None,
                "run_id": None if entry["run_id"] is None else str(entry["run_id"]),
                "job_id": None if entry["job_id"] is None else str(entry["job_id"]),
                "changes": entry["changes"],
            }
        )
    return {**about, "history": entries}


def history_serializer(name: str, **about: serializers.Field) -> serializers.Serializer:
    """The answer's schema: ``about`` (the row's id, ...) and its history."""
    entries = inline_serializer("HistoryEntry", HISTORY_ENTRY_FIELDS, many=True)
    return inline_serializer(name, {**about, "history": entries})
