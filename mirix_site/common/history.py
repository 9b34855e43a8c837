"""Per-item history: every change of a tracked row, whoever makes it, with its values before and
after and who made it (django-pghistory).

A PostgreSQL trigger on each tracked table writes an event row for every UPDATE that changes a
tracked field, holding the row as it was *before* the change (``pghistory.Old``) and the
context of the change; no write path can skip it (the API, the admin, a learning run, a raw
``UPDATE``), and a save that changes nothing writes no event. Inserts write nothing (a row's
first values are the row's own, with its provenance), so the hot paths that create rows pay
nothing. A row's history is its events in order: event *i* says what the row was before change
*i*, and what it became is event *i + 1*'s "before" or, for the last change, the row itself.

Events go with their row (``on_delete=CASCADE``): deleting a memory, or forgetting a person,
leaves none of their values behind. The context is stored in each event (a JSON column), not
in a shared table that would outlive the rows: who changed it (``actor``: ``api``,
``operator``, ``curator``, ``extraction``, ``auto_dream``) and what identifies them (the API
key's id and its client, the operator's username, the learning run or extraction job).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime
from typing import Any, TypeVar

import pghistory
from django.apps import apps
from django.db import models
from django.http import HttpRequest
from pghistory.middleware import HistoryMiddleware as TrackingMiddleware
from pghistory.models import Event

# Who changes things: the context's "actor".
API, OPERATOR, CURATOR, EXTRACTION, AUTO_DREAM = (
    "api",
    "operator",
    "curator",
    "extraction",
    "auto_dream",
)
# The context's keys that say who, besides the actor.
CONTEXT_KEYS = ("actor", "key_id", "client_id", "operator", "run_id", "job_id")
# A tracked row's owner, copied into its events so that they count (and go) with the tenant.
OWNER_FIELDS = ("organization", "client", "end_user")

Model = TypeVar("Model", bound=type[models.Model])


def history_tracked(*fields: str) -> Callable[[Model], Model]:
    """Track changes of ``fields`` of the decorated model (see the module's docstring); its
    events are the model ``<Model>Change``."""

    def track(model: Model) -> Model:
        return pghistory.track(
            pghistory.UpdateEvent("changed", row=pghistory.Old),
            fields=[*OWNER_FIELDS, *fields],
            model_name=f"{model.__name__}Change",
            obj_field=pghistory.ObjForeignKey(on_delete=models.CASCADE, related_name="history"),
            context_field=pghistory.ContextJSONField(),
        )(model)

    return track


def history_context(actor: str, **who: object) -> pghistory.context:
    """The context of the changes made inside it (``with history_context(CURATOR, run_id=…)``);
    called without ``with`` inside an active context, it adds to that context."""
    return pghistory.context(actor=actor, **who)


class HistoryMiddleware(TrackingMiddleware):
    """The admin's writes are the operator's, by username. The API's views open their own
    context (``mirix_site.api.base.TenantAPIView``), only for writes. The URL is not kept: a
    path names an end user, and a forgotten user's name must go with them."""

    def get_context(self, request: HttpRequest) -> dict[str, Any]:
        user = getattr(request, "user", None)
        return {"actor": OPERATOR, "operator": getattr(user, "username", None)}

    def __call__(self, request: HttpRequest) -> Any:
        if not request.path.startswith("/admin/"):
            return self.get_response(request)
        return super().__call__(request)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _values(row: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    values = {}
    for name in fields:
        field = row._meta.get_field(name)
        value = getattr(row, field.attname)
        if field.is_relation and value is not None:
            value = str(value)
        values[name] = _jsonable(value)
    return values


def tracked_fields(model: type[models.Model]) -> list[str]:
    """The fields of ``model`` its history keeps (its event model's own, less the owner's)."""
    events = model.history.rel.related_model  # type: ignore[attr-defined]
    return [
        field.name
        for field in events._meta.concrete_fields
        if not field.name.startswith("pgh_") and field.name not in (*OWNER_FIELDS, "id")
    ]


def history_of(row: models.Model) -> list[dict[str, Any]]:
    """The row's changes, oldest first: when, who (the context's keys) and, for each tracked
    field that changed, its value before and after."""
    fields = tracked_fields(type(row))
    events = list(row.history.order_by("pgh_created_at", "pgh_id"))  # type: ignore[attr-defined]
    states = [_values(event, fields) for event in events] + [_values(row, fields)]
    entries = []
    for index, event in enumerate(events):
        before, after = states[index], states[index + 1]
        context = event.pgh_context if isinstance(event.pgh_context, dict) else {}
        entries.append(
            {
                "at": event.pgh_created_at.isoformat(),
                **{key: context.get(key) for key in CONTEXT_KEYS},
                "changes": {
                    name: {"before": before[name], "after": after[name]}
                    for name in fields
                    if before[name] != after[name]
                },
            }
        )
    return entries


def tracked_models() -> list[type[models.Model]]:
    """Every installed model whose changes are tracked (``history_tracked``)."""
    found = []
    for model in apps.get_models():
        history = getattr(model, "history", None)
        rel = getattr(history, "rel", None)
        if rel is not None and issubclass(rel.related_model, Event):
            found.append(model)
    return found


def history_redact(
    model: type[models.Model], redact: Callable[[str], str], *, dry_run: bool, batch: int = 500
) -> int:
    """Redact the text kept in ``model``'s history in place (``redact`` of each value), as a
    redaction of the rows themselves does: a change's "before" must not keep what the rows no
    longer hold. Returns how many history rows held such a value (changed unless ``dry_run``)."""
    events = model.history.rel.related_model  # type: ignore[attr-defined]
    fields = [
        field
        for field in events._meta.concrete_fields
        if isinstance(field, models.CharField | models.TextField)
        and not field.name.startswith("pgh_")
        and not field.choices
    ]
    changed, last = 0, 0
    while rows := list(events.objects.filter(pgh_id__gt=last).order_by("pgh_id")[:batch]):
        last = rows[-1].pgh_id
        for row in rows:
            names = []
            for field in fields:
                value = getattr(row, field.attname)
                redacted = redact(value)[: field.max_length] if value else value
                if redacted != value:
                    setattr(row, field.attname, redacted)
                    names.append(field.attname)
            if names:
                changed += 1
                if not dry_run:
                    row.save(update_fields=names)
    return changed
