"""Memory curation in the admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest
from django.utils.text import capfirst
from django.utils.timesince import timesince

from accounts.admin import (
    USER_PAGE_ROWS,
    UserPagePart,
    change_link,
    user_page_register,
    user_rows_url,
)
from accounts.models import EndUser
from memory.models import (
    AgentPromptVersion,
    CoreMemoryBlock,
    DreamRun,
    EpisodicMemory,
    ExtractionJob,
    KnowledgeVaultItem,
    MemoryImport,
    MetaAgent,
    ProceduralMemory,
    ResourceMemory,
    SemanticMemory,
)
from memory.selectors import extraction_backlog, memory_counts
from memory.services.dreams import memory_restore
from memory.services.records import memory_admin_delete, memory_admin_update
from memory.types import MEMORY_TYPES
from mirix_site.common.admin import (
    BoundedCountAdmin,
    ReadOnlyAdmin,
    StoredDateTime,
    StoredText,
    history_table,
)
from mirix_site.console.charts import Bar, bar_chart, table
from mirix_site.console.panels import Dashboard, Panel, dashboard_register, list_url
from mirix_site.search.spaces import write_embedders


class AgentPromptVersionInline(admin.TabularInline):
    """Each system prompt an agent was given through the API, in order (read-only)."""

    model = AgentPromptVersion
    fields = ["agent_type", "number", "system", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MetaAgent)
class MetaAgentAdmin(admin.ModelAdmin):
    """Configured through the API (it validates the configuration); shown here read-only,
    with the system prompts its agents were given."""

    inlines = [AgentPromptVersionInline]

    list_display = ["id", "client", "organization", "name", "updated_at"]
    list_filter = ["organization"]
    search_fields = ["id", "client__name", "organization__name"]
    list_select_related = ["client", "organization"]
    readonly_fields = [
        "id",
        "organization",
        "client",
        "name",
        "system",
        "llm_config",
        "embedding_config",
        "memory_components",
        "core_blocks",
        "system_prompts",
        "created_at",
        "updated_at",
    ]
    exclude = ["llm_api_key_encrypted", "embedding_api_key_encrypted"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class SupersededFilter(admin.SimpleListFilter):
    title = "superseded"
    parameter_name = "superseded"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "current"), ("yes", "superseded")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() in ("yes", "no"):
            return queryset.filter(superseded_by__isnull=self.value() == "no")
        return queryset


class MemoryAdmin(BoundedCountAdmin):
    """Curation of one memory type: operators may correct or delete; provenance, ownership and
    the derived search data stay read-only. Edits keep the search index and embeddings in step;
    a save that changes nothing writes nothing (no update, no log entry). A memory auto-dream
    superseded is made current again by the "restore" action (recorded in its history)."""

    list_filter = ["organization", "client", SupersededFilter, "created_at"]
    actions = ["restore"]
    list_select_related = ["end_user", "client", "organization"]
    raw_id_fields = ["superseded_by"]
    owner_fields = ["organization", "client", "end_user", "source_message_ids", "filter_tags"]
    readonly_fields = [*owner_fields, "created_at", "updated_at", "changes"]
    memory_type = ""

    @admin.display(description="history")
    def changes(self, row: Any) -> str:
        return history_table(row)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        readonly = list(super().get_readonly_fields(request, obj))
        # The tags of the turns an extracted memory cites (memory.tags): provenance too.
        if any(field.name == "turn_tags" for field in self.model._meta.fields):
            readonly.append("turn_tags")
        return readonly

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # memories come from extraction and the API, with their provenance

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if isinstance(db_field, models.CharField | models.TextField) and not db_field.choices:
            kwargs["form_class"] = StoredText
        elif isinstance(db_field, models.DateTimeField):
            kwargs["form_class"] = StoredDateTime
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        memory_type = MEMORY_TYPES[self.memory_type]
        changes = {
            name: form.cleaned_data[name]
            for name in form.changed_data
            if name in memory_type.editable_fields
        }
        if not changes:
            self.message_user(request, "Nothing changed.", level=messages.INFO)
            return
        memory_admin_update(
            memory_type=memory_type, row=obj, changes=changes, embedders=write_embedders()
        )
        self.message_user(request, f"Saved; changed: {', '.join(changes)}.", level=messages.SUCCESS)

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return super().log_change(request, obj, message) if message else None

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        memory_admin_delete(memory_type=MEMORY_TYPES[self.memory_type], row=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for row in queryset:
            memory_admin_delete(memory_type=MEMORY_TYPES[self.memory_type], row=row)

    @admin.action(description="Restore as current (undo a merge or supersession)")
    def restore(self, request: HttpRequest, queryset: Any) -> None:
        restored = memory_restore(memory_type=MEMORY_TYPES[self.memory_type], rows=list(queryset))
        self.message_user(
            request, f"{restored} memories restored as current.", level=messages.SUCCESS
        )


@admin.register(CoreMemoryBlock)
class CoreMemoryBlockAdmin(MemoryAdmin):
    memory_type = "core"
    list_display = ["label", "end_user", "client", "organization", "updated_at"]
    search_fields = ["label", "value", "end_user__user_id"]


@admin.register(EpisodicMemory)
class EpisodicMemoryAdmin(MemoryAdmin):
    memory_type = "episodic"
    list_display = ["__str__", "actor", "occurred_at", "end_user", "client", "organization"]
    list_filter = [*MemoryAdmin.list_filter, "event_type"]
    search_fields = ["summary", "details", "end_user__user_id"]


@admin.register(SemanticMemory)
class SemanticMemoryAdmin(MemoryAdmin):
    memory_type = "semantic"
    list_display = [
        "name",
        "subject",
        "predicate",
        "value",
        "valid_from",
        "valid_until",
        "end_user",
        "client",
        "organization",
        "created_at",
    ]
    list_filter = [*MemoryAdmin.list_filter, "predicate"]
    search_fields = ["name", "summary", "details", "value", "end_user__user_id"]
    # When a fact held is auto-dream's record (restore clears its end), not an edit.
    readonly_fields = [*MemoryAdmin.readonly_fields, "valid_from", "valid_until"]


@admin.register(ProceduralMemory)
class ProceduralMemoryAdmin(MemoryAdmin):
    memory_type = "procedural"
    list_display = ["__str__", "entry_type", "end_user", "client", "organization", "created_at"]
    search_fields = ["summary", "end_user__user_id"]


@admin.register(ResourceMemory)
class ResourceMemoryAdmin(MemoryAdmin):
    memory_type = "resource"
    list_display = ["title", "resource_type", "end_user", "client", "organization", "created_at"]
    list_filter = [*MemoryAdmin.list_filter, "resource_type"]
    search_fields = ["title", "summary", "uri", "end_user__user_id"]


@admin.register(KnowledgeVaultItem)
class KnowledgeVaultItemAdmin(MemoryAdmin):
    """The secret value is never shown here; only its caption and sensitivity."""

    memory_type = "knowledge_vault"
    list_display = ["__str__", "entry_type", "sensitivity", "end_user", "client", "organization"]
    list_filter = [*MemoryAdmin.list_filter, "sensitivity", "entry_type"]
    search_fields = ["caption", "end_user__user_id"]
    exclude = ["secret_value_encrypted"]


@admin.register(ExtractionJob)
class ExtractionJobAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    """The durable record of each extraction batch: status, attempts, counts, last error."""

    list_display = [
        "id",
        "status",
        "end_user",
        "client",
        "organization",
        "message_count",
        "attempts",
        "llm_calls",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "organization", "client", "created_at"]
    search_fields = ["end_user__user_id", "error"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "status",
        "attempts",
        "message_count",
        "memory_counts",
        "llm_calls",
        "input_tokens",
        "output_tokens",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]


@admin.register(MemoryImport)
class MemoryImportAdmin(ReadOnlyAdmin):
    """Each bulk import (``POST /memory/import``, ``import_user`` on a file of turns): its
    progress as each batch commits (lines read, turns stored, turns found stored before, lines
    refused with the line and the reason) and, against the lines its client announced, an ETA
    at the rate so far. A running import whose ``updated_at`` stands still was cut off: its
    client resumes it by sending it again."""

    list_display = [
        "import_id",
        "state",
        "client",
        "organization",
        "lines_read",
        "expected_lines",
        "turns_stored",
        "turns_found",
        "memories_stored",
        "lines_refused",
        "eta",
        "requests",
        "updated_at",
    ]
    list_filter = ["state", "organization", "client", "updated_at"]
    search_fields = ["import_id"]
    list_select_related = ["client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "import_id",
        "state",
        "requests",
        "expected_lines",
        "lines_read",
        "turns_stored",
        "turns_found",
        "memories_stored",
        "lines_refused",
        "eta",
        "refusals",
        "created_at",
        "updated_at",
    ]

    @admin.display(description="ETA")
    def eta(self, job: MemoryImport) -> str:
        seconds = job.eta_seconds
        if seconds is None:
            return "-"
        minutes, rest = divmod(int(seconds), 60)
        return f"{minutes} min {rest} s" if minutes else f"{rest} s"


@admin.register(DreamRun)
class DreamRunAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    """Each auto-dream of a user's memories: who asked (a request, or the beat after new
    memories), its state and what it did per type."""

    list_display = [
        "id",
        "state",
        "trigger",
        "mode",
        "end_user",
        "client",
        "organization",
        "created_at",
        "finished_at",
    ]
    list_filter = ["state", "trigger", "organization", "client", "created_at"]
    search_fields = ["end_user__user_id", "error"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "state",
        "trigger",
        "mode",
        "report",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]


def _user_memories(end_user: EndUser) -> list[UserPagePart]:
    """One part per memory type, superseded memories included (marked)."""
    parts = []
    for memory_type in MEMORY_TYPES.values():
        model = memory_type.model
        rows = model.objects.filter(end_user=end_user)
        newest = rows.select_related("client").order_by("-created_at", "-id")[:USER_PAGE_ROWS]
        parts.append(
            UserPagePart(
                title=str(capfirst(model._meta.verbose_name_plural)),
                headers=["memory", "client", "created", "superseded"],
                rows=[
                    [
                        change_link(row),
                        row.client,
                        row.created_at,
                        "yes" if row.superseded_by_id else "",
                    ]
                    for row in newest
                ],
                total=rows.count(),
                more_url=user_rows_url(model, end_user),
            )
        )
    return parts


user_page_register(20, _user_memories)


def _dashboard(dashboard: Dashboard) -> list[Panel]:
    counts = memory_counts()
    waiting_jobs, oldest_job = extraction_backlog()
    return [
        Panel(
            "Memories by type",
            bar_chart(
                [
                    Bar(
                        capfirst(MEMORY_TYPES[name].model._meta.verbose_name_plural),
                        count.value,
                        list_url(MEMORY_TYPES[name].model),
                        count.shown,
                    )
                    for name, count in counts.items()
                ],
                label="memories by type",
            ),
            note="Every tenant's, superseded ones included; ≈ is PostgreSQL's estimate of a "
            "big table, not a count.",
        ),
        Panel(
            "Extraction jobs waiting",
            table(
                ["jobs queued", "oldest queued"],
                [[waiting_jobs, f"{timesince(oldest_job)} ago" if oldest_job else "-"]],
            ),
            note="Chat turns wait for the worker in jobs, a batch of a user's turns each.",
            url=list_url(ExtractionJob, status__exact=ExtractionJob.Status.QUEUED),
        ),
    ]


dashboard_register(10, _dashboard)
