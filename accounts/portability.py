"""Moving one end user between organizations or installs: the JSON Lines format of an export,
and the registry of the kinds of rows it carries.

A file is a header line (format, version, export id, source organization and user, time), one
line per row, and an ``end`` line with the count of each kind (a file without it was cut
short). Each row line names its ``kind`` and its ``ref``, an id local to the file (the source
row's id; an image's SHA-256), and refers to other rows by their refs: a message to its
session, a memory's ``source_message_ids`` to messages, a skill version's ``experience_ids``
to experiences. Vectors and the search index are never in a file: an import computes them
again the way new rows get them.

Each app declares the kinds of its rows here, from its ``AppConfig.ready()`` (this app never
imports a higher one), and the models it leaves out with the reason (``portable_skip``): every
``Owned`` model is one or the other, which tests/accounts/test_portability.py holds. The export
reads kinds in ``position`` order, so a row's references always come before it; an import
refuses a line that refers forward, except the ``later_links`` of a kind to itself (what
superseded a memory comes after it).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from accounts.tenancy import Scope

FORMAT = "mirix-user-export"
VERSION = 1
HEADER = "header"
END = "end"
# Keys every row line has besides its kind's columns.
ROW_KEYS = frozenset({"kind", "ref", "client"})


@dataclass
class ImportRun:
    """One import under way: whose rows it writes, the refs of the file mapped to the rows
    written for them, and what each kind's ``finish`` still has to do."""

    organization_id: str
    client_id: str
    end_user_id: int
    dry_run: bool
    refs: dict[str, dict[Any, Any]] = field(default_factory=lambda: defaultdict(dict))
    written: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    # (kind, own ref, row pk, foreign key name, ref it names): set once every line is in.
    later: list[tuple[str, Any, int, str, Any]] = field(default_factory=list)
    # Provenance ids that named rows the file does not hold (another client's turns, say).
    dropped_references: int = 0
    # What a kind keeps for its own later lines (the images' new hashes, say).
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def owner_ids(self) -> dict[str, Any]:
        return {
            "organization_id": self.organization_id,
            "client_id": self.client_id,
            "end_user_id": self.end_user_id,
        }


@dataclass(frozen=True)
class PortableKind:
    """One kind of row an export carries.

    - ``fields``: the columns carried as they are (validated on import by the model field's
      own ``clean``); ``links``: foreign keys to rows of another kind, by ref (earlier in the
      file); ``later_links``: foreign keys to the same kind, set once all its rows are in;
      ``id_lists``: arrays of ids of another kind (provenance), whose refs the file does not
      hold are dropped and counted.
    - ``rows(scope)``: what is exported, in order (default: the kind's rows in the scope, by
      id); ``line_extra(row)``: what a line adds to its columns (``extra_keys`` names those
      keys); ``masked(record)``: the line with its secrets masked, for a caller who may not
      see them (an API key without ``reveals_secrets``).
    - ``prepare(row, record, run)`` runs before the insert (checks, redaction, rewriting),
      ``after(row, record, run)`` after it (rows it holds, such as a message's image links);
      ``create(record, run)`` replaces the insert for rows that are not ``Owned`` (images).
      Each raises ``ValidationError`` for a bad line.
    - ``finish(row_ids, run)``: once every line is in and not in a dry run: index and embed
      them as the kind's own writes do.
    """

    name: str
    position: int
    model: type[models.Model]
    fields: tuple[str, ...] = ()
    links: Mapping[str, str] = field(default_factory=dict)
    later_links: Mapping[str, str] = field(default_factory=dict)
    id_lists: Mapping[str, str] = field(default_factory=dict)
    extra_keys: tuple[str, ...] = ()
    rows: Callable[[Scope], Iterable[models.Model]] | None = None
    line_extra: Callable[[models.Model], dict[str, Any]] | None = None
    masked: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    prepare: Callable[[models.Model, dict[str, Any], ImportRun], None] | None = None
    after: Callable[[models.Model, dict[str, Any], ImportRun], None] | None = None
    create: Callable[[dict[str, Any], ImportRun], models.Model] | None = None
    finish: Callable[[Sequence[int], ImportRun], None] | None = None

    @property
    def keys(self) -> frozenset[str]:
        return ROW_KEYS | {
            *self.fields,
            *self.links,
            *self.later_links,
            *self.id_lists,
            *self.extra_keys,
        }


_KINDS: dict[str, PortableKind] = {}
_SKIPPED: dict[type[models.Model], str] = {}


def portable_kind_register(kind: PortableKind) -> None:
    """Called from an app's ``ready()``; registering the same kind again replaces it."""
    _KINDS[kind.name] = kind


def portable_skip(model: type[models.Model], reason: str) -> None:
    """Declare that exports leave ``model`` out, and why (a sentence an operator reads)."""
    _SKIPPED[model] = reason


def portable_kinds() -> list[PortableKind]:
    """The registered kinds, in the order a file holds them."""
    return sorted(_KINDS.values(), key=lambda kind: kind.position)


def portable_kind(name: str) -> PortableKind | None:
    return _KINDS.get(name)


def portable_skipped() -> dict[type[models.Model], str]:
    return dict(_SKIPPED)


def model_columns(model: type[models.Model], *, without: Iterable[str] = ()) -> tuple[str, ...]:
    """The model's own columns that are not keys (no id, owner or other foreign key): what a
    kind carries as it is, less ``without``."""
    left_out = set(without)
    return tuple(
        column.name
        for column in model._meta.concrete_fields
        if not column.primary_key and not column.is_relation and column.name not in left_out
    )


