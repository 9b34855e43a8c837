"""System checks of the searchable-kind registry: a clash there would mix two kinds' rows in the
search index (postings and statistics name a kind by its code), so it stops the server. Two
kinds may not share a code or a name, and a code recorded for one kind (``SearchableKindCode``,
written after each migrate) is never taken by another: its postings may still be there."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.core import checks
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import DatabaseError, connections

from mirix_site.search.fusion import FUSIONS
from mirix_site.search.kinds import MAX_CODE, NAME_PATTERN, SearchableKind, kinds
from mirix_site.search.models import Embedding, SearchableKindCode


def _clashes(registered: tuple[SearchableKind, ...]) -> list[checks.CheckMessage]:
    errors = []
    by_code: dict[int, list[str]] = defaultdict(list)
    by_name: dict[str, list[SearchableKind]] = defaultdict(list)
    for kind in registered:
        by_code[kind.code].append(kind.name)
        by_name[kind.name].append(kind)
    for code, names in sorted(by_code.items()):
        if len(names) > 1:
            errors.append(
                checks.Error(
                    f"Searchable kinds {', '.join(names)} share the code {code}.",
                    hint="Give each kind a code of its own, never one another kind had.",
                    id="retrieval.E001",
                )
            )
    for name, same in sorted(by_name.items()):
        if len(same) > 1:
            errors.append(
                checks.Error(
                    f"{len(same)} searchable kinds are named {name!r}.", id="retrieval.E002"
                )
            )
    return errors


def _declaration(kind: SearchableKind) -> list[checks.CheckMessage]:
    errors = []
    where = f"searchable kind {kind.name!r}"
    if not NAME_PATTERN.match(kind.name):
        errors.append(checks.Error(f"{where}: a name of a-z, 0-9 and _.", id="retrieval.E003"))
    if not 0 <= kind.code <= MAX_CODE:
        errors.append(checks.Error(f"{where}: code outside 0..{MAX_CODE}.", id="retrieval.E003"))
    if kind.fusion not in (None, *FUSIONS):
        errors.append(
            checks.Error(f"{where}: fusion is one of {', '.join(FUSIONS)}.", id="retrieval.E003")
        )
    for name in (*kind.text_fields, kind.time_field, kind.tags_field):
        if name is None:
            continue
        try:
            kind.model._meta.get_field(name)
        except FieldDoesNotExist:
            errors.append(
                checks.Error(
                    f"{where}: {kind.model.__name__} has no field {name!r}.", id="retrieval.E004"
                )
            )
    if not issubclass(kind.embedding_model, Embedding):
        errors.append(
            checks.Error(f"{where}: its embeddings model is not an Embedding.", id="retrieval.E005")
        )
    try:
        kind.embedding_key  # noqa: B018  (raises when the foreign key is missing or ambiguous)
    except ImproperlyConfigured as error:
        errors.append(checks.Error(f"{where}: {error}.", id="retrieval.E005"))
    return errors


@checks.register(checks.Tags.models)
def searchable_kinds_check(**kwargs: Any) -> list[checks.CheckMessage]:
    registered = kinds()
    errors = _clashes(registered)
    for kind in registered:
        errors += _declaration(kind)
    return errors


@checks.register(checks.Tags.database)
def kind_codes_check(
    databases: list[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """A registered kind whose code was recorded for another kind. Run by ``migrate`` and by
    ``check --database default``: it reads the database."""
    errors: list[checks.CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        try:
            if SearchableKindCode._meta.db_table not in connection.introspection.table_names():
                continue  # the first migrate has not created it yet
            recorded = dict(SearchableKindCode.objects.using(alias).values_list("code", "name"))
        except DatabaseError:
            continue  # no database to read: nothing recorded can be compared
        for kind in kinds():
            owner = recorded.get(kind.code)
            if owner is not None and owner != kind.name:
                errors.append(
                    checks.Error(
                        f"Searchable kind {kind.name!r} has the code {kind.code}, which the "
                        f"index has been keeping for kind {owner!r}.",
                        hint="Give the kind a code never used; a renamed kind keeps its code "
                        "once its SearchableKindCode row is renamed too.",
                        id="retrieval.E006",
                    )
                )
    return errors
