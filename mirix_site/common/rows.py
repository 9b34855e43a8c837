"""Model instances from rows read with SQL, for the hot paths that skip the ORM's query building
(the API key lookup on every request, the retrieval engine's rows). ``model_columns`` is a
model's SELECT list; ``instance_build`` turns values in that order back into an instance the
way the ORM's own iterator does: the fields' database converters, then ``Model.from_db``.
``rows_insert`` is the other way: a batch of new instances in one statement.

Project-level because every app's SQL may use it; it knows no app's models.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, JSONField, Model
from django.db.models.expressions import Col

from mirix_site.common.database import prepared_cursor

ModelT = TypeVar("ModelT", bound=Model)


@dataclass(frozen=True)
class _Layout:
    """A model's columns and what reading them back needs, worked out once per model: the
    per-call field bookkeeping is what these SQL paths are there to avoid."""

    columns: tuple[str, ...]  # in field order
    attnames: tuple[str, ...]  # the fields' attribute names, same order
    # (position, its converters in order, the column they are given): JSON arrives as text.
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Col], ...]


@cache
def _layout(model: type[Model], only: tuple[str, ...] | None = None) -> _Layout:
    connection = connections[DEFAULT_DB_ALIAS]
    fields = model._meta.concrete_fields
    if only is not None:
        wanted = {model._meta.pk.name, *only}
        unknown = wanted - {field.name for field in fields}
        if unknown:
            raise ValueError(f"{model.__name__} has no field {', '.join(sorted(unknown))}")
        fields = [field for field in fields if field.name in wanted]
    converters = []
    for position, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        # The backend's converters and the field's, as the ORM's compiler gathers them.
        functions = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if functions:
            converters.append((position, tuple(functions), column))
    return _Layout(
        columns=tuple(field.column for field in fields),
        attnames=tuple(field.attname for field in fields),
        converters=tuple(converters),
    )


def model_columns(
    *, model: type[Model], alias: str | None = None, only: tuple[str, ...] | None = None
) -> list[str]:
    """The model's concrete columns in field order (``alias.column`` with an alias): the
    SELECT list whose values ``instance_build`` reads. ``only``: the columns of these fields
    and the primary key."""
    columns = _layout(model, only).columns
    if alias is None:
        return list(columns)
    return [f"{alias}.{column}" for column in columns]


def instance_build(
    *,
    model: type[ModelT],
    values: Sequence[Any],
    from_cursor: bool,
    only: tuple[str, ...] | None = None,
) -> ModelT:
    """An instance of ``model`` from one value per concrete field, in field order. Values
    ``from_cursor`` go through the fields' database converters first; others (decoded by the
    caller, e.g. with ``Field.to_python``) are taken as they are. ``only``: values of these
    fields and the primary key (``model_columns`` with the same ``only``); the instance defers
    the others, as ``QuerySet.only`` does, and reads one from the database if it is touched."""
    return _build(model, _layout(model, only), values, from_cursor)


def instances_build(
    *, models: Sequence[type[Model]], values: Sequence[Any], from_cursor: bool
) -> list[Model]:
    """One instance of each model from a row holding their values side by side (the
    ``model_columns`` of each, in turn, as a SELECT over a join gives them)."""
    built = []
    start = 0
    for model in models:
        layout = _layout(model)
        end = start + len(layout.attnames)
        built.append(_build(model, layout, values[start:end], from_cursor))
        start = end
    if start != len(values):
        raise ValueError(f"{len(values) - start} values left over after {len(models)} models")
    return built


def _build(
    model: type[ModelT], layout: _Layout, values: Sequence[Any], from_cursor: bool
) -> ModelT:
    if len(values) != len(layout.attnames):
        # from_db would quietly defer the missing fields: the SELECT and the layout disagree.
        raise ValueError(f"{model.__name__} has {len(layout.attnames)} fields, got {len(values)}")
    if from_cursor and layout.converters:
        connection = connections[DEFAULT_DB_ALIAS]
        values = list(values)
        for position, functions, column in layout.converters:
            for function in functions:
                values[position] = function(values[position], column, connection)
    return model.from_db(DEFAULT_DB_ALIAS, layout.attnames, values)


def _array_literal(values: Sequence[Any] | None) -> str | None:
    """A PostgreSQL array literal of these values, each quoted (the element type's input
    reads it: '{"1","2"}'::bigint[] is {1,2}); None for a NULL array."""
    if values is None:
        return None
    quoted = (
        "NULL"
        if value is None
        else '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        for value in values
    )
    return "{" + ",".join(quoted) + "}"


def _json_default(value: Any) -> str:
    """Values JSON has no type for, as the text their column's input reads: dates and times
    in full ISO 8601 (DjangoJSONEncoder would cut microseconds), the rest as ``str``."""
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _column_value(field: Field, instance: Model, column_type: str, connection: Any) -> Any:
    """The instance's value of the field as the JSON document carries it: what its column's
    input reads back."""
    value = field.pre_save(instance, add=True)
    if isinstance(field, JSONField):
        # The document's own text (get_db_prep_save would wrap it for psycopg instead).
        prepared = field.get_prep_value(value)
        return None if prepared is None else json.dumps(prepared, cls=field.encoder)
    value = field.get_db_prep_save(value, connection)
    if value is None:
        return None
    if column_type.endswith("]"):  # an array column: its literal
        return _array_literal(value)
    if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN: as text
        return str(value)
    return value


@cache
def _insert_layout(model: type[Model]) -> tuple[list[Field], list[str], str]:
    """The fields ``rows_insert`` writes, their column types and its statement, worked out once
    per model (every /memory/add inserts its turns with it)."""
    connection = connections[DEFAULT_DB_ALIAS]
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    column_types = [field.db_type(connection) for field in fields]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    selects = ", ".join(
        f"(e.r ->> {number})::{column_type}" for number, column_type in enumerate(column_types)
    )
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "  # noqa: S608
        f"SELECT {selects} FROM jsonb_array_elements(%s::jsonb) "
        f"WITH ORDINALITY AS e(r, position) ORDER BY e.position "
        f"RETURNING {quote(model._meta.pk.column)}"
    )
    return fields, column_types, sql


def rows_insert(*, model: type[ModelT], instances: Sequence[ModelT]) -> list[ModelT]:
    """Insert these new instances in one statement and set their primary keys, in order:
    ``bulk_create`` without its cost on large batches. The rows travel as one JSON document,
    each value read back by its column's type (``(row ->> n)::type``): ``bulk_create`` writes
    one placeholder per value (over half of a batch record's time) and one array per column
    spends much of it in psycopg's element-by-element array dumper (bench/RESULTS.md); the JSON
    is written in C. Like ``bulk_create``: fields'
    ``pre_save`` runs (``auto_now``), no ``save()``, no signals."""
    if not instances:
        return []
    connection = connections[DEFAULT_DB_ALIAS]
    fields, column_types, sql = _insert_layout(model)
    rows = [
        [
            _column_value(field, instance, column_type, connection)
            for field, column_type in zip(fields, column_types, strict=True)
        ]
        for instance in instances
    ]
    document = json.dumps(rows, default=_json_default, ensure_ascii=False, allow_nan=False)
    with prepared_cursor() as cursor:
        cursor.execute(sql, [document])
        keys = [row[0] for row in cursor.fetchall()]
    for instance, key in zip(instances, keys, strict=True):
        instance.pk = key
        instance._state.adding = False
        instance._state.db = DEFAULT_DB_ALIAS
    return list(instances)
