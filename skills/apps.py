from __future__ import annotations

import logging

from django.apps import AppConfig
from django.db import DatabaseError

logger = logging.getLogger(__name__)


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills and experiences"

    def ready(self) -> None:
        from memory.dreams import DreamMode, dream_mode_register
        from memory.procedures import procedural_source_register
        from sessions.signals import session_closed
        from skills.portability import skills_portable_register
        from skills.procedures import SKILL_PROCEDURES
        from skills.search import skill_kinds_register

        skill_kinds_register()
        skills_portable_register()
        procedural_source_register(SKILL_PROCEDURES)
        dream_mode_register(DreamMode(name="procedural", run=_dream_procedural))
        dream_mode_register(DreamMode(name="experience", run=_dream_experience))
        session_closed.connect(_session_closed, dispatch_uid="skills.learning_run_trigger")


def _session_closed(sender: type, session: object, **kwargs: object) -> None:
    """A task session closed: skill learning may have enough to learn from, and the skills
    retrieved for it count its outcome. The close has committed: a failure here is logged, not
    turned into the closing request's error (the next close of the user counts the session
    for learning again)."""
    from skills.services.learning import learning_run_trigger
    from skills.services.skills import skill_uses_session_count

    try:
        learning_run_trigger(session=session)  # type: ignore[arg-type]
        skill_uses_session_count(session_id=session.pk)  # type: ignore[attr-defined]
    except DatabaseError:
        logger.exception("learning trigger failed after session %s closed", session.pk)  # type: ignore[attr-defined]


def _dream_procedural(tenant: object, end_user: object, request: object) -> dict[str, object]:
    """POST /memory/auto_dream mode=procedural: learn from the last N closed task sessions."""
    from skills.services.learning import learning_run_dream

    return learning_run_dream(
        tenant=tenant,  # type: ignore[arg-type]
        end_user=end_user,  # type: ignore[arg-type]
        last_n=request.last_n_sessions,  # type: ignore[attr-defined]
        dry_run=request.dry_run,  # type: ignore[attr-defined]
    )


def _dream_experience(tenant: object, end_user: object, request: object) -> dict[str, object]:
    """POST /memory/auto_dream mode=experience: the same attempt recorded twice becomes one."""
    from skills.services.dreams import experiences_merge

    return experiences_merge(
        tenant=tenant,  # type: ignore[arg-type]
        end_user=end_user,  # type: ignore[arg-type]
        dry_run=request.dry_run,  # type: ignore[attr-defined]
    )
