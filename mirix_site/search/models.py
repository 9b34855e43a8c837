"""The retrieval engine's own tables, for every searchable kind (``mirix_site.search.kinds``):
BM25's inverted index and statistics, the embeddings' common shape, the similarity gate's
calibration, the embedding models on file, and the retrieval log. Rows of the index name their
kind by its code and the row by its id. The tables keep the names they had when the engine
lived in the memory app (``memory_*``): moving the engine renamed no table."""

from __future__ import annotations

from django.contrib.postgres.indexes import OpClass
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from pgvector.django import HnswIndex, VectorField

from accounts.models import EndUser, Organization, Owned, OwnedIndexedByModel
from mirix_site.providers.embeddings import LOCAL_MODEL_DIMENSIONS, LOCAL_MODEL_NAME


class IndexOwned(OwnedIndexedByModel):
    """The owner of a row of BM25's index and statistics: (organization, client, end user).
    No single-column indexes on the organization and the user: each table's composite indexes
    lead with them, and a competing one only tempts the planner away from index-only scans.
    The client's is a plain one each table names (a client's deletion finds its rows by it)."""

    class Meta:
        abstract = True


class Posting(IndexOwned):
    """One lexeme of one document's text (a searchable row of some kind): how often it occurs
    there (``tf``) and the text's length in lexemes. BM25 reads these through index-only scans,
    never the documents."""

    kind = models.PositiveSmallIntegerField()
    lexeme = models.TextField()
    document_id = models.BigIntegerField()
    tf = models.PositiveIntegerField()
    doc_length = models.PositiveIntegerField()

    class Meta:
        db_table = "memory_posting"
        indexes = [
            models.Index(
                fields=["end_user", "kind", "lexeme", "document_id"],
                include=["client", "tf", "doc_length"],
                name="posting_user_term",
            ),
            models.Index(
                fields=["organization", "kind", "lexeme"],
                include=["client", "end_user", "document_id", "tf", "doc_length"],
                name="posting_org_term",
            ),
            models.Index(fields=["kind", "document_id"], name="posting_document"),
            models.Index(fields=["client"], name="posting_client"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme} x{self.tf} in {self.kind}#{self.document_id}"


class TermStats(IndexOwned):
    """For one (user, client, kind): how many documents hold a lexeme, and the most times one
    document holds it (an upper bound: it is not lowered on delete). IDF and the scoring bounds
    that let BM25 skip common terms come from here."""

    kind = models.PositiveSmallIntegerField()
    lexeme = models.TextField()
    doc_frequency = models.IntegerField(default=0)
    max_tf = models.IntegerField(default=0)

    class Meta:
        db_table = "memory_termstats"
        verbose_name = verbose_name_plural = "term statistics"
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "kind", "lexeme"], name="term_stats_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "kind", "lexeme"], name="term_stats_org"),
            models.Index(fields=["client"], name="term_stats_client"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme}: df {self.doc_frequency}"


class DocumentStats(IndexOwned):
    """For one (user, client, kind): how many documents are indexed and their total length,
    for BM25's N and average document length."""

    kind = models.PositiveSmallIntegerField()
    doc_count = models.IntegerField(default=0)
    total_length = models.BigIntegerField(default=0)

    class Meta:
        db_table = "memory_documentstats"
        verbose_name = verbose_name_plural = "document statistics"
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "kind"], name="document_stats_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "kind"], name="document_stats_org"),
            models.Index(fields=["client"], name="document_stats_client"),
        ]

    def __str__(self) -> str:
        return f"{self.doc_count} documents"


class PostingSegment(IndexOwned):
    """One lexeme's postings of one large owner (user, client, kind), packed as its cover was
    built: document ids (8 bytes), tfs and document lengths (4 bytes each), big-endian, in
    document order. BM25 reads a common term's 100,000 postings of such an owner as three
    arrays of one row instead of 100,000 index tuples (``mirix_site.search.segments``). Only a
    build writes these; what changed since is read from the postings."""

    kind = models.PositiveSmallIntegerField()
    lexeme = models.TextField()
    document_ids = models.BinaryField()
    tfs = models.BinaryField()
    lengths = models.BinaryField()

    class Meta:
        db_table = "memory_postingsegment"
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "kind", "lexeme"], name="posting_segment_unique"
            ),
        ]
        indexes = [models.Index(fields=["client"], name="posting_segment_client")]

    def __str__(self) -> str:
        return f"{self.lexeme}: segment"


class SegmentCover(IndexOwned):
    """What one owner's posting segments hold: every document up to ``through_document_id``
    as of the build, but those in ``SegmentChange``. Until ``ready`` (a build under way)
    searches read the postings alone."""

    kind = models.PositiveSmallIntegerField()
    through_document_id = models.BigIntegerField()
    documents = models.IntegerField(default=0)  # documents the segments hold
    ready = models.BooleanField(default=False)
    built_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "memory_segmentcover"
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "kind"], name="segment_cover_unique"
            ),
        ]
        indexes = [models.Index(fields=["client"], name="segment_cover_client")]

    def __str__(self) -> str:
        return f"segments through {self.through_document_id}"