def line_encode(record: dict[str, Any]) -> str:
    """One line of a file (no newline): compact JSON, times in ISO 8601."""
    return json.dumps(record, cls=DjangoJSONEncoder, ensure_ascii=False, separators=(",", ":"))


# --- Export: rows to lines ---


def _scoped_rows(kind: PortableKind, scope: Scope) -> Iterable[models.Model]:
    if kind.rows is not None:
        return kind.rows(scope)
    return kind.model.objects.in_scope(scope).order_by("pk").iterator(chunk_size=500)


def row_record(kind: PortableKind, row: models.Model) -> dict[str, Any]:
    """A row as its line's object."""
    record: dict[str, Any] = {"kind": kind.name, "ref": row.pk}
    if hasattr(row, "client_id"):
        record["client"] = row.client_id
    for name in kind.fields:
        record[name] = getattr(row, name)
    for name in (*kind.links, *kind.later_links):
        record[name] = getattr(row, f"{name}_id")
    for name in kind.id_lists:
        record[name] = list(getattr(row, name))
    if kind.line_extra is not None:
        record.update(kind.line_extra(row))
    return record


def scope_records(scope: Scope, *, secrets: bool) -> Iterable[tuple[PortableKind, dict[str, Any]]]:
    """Every row of every kind in the scope, as line objects, kind after kind; without
    ``secrets``, each masked as its kind masks it."""
    for kind in portable_kinds():
        mask = kind.masked if not secrets else None
        for row in _scoped_rows(kind, scope):
            record = row_record(kind, row)
            yield kind, mask(record) if mask is not None else record


# --- Import: lines to rows ---


def _column_clean(model: type[models.Model], name: str, value: Any, row: models.Model) -> Any:
    column = model._meta.get_field(name)
    return column.clean(value, row)


def _ref_check(ref: Any) -> None:
    if isinstance(ref, bool) or not isinstance(ref, int | str):
        raise ValidationError({"ref": ["A ref is a number or a string."]})


def _links_set(
    kind: PortableKind, row: models.Model, record: dict[str, Any], run: ImportRun
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for name, target in kind.links.items():
        ref = record.get(name)
        if ref is None:
            continue
        if ref not in run.refs[target]:
            errors[name] = [f"names {target} {ref!r}, which no earlier line of the file holds."]
            continue
        setattr(row, f"{name}_id", run.refs[target][ref])
    for name, target in kind.id_lists.items():
        refs = record.get(name, [])
        if not isinstance(refs, list):
            errors[name] = [f"A list of {target} refs, not {type(refs).__name__}."]
            continue
        known = run.refs[target]
        mapped = [known[ref] for ref in refs if _hashable(ref) and ref in known]
        run.dropped_references += len(refs) - len(mapped)
        setattr(row, name, mapped)
    return errors


def _hashable(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def _times_fill(row: models.Model) -> None:
    # Rows go in with their own times (``save_base(raw=True)`` skips auto_now); a line
    # without one gets the time of the import.
    now = timezone.now()
    for column in row._meta.concrete_fields:
        automatic = getattr(column, "auto_now", False) or getattr(column, "auto_now_add", False)
        if automatic and getattr(row, column.attname) is None:
            setattr(row, column.attname, now)


def _row_insert(kind: PortableKind, record: dict[str, Any], run: ImportRun) -> models.Model:
    row = kind.model(**run.owner_ids)
    errors: dict[str, list[str]] = {}
    for name in kind.fields:
        if name not in record:
            continue
        try:
            setattr(
                row,
                kind.model._meta.get_field(name).attname,
                _column_clean(kind.model, name, record[name], row),
            )
        except ValidationError as exc:
            errors[name] = exc.messages
    errors |= _links_set(kind, row, record, run)
    if errors:
        raise ValidationError(errors)
    _times_fill(row)
    if kind.prepare is not None:
        kind.prepare(row, record, run)
    # raw: the row keeps its own created/updated times, as loaddata keeps a fixture's.
    row.save_base(raw=True, force_insert=True)
    if kind.after is not None:
        kind.after(row, record, run)
    return row


def record_load(kind: PortableKind, record: dict[str, Any], run: ImportRun) -> models.Model:
    """Write the row of one line for the import's owner; raises ``ValidationError`` naming
    what is wrong with the line."""
    unknown = sorted(set(record) - kind.keys)
    if unknown:
        raise ValidationError(f"unknown keys for a {kind.name}: {', '.join(unknown)}.")
    ref = record.get("ref")
    _ref_check(ref)
    if ref in run.refs[kind.name]:
        raise ValidationError({"ref": [f"Another {kind.name} line has ref {ref!r}."]})
    row = kind.create(record, run) if kind.create is not None else _row_insert(kind, record, run)
    for name in kind.later_links:
        target = record.get(name)
        if target is None:
            continue
        if not _hashable(target):
            raise ValidationError({name: ["A ref is a number or a string."]})
        run.later.append((kind.name, ref, row.pk, name, target))
    run.refs[kind.name][ref] = row.pk
    run.written[kind.name].append(row.pk)
    return row


def later_links_set(run: ImportRun) -> None:
    """Set the links to rows that came later in the file (what superseded what); raises
    ``ValidationError`` for a ref no line held."""
    for kind_name, own_ref, pk, name, ref in run.later:
        kind = _KINDS[kind_name]
        target = kind.later_links[name]
        if ref not in run.refs[target]:
            raise ValidationError(
                f"the {kind_name} with ref {own_ref!r}: {name} names {target} {ref!r}, which "
                "no line of the file holds."
            )
        kind.model.objects.filter(pk=pk).update(**{f"{name}_id": run.refs[target][ref]})
