"""The six memory types. Each row belongs to (organization, client, end user), remembers the
messages it came from, carries the request's filter tags, and, but for core blocks, is a
searchable kind of the retrieval engine (``memory.types``): indexed for BM25 and embedded, one
row in its embeddings table per model and chunk."""

from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Owned
from mirix_site.common.history import history_tracked
from mirix_site.search.models import Embedding

# What "current" means for a memory: not superseded by another (auto-dream keeps the old one,
# marked). Reads and searches show current memories unless asked for the superseded too.
CURRENT = Q(superseded_by__isnull=True)
# The end of each memory table's unique constraint on its fingerprint (one memory per owner
# and content, or per owner and client_memory_id): a write that breaks it lost a race.
FINGERPRINT_UNIQUE = "_fingerprint_unique"
# What an auto-dream merge changes, kept in the history of every type it merges: the replaced
# memories' ``superseded_by``, and the kept one's turns and their tags (it cites the turns of
# those it replaced). Their values before the merge are what an operator's restore gives the
# kept memory back (``memory.services.dreams.memory_restore``).
MERGE_TRACKED = ("superseded_by", "source_message_ids", "filter_tags", "turn_tags")


def valid_at(moment: datetime) -> Q:
    """The semantic memories that held at ``moment`` (a search ``as_of`` it): said at or before
    it, and not replaced by then, that is current, or superseded by a later fact after it
    (their ``valid_until``). A memory merged into another (superseded, with no validity end) is
    not among them: the memory it was merged into stands for it, from the earliest of their
    times."""
    return Q(valid_from__lte=moment) & (
        Q(valid_until__gt=moment) | Q(valid_until__isnull=True, superseded_by__isnull=True)
    )


class MemoryRecord(Owned):
    """A memory of any type: its provenance (the messages it came from), the filter tags of
    the add that brought it, and, once auto-dream replaces it, the memory that did."""

    source_message_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    filter_tags = models.JSONField(default=dict, blank=True)
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
            GinIndex(fields=["filter_tags"], name="%(class)s_tags", opclasses=["jsonb_path_ops"]),
        ]


class ExtractedMemory(MemoryRecord):
    """A memory proposed by extraction. ``fingerprint`` (type, text, sources) makes re-running
    an extraction job a no-op instead of a duplicate. ``turn_tags``: each distinct tag object
    of the turns it cites (its ``filter_tags`` are those all of them carry); a search's tag
    filter matches one of them (``memory.tags``)."""

    fingerprint = models.CharField(max_length=64, editable=False)
    turn_tags = models.JSONField(default=list, blank=True)

    class Meta(MemoryRecord.Meta):
        abstract = True
        indexes = [
            *MemoryRecord.Meta.indexes,
            GinIndex(
                fields=["turn_tags"], name="%(class)s_turn_tags", opclasses=["jsonb_path_ops"]
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "fingerprint"],
                name=f"%(class)s{FINGERPRINT_UNIQUE}",
            ),
        ]


@history_tracked("label", "value", "limit", "superseded_by", "source_message_ids")
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


@history_tracked(
    "event_type",
    "summary",
    "details",
    "actor",
    "occurred_at",
    *MERGE_TRACKED,
)
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


@history_tracked(
    "name",
    "summary",
    "details",
    "source",
    "subject",
    "predicate",
    "value",
    "valid_from",
    "valid_until",
    *MERGE_TRACKED,
)
class SemanticMemory(ExtractedMemory):
    """A fact or concept, independent of when it was learned. A structured fact (the
    deterministic extractor's: ``memory.extractors.facts``) also keeps its ``subject``,
    ``predicate`` and ``value`` (blank for other memories, the LLM's among them), which is what
    auto-dream reads to tell a fact a later turn contradicts (``memory.contradictions``).
    ``valid_from`` is when the fact was said (its turn's time), ``valid_until`` when a later
    one replaced it (null: still valid); see ``valid_at``."""

    name = models.CharField(max_length=255)
    summary = models.TextField()
    details = models.TextField(blank=True)
    source = models.CharField(max_length=255, blank=True)
    subject = models.CharField(max_length=255, blank=True)
    predicate = models.CharField(max_length=64, blank=True)
    value = models.CharField(max_length=500, blank=True)
    valid_from = models.DateTimeField(default=timezone.now)
    valid_until = models.DateTimeField(null=True, blank=True)

    class Meta(ExtractedMemory.Meta):
        verbose_name = "semantic memory"
        verbose_name_plural = "semantic memories"

    def __str__(self) -> str:
        return self.name


@history_tracked("entry_type", "summary", "steps", *MERGE_TRACKED)
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


@history_tracked("title", "summary", "content", "resource_type", "uri", *MERGE_TRACKED)
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


# The secret itself is not kept in its history: an overwritten credential must be gone.
@history_tracked("entry_type", "caption", "sensitivity", "source", *MERGE_TRACKED)
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


class MemoryEmbedding(Embedding):
    """Embeddings of one memory type, per model and chunk; ``memory`` is each subclass's
    foreign key to its memory type."""

    class Meta(Embedding.Meta):
        abstract = True
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
