"""The six memory types. Each row belongs to (organization, client, end user), remembers the
messages it came from, carries the request's filter tags, and is searchable by text (a
``tsvector``) and by meaning (rows in its embeddings table, one per model and chunk)."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from pgvector.django import HnswIndex, VectorField

from accounts.models import Client, EndUser, Organization

# The default local model. Its HNSW indexes are part of the schema; other models get theirs
# when `manage.py reembed` loads them.
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
DEFAULT_EMBEDDING_DIMENSIONS = 384


class MemoryRecord(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="+")
    source_message_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    filter_tags = models.JSONField(default=dict, blank=True)
    search_vector = SearchVectorField(null=True, editable=False)
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["end_user", "client", "-created_at"], name="%(class)s_owner"),
            GinIndex(fields=["search_vector"], name="%(class)s_search"),
            GinIndex(fields=["filter_tags"], name="%(class)s_tags", opclasses=["jsonb_path_ops"]),
        ]


class ExtractedMemory(MemoryRecord):
    """A memory proposed by extraction. ``fingerprint`` (type, text, sources) makes re-running
    an extraction job a no-op instead of a duplicate."""

    fingerprint = models.CharField(max_length=64, editable=False)

    class Meta(MemoryRecord.Meta):
        abstract = True
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "fingerprint"], name="%(class)s_fingerprint_unique"
            ),
        ]


class CoreMemoryBlock(MemoryRecord):
    """A block of always-in-context memory about the user (``human``) or the agent
    (``persona``): short, edited in place, returned whole."""

    label = models.CharField(max_length=100)
    value = models.TextField(blank=True)
    limit = models.PositiveIntegerField(default=5000)

    class Meta(MemoryRecord.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "label"], name="core_block_label_unique"
            ),
        ]
        verbose_name = "core memory block"

    def __str__(self) -> str:
        return self.label


class EpisodicMemory(ExtractedMemory):
    """Something that happened, and when: an exchange, an event the user told of."""

    event_type = models.CharField(max_length=64, default="conversation")
    summary = models.TextField()
    details = models.TextField(blank=True)
    actor = models.CharField(max_length=255, blank=True)
    occurred_at = models.DateTimeField()

    class Meta(ExtractedMemory.Meta):
        indexes = [
            *ExtractedMemory.Meta.indexes,
            models.Index(fields=["end_user", "client", "occurred_at"], name="episodic_occurred"),
        ]
        verbose_name = "episodic memory"
        verbose_name_plural = "episodic memories"

    def __str__(self) -> str:
        return self.summary[:80]


class SemanticMemory(ExtractedMemory):
    """A fact or concept, independent of when it was learned."""

    name = models.CharField(max_length=255)
    summary = models.TextField()
    details = models.TextField(blank=True)
    source = models.CharField(max_length=255, blank=True)

    class Meta(ExtractedMemory.Meta):
        verbose_name = "semantic memory"
        verbose_name_plural = "semantic memories"

    def __str__(self) -> str:
        return self.name


class ProceduralMemory(ExtractedMemory):
    """How to do something: a workflow as ordered steps. Skill learning adds to these."""

    entry_type = models.CharField(max_length=64, default="workflow")
    summary = models.TextField()
    steps = models.JSONField(default=list, blank=True)

    class Meta(ExtractedMemory.Meta):
        verbose_name = "procedural memory"
        verbose_name_plural = "procedural memories"

    def __str__(self) -> str:
        return self.summary[:80]


class ResourceMemory(ExtractedMemory):
    """A document, file, link or image the user shared or worked with."""

    title = models.CharField(max_length=500)
    summary = models.TextField(blank=True)
    content = models.TextField(blank=True)
    resource_type = models.CharField(max_length=32, default="document")
    uri = models.TextField(blank=True)

    class Meta(ExtractedMemory.Meta):
        verbose_name = "resource memory"
        verbose_name_plural = "resource memories"

    def __str__(self) -> str:
        return self.title


class KnowledgeVaultItem(ExtractedMemory):
    """A sensitive value (credential, contact detail, identifier). The value is encrypted at
    rest and never returned by search unless explicitly asked for."""

    class Sensitivity(models.TextChoices):
        LOW = "low"
        MEDIUM = "medium"
        HIGH = "high"

    entry_type = models.CharField(max_length=64, default="credential")
    caption = models.TextField()
    secret_value_encrypted = models.TextField(editable=False)
    sensitivity = models.CharField(
        max_length=8, choices=Sensitivity.choices, default=Sensitivity.MEDIUM
    )
    source = models.CharField(max_length=255, blank=True)

    class Meta(ExtractedMemory.Meta):
        verbose_name = "knowledge vault item"

    def __str__(self) -> str:
        return self.caption[:80]


class MemoryEmbedding(models.Model):
    """One embedding of one chunk of a memory's text, by one named model. The column holds
    vectors of any dimension; each model gets its own partial HNSW index over a cast to its
    dimension, so vectors of different models are never compared."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=100)
    chunk_index = models.PositiveSmallIntegerField(default=0)
    embedding = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        indexes = [
            HnswIndex(
                OpClass(
                    Cast(
                        "embedding",
                        output_field=VectorField(dimensions=DEFAULT_EMBEDDING_DIMENSIONS),
                    ),
                    name="vector_cosine_ops",
                ),
                name="%(class)s_hnsw",
                m=16,
                ef_construction=64,
                condition=Q(model=DEFAULT_EMBEDDING_MODEL),
            ),
            models.Index(fields=["end_user", "client", "model"], name="%(class)s_owner"),
        ]
        # ``memory`` is each subclass's foreign key to its own memory type.
        constraints = [
            models.UniqueConstraint(
                fields=["memory", "model", "chunk_index"], name="%(class)s_unique_chunk"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} chunk {self.chunk_index} of #{self.memory_id}"


class EpisodicEmbedding(MemoryEmbedding):
    """Embeddings of episodic memories, per model and chunk."""

    memory = models.ForeignKey(EpisodicMemory, on_delete=models.CASCADE, related_name="embeddings")


class SemanticEmbedding(MemoryEmbedding):
    """Embeddings of semantic memories, per model and chunk."""

    memory = models.ForeignKey(SemanticMemory, on_delete=models.CASCADE, related_name="embeddings")


class ProceduralEmbedding(MemoryEmbedding):
    """Embeddings of procedural memories, per model and chunk."""

    memory = models.ForeignKey(
        ProceduralMemory, on_delete=models.CASCADE, related_name="embeddings"
    )


class ResourceEmbedding(MemoryEmbedding):
    """Embeddings of resource memories, per model and chunk."""

    memory = models.ForeignKey(ResourceMemory, on_delete=models.CASCADE, related_name="embeddings")


class VaultEmbedding(MemoryEmbedding):
    """Embeddings of knowledge vault items, per model and chunk."""

    memory = models.ForeignKey(
        KnowledgeVaultItem, on_delete=models.CASCADE, related_name="embeddings"
    )
