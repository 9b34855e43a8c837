from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from memory.portability import memory_portable_register
        from memory.search import memory_kinds_register

        memory_kinds_register()
        memory_portable_register()
