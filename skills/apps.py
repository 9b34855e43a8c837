from __future__ import annotations

from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills and experiences"

    def ready(self) -> None:
        from skills.kinds import skill_kinds_register

        skill_kinds_register()
