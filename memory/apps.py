from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from memory.portability import memory_portable_register
        from memory.search import memory_kinds_register
        from memory.services.dreams import memory_dream_modes_register

        memory_kinds_register()
        memory_dream_modes_register()
        memory_portable_register()
