"""Searchable kinds: what the retrieval engine searches.

A kind is a model of tenant-owned rows (``accounts.models.Owned``) whose text is searched by
BM25 and by embeddings. Each app declares its kinds and registers them from its
``AppConfig.ready()`` (memory its memory types, skills its experiences and skills); the engine
(index writes, BM25, vector lanes, per-user indexes, fusion, gate, log, re-embedding) serves
every registered kind and names none. ``mirix_site.search.checks`` refuses a registry in which two
kinds share a name or a code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet, FullResultSet, ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, models
from django.db.models import Q

from mirix_site.search.fusion import Candidate

if TYPE_CHECKING:
    from mirix_site.providers.embeddings import EmbeddingProvider

# A posting row names its kind by this small number: PostgreSQL's smallint, unsigned.
MAX_CODE = 32767


@dataclass(frozen=True, eq=False)
class SearchableKind:
    """One kind of searchable row.

    - ``code``: the kind's number in the index tables; stable for as long as rows of the kind
      exist (a kind's postings outlive it only as garbage, so a code is never given to another).
    - ``embedding_model``: the kind's ``mirix_site.search.models.Embedding`` table, with exactly one
      foreign key to ``model``.
    - ``text_fields``: what BM25 and the embeddings read, in this order.
    - ``time_field``: the date a date range filters on (None: the kind has no date of its own,
      and a date range does not filter it: a search across kinds still finds its rows).
    - ``current``: the rows a search and a plain read see; the others (superseded, retired) are
      kept but not returned.
    - ``valid_at``: for a kind whose rows hold for a time (a fact a later one replaced),
      ``valid_at(moment)`` is the rows a search ``as_of`` that moment sees instead of the
      current ones (None: the current ones, whatever the moment).
    - ``tags_field``: the JSON object a search's ``filter_tags`` must be contained in (None: no
      tags; a tag-filtered search then leaves the kind's rows out). ``tags_listed``: it holds
      a list of such objects instead (a memory's turns' tags), one of which must contain them.
    - ``fusion``: how a hybrid search fuses the kind's lanes, ``"rrf"`` or ``"scores"``
      (None: the settings' ``SEARCH_FUSION``; see ``mirix_site.search.fusion``).
    - ``vector_weight``: the vector lane's weight in that fusion (None: the settings'
      ``SEARCH_VECTOR_WEIGHT`` for RRF, ``SEARCH_SIMILARITY_WEIGHT`` for scores), for kinds
      whose texts embed better or worse than chat memories do.
    - ``vectors_write``: for a kind whose vectors are not each chunk's embedding (a skill's
      is fit against its owner's other skills), ``vectors_write(rows, embedder)`` writes them
      instead, for those rows' owners. The vector lane compares a query with a row's nearest.
    - ``rescore``: for a kind whose rows hold phrasings of their own (a skill's triggers),
      ``rescore(query, hits)`` adds to the scores of a hybrid search's hits, every candidate
      the gate kept with its row, before the best ``limit`` are taken.
    - ``gate_fill``: a hybrid search keeps at least ``limit`` of the kind's rows while a
      keyword lane still holds rows the gate dropped (``mirix_site.search.fusion``).
    - ``calibration_pairs``: a JSON file of related (query, row text) pairs of the kind's own
      (None: the kind searches with the model's thresholds); setup calibrates the kind's gate
      on them for every model (``mirix_site.search.gate.gate_calibration_ensure``).
    """

    name: str
    code: int
    model: type[models.Model]
    embedding_model: type[models.Model]
    text_fields: tuple[str, ...]
    time_field: str | None = None
    current: Q = field(default_factory=Q)
    valid_at: Callable[[datetime], Q] | None = None
    tags_field: str | None = "filter_tags"
    tags_listed: bool = False
    fusion: str | None = None
    vector_weight: float | None = None
    vectors_write: Callable[[Sequence[models.Model], EmbeddingProvider], None] | None = None
    rescore: Callable[[str, Sequence[Hit]], None] | None = None
    calibration_pairs: Path | None = None
    gate_fill: bool = False

    def __str__(self) -> str:
        return self.name

    def fusion_rule(self) -> tuple[str, float]:
        """How a hybrid search fuses the kind's lanes, and the vector lane's weight in it."""
        fusion = self.fusion or settings.SEARCH_FUSION
        if self.vector_weight is not None:
            return fusion, self.vector_weight
        if fusion == "rrf":
            return fusion, settings.SEARCH_VECTOR_WEIGHT
        return fusion, settings.SEARCH_SIMILARITY_WEIGHT

    @cached_property
    def table(self) -> str:
        return self.model._meta.db_table

    @cached_property
    def embedding_table(self) -> str:
        return self.embedding_model._meta.db_table

    @cached_property
    def _embedding_foreign_key(self) -> models.Field:
        keys = [
            model_field
            for model_field in self.embedding_model._meta.concrete_fields
            if model_field.is_relation and model_field.related_model is self.model
        ]
        if len(keys) != 1:
            raise ImproperlyConfigured(
                f"{self.embedding_model.__name__} needs one foreign key to "
                f"{self.model.__name__}, not {len(keys)}"
            )
        return keys[0]

    @property
    def embedding_key(self) -> str:
        """The embeddings table's column naming the row an embedding is of (for SQL)."""
        return self._embedding_foreign_key.column

    @property
    def embedding_attname(self) -> str:
        """The same as the embeddings model's attribute (for the ORM)."""
        return self._embedding_foreign_key.attname

    def tags_sought(self, filter_tags: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        """What ``tags_field`` must contain (JSON containment, ``@>``) for ``filter_tags``."""
        return [filter_tags] if self.tags_listed else filter_tags

    def tags_filter(self, filter_tags: dict[str, Any]) -> Q:
        """The kind's rows whose tags contain ``filter_tags`` (the kind has a ``tags_field``)."""
        return Q(**{f"{self.tags_field}__contains": self.tags_sought(filter_tags)})

    def column(self, field_name: str) -> str:
        return self.model._meta.get_field(field_name).column

    def text(self, row: models.Model) -> str:
        """The text a row is searched and embedded by: its text fields in order, leaving out a
        field whose text another field already holds (an episode's summary is usually the first
        line of its details), so that neither BM25 nor the embedding counts it twice."""
        values = []
        for name in self.text_fields:
            value = getattr(row, name)
            if isinstance(value, list):
                value = "\n".join(str(item) for item in value)
            if value:
                values.append(str(value))
        kept = [
            value
            for index, value in enumerate(values)
            if not any(value.rstrip("…") in other for other in values[index + 1 :])
        ]
        return "\n".join(kept)

    def embedded_chunks(self, row: models.Model, chunk: Callable[[str], list[str]]) -> list[str]:
        """The chunks of the row's text, each embedded as one vector."""
        text = self.text(row)
        return chunk(text) if text.strip() else []

    def current_where(self, alias: str = "") -> tuple[str, dict[str, Any]]:
        """``current`` as SQL over the kind's table (``alias``: a prefix such as "m."), with
        named parameters, for the engine's hand-written queries."""
        sql, params = self._current_sql
        return sql.replace(_TABLE_MARK, alias), dict(params)

    def rows_where(self, rows: Q, alias: str = "") -> tuple[str, dict[str, Any]]:
        """Any condition over the kind's model as ``current_where`` gives ``current`` (a
        search that names its own rows: an experience recall's outcome and context)."""
        sql, params = _where_compile(self.model, rows, prefix=f"rows_{self.code}")
        return sql.replace(_TABLE_MARK, alias), dict(params)

    @cached_property
    def _current_sql(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        # Compiled by the ORM once, so that SQL and ORM reads apply the same declaration.
        return _where_compile(self.model, self.current, prefix=f"current_{self.code}")


@dataclass
class Hit:
    """A row a search found for a kind, with how the lanes and the gate judged it."""

    kind: SearchableKind
    row: models.Model
    candidate: Candidate


def _where_compile(
    model: type[models.Model], condition: Q, *, prefix: str
) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The ORM's SQL of ``condition`` over the model's table, its columns marked for an alias
    and its parameters named ``<prefix>_<n>``."""
    query = model.objects.filter(condition).query
    compiler = query.get_compiler(DEFAULT_DB_ALIAS)
    try:
        sql, positional = query.where.as_sql(compiler, connection)
    except FullResultSet:
        return "TRUE", ()
    except EmptyResultSet:
        return "FALSE", ()
    sql = sql.replace(f"{connection.ops.quote_name(model._meta.db_table)}.", _TABLE_MARK)
    pieces = sql.split("%%")
    named: list[tuple[str, Any]] = []
    for index, piece in enumerate(pieces):
        parts = piece.split("%s")
        rebuilt = parts[0]
        for part in parts[1:]:
            name = f"{prefix}_{len(named)}"
            named.append((name, positional[len(named)]))
            rebuilt += f"%({name})s{part}"
        pieces[index] = rebuilt
    return "%%".join(pieces), tuple(named)


_TABLE_MARK = "\x00table."
_registry: list[SearchableKind] = []


def kind_register(kind: SearchableKind) -> None:
    """Add a kind (from an ``AppConfig.ready()``). Registering the same declaration again is a
    no-op; a clash with another is for the system check to report."""
    if kind not in _registry:
        _registry.append(kind)


def kind_unregister(kind: SearchableKind) -> None:
    """Take a kind out again (tests that register their own)."""
    if kind in _registry:
        _registry.remove(kind)


def kinds() -> tuple[SearchableKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_registry)


def kind_get(name: str) -> SearchableKind | None:
    return next((kind for kind in _registry if kind.name == name), None)


def kind_codes_record(*, using: str = DEFAULT_DB_ALIAS) -> None:
    """Record the code of every registered kind not recorded yet (after each migrate), so that
    the system check can refuse a later kind that takes one of them."""
    from mirix_site.search.models import SearchableKindCode

    SearchableKindCode.objects.using(using).bulk_create(
        [SearchableKindCode(code=kind.code, name=kind.name) for kind in _registry],
        ignore_conflicts=True,
    )


NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