class SegmentChange(IndexOwned):
    """A document of a covered owner, at or below the cover's line, whose postings were
    removed or written since the build: the segments' copy of it is ignored and its postings
    (if any) read from the index. Written by the index writer's statements themselves."""

    kind = models.PositiveSmallIntegerField()
    document_id = models.BigIntegerField()

    class Meta:
        db_table = "memory_segmentchange"
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "kind", "document_id"],
                name="segment_change_unique",
            ),
        ]
        indexes = [models.Index(fields=["client"], name="segment_change_client")]

    def __str__(self) -> str:
        return f"document {self.document_id} changed"


class Embedding(Owned):
    """One embedding of one chunk of a searchable row's text, by one named model. Each kind
    has a table of these, with one foreign key to its rows (``SearchableKind.embedding_key``).
    The column holds vectors of any dimension; each model gets its own partial HNSW index over
    a cast to its dimension, so vectors of different models are never compared. The bundled
    model's index is part of the schema; other models get theirs from ``manage.py reembed``."""

    model = models.CharField(max_length=100)
    chunk_index = models.PositiveSmallIntegerField(default=0)
    embedding = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        indexes = [
            HnswIndex(
                OpClass(
                    Cast("embedding", output_field=VectorField(dimensions=LOCAL_MODEL_DIMENSIONS)),
                    name="vector_cosine_ops",
                ),
                name="%(class)s_hnsw",
                m=16,
                ef_construction=64,
                condition=Q(model=LOCAL_MODEL_NAME),
            ),
            models.Index(fields=["end_user", "client", "model"], name="%(class)s_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.model} chunk {self.chunk_index}"


class SharedGraphHolder(models.Model):
    """The user who holds most of one model's embeddings of one kind (more than
    ``vector_indexes.OWN_INDEX_MAX_SHARE``): the shared HNSW graph, walked for them, skips few
    other rows, so they get no graph of their own and the vector lane walks the shared one as
    it walks an own index (``mirix_site.search.vectors``). Written by the sync of vector
    indexes, which counts every owner; at most one a kind and model."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="+")
    kind = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=100)
    share = models.FloatField()  # of the model's embeddings of the kind, when counted
    counted_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "model"], name="shared_graph_holder_unique")
        ]
        indexes = [models.Index(fields=["end_user", "kind", "model"], name="shared_graph_user")]

    def __str__(self) -> str:
        return f"{self.model}: user {self.end_user_id} holds {self.share:.0%}"


class GateCalibration(models.Model):
    """The similarity gate's thresholds for one embedding model, for every kind (``kind``
    blank) or for one kind, as measured by ``manage.py calibrate_gate`` on related and
    unrelated text pairs. A kind's own calibration wins over the model's."""

    model = models.CharField(max_length=100)
    kind = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="A searchable kind's name; blank: every kind.",
    )
    min_similarity = models.FloatField(
        help_text=(
            "Below it a result is dropped, unless BM25 ranked it in its top 3"
            " or (memories) scored it at least 0.7 of its best."
        )
    )
    strong_similarity = models.FloatField(help_text="At or above it a result ranks first.")
    related_pairs = models.PositiveIntegerField(default=0)
    unrelated_pairs = models.PositiveIntegerField(default=0)
    related_mean = models.FloatField(default=0)
    unrelated_mean = models.FloatField(default=0)
    measured_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "memory_gatecalibration"
        constraints = [
            models.UniqueConstraint(fields=["model", "kind"], name="gate_calibration_unique"),
        ]

    def __str__(self) -> str:
        scope = f" ({self.kind})" if self.kind else ""
        return (
            f"{self.model}{scope}: min {self.min_similarity:.3f}, "
            f"strong {self.strong_similarity:.3f}"
        )


class RetrievalLog(Owned):
    """One retrieval: who asked what, how, of which kinds, what came back (ids with their lane
    ranks and scores), what the gate decided, and how long it took. An audit table."""

    end_user = models.ForeignKey(  # None: a search across the client's users
        EndUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    endpoint = models.CharField(max_length=64)
    query = models.TextField(blank=True)
    method = models.CharField(max_length=16)
    kinds = models.JSONField(default=list)
    results = models.JSONField(default=list)
    gate = models.JSONField(default=dict)
    latency_ms = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "memory_retrievallog"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["organization", "client", "-created_at"], name="retrieval_log_client"
            )
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.query[:40]!r}"


class EmbeddingSpace(models.Model):
    """One embedding model the server has vectors of. ``building`` while ``manage.py
    reembed`` fills it, ``ready`` once every searchable row has its vectors; searches read the
    configured model only once its space is ready, the last ready one until then."""

    class Status(models.TextChoices):
        BUILDING = "building"
        READY = "ready"

    model = models.CharField(max_length=100, unique=True)
    provider = models.CharField(max_length=16)
    dimensions = models.PositiveIntegerField()
    api_base = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.BUILDING)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "memory_embeddingspace"

    def __str__(self) -> str:
        return f"{self.model} ({self.status})"


class SearchableKindCode(models.Model):
    """A searchable kind's code, recorded the first time the kind was migrated: the index keeps
    a kind's postings and statistics under its code, and they outlive the kind, so a code once
    given out names that kind for good (``mirix_site.search.checks``)."""

    code = models.PositiveSmallIntegerField(primary_key=True)
    name = models.CharField(max_length=64)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "memory_searchablekindcode"
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.code}: {self.name}"
