"""The retrieval engine's own tables: BM25's inverted index and statistics, the similarity
gate's calibration, and the retrieval log."""

from __future__ import annotations

from django.db import models

from accounts.models import Client, EndUser, Organization


class IndexOwned(models.Model):
    """The owner of a row of BM25's index and statistics: (organization, client, end user).
    No single-column indexes on the owners: each table's composite indexes lead with them, and
    a competing one only tempts the planner away from the index-only scans."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(
        EndUser, on_delete=models.CASCADE, related_name="+", db_index=False
    )

    class Meta:
        abstract = True


class MemoryPosting(IndexOwned):
    """One lexeme of one memory's text: how often it occurs there (``tf``) and the text's
    length in lexemes. BM25 reads these through index-only scans, never the memories."""

    memory_type = models.PositiveSmallIntegerField()
    lexeme = models.TextField()
    memory_id = models.BigIntegerField()
    tf = models.PositiveIntegerField()
    doc_length = models.PositiveIntegerField()

    class Meta:
        indexes = [
            models.Index(
                fields=["end_user", "memory_type", "lexeme", "memory_id"],
                include=["client", "tf", "doc_length"],
                name="posting_user_term",
            ),
            models.Index(
                fields=["organization", "memory_type", "lexeme"],
                include=["client", "end_user", "memory_id", "tf", "doc_length"],
                name="posting_org_term",
            ),
            models.Index(fields=["memory_type", "memory_id"], name="posting_memory"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme} x{self.tf} in {self.memory_type}#{self.memory_id}"


class TermStats(IndexOwned):
    """For one (user, client, memory type): how many memories hold a lexeme, and the most
    times one memory holds it (an upper bound: it is not lowered on delete). IDF and the
    scoring bounds that let BM25 skip common terms come from here."""

    memory_type = models.PositiveSmallIntegerField()
    lexeme = models.TextField()
    doc_frequency = models.IntegerField(default=0)
    max_tf = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "memory_type", "lexeme"], name="term_stats_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "memory_type", "lexeme"], name="term_stats_org"),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme}: df {self.doc_frequency}"


class DocumentStats(IndexOwned):
    """For one (user, client, memory type): how many memories are indexed and their total
    length, for BM25's N and average document length."""

    memory_type = models.PositiveSmallIntegerField()
    doc_count = models.IntegerField(default=0)
    total_length = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "memory_type"], name="document_stats_unique"
            ),
        ]
        indexes = [models.Index(fields=["organization", "memory_type"], name="document_stats_org")]

    def __str__(self) -> str:
        return f"{self.doc_count} documents"


class GateCalibration(models.Model):
    """The similarity gate's thresholds for one embedding model, as measured by
    ``manage.py calibrate_gate`` on related and unrelated text pairs."""

    model = models.CharField(max_length=100, unique=True)
    min_similarity = models.FloatField(
        help_text="Below it a result is dropped, unless BM25 ranked it in its top 3."
    )
    strong_similarity = models.FloatField(help_text="At or above it a result ranks first.")
    related_pairs = models.PositiveIntegerField(default=0)
    unrelated_pairs = models.PositiveIntegerField(default=0)
    related_mean = models.FloatField(default=0)
    unrelated_mean = models.FloatField(default=0)
    measured_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.model}: min {self.min_similarity:.3f}, strong {self.strong_similarity:.3f}"


class RetrievalLog(models.Model):
    """One retrieval: who asked what, how, what came back (ids with their lane ranks and
    scores), what the gate decided, and how long it took. An audit table."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(
        EndUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    endpoint = models.CharField(max_length=64)
    query = models.TextField(blank=True)
    method = models.CharField(max_length=16)
    memory_types = models.JSONField(default=list)
    results = models.JSONField(default=list)
    gate = models.JSONField(default=dict)
    latency_ms = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
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
    reembed`` fills it, ``ready`` once every memory has its vectors; searches read the
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

    def __str__(self) -> str:
        return f"{self.model} ({self.status})"
