from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from memory.retrieval import checks  # noqa: F401  (registers the engine's system checks)
        from memory.types import memory_kinds_register

        memory_kinds_register()
        post_migrate.connect(_kind_codes_record, sender=self, dispatch_uid="kind_codes_record")


def _kind_codes_record(using: str, **kwargs: Any) -> None:
    """Sent once every app is migrated (kinds of apps after memory included): the registered
    kinds' codes are taken from now on."""
    from memory.retrieval.kinds import kind_codes_record

    kind_codes_record(using=using)
