"""Memory curation in the admin."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from memory.models import MetaAgent


@admin.register(MetaAgent)
class MetaAgentAdmin(admin.ModelAdmin):
    """Configured through the API (it validates the configuration); shown here read-only."""

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
