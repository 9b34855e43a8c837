"""Active skills served as MIRIX procedural memories (``memory.procedures``): found for a
conversation's task and deleted through ``DELETE /memory/procedural/skill-<id>`` (softly, as a
version, within the user). Candidates are not served here: a conversation's procedures are the
proven ones; ``POST /skills/retrieve`` serves both."""

from __future__ import annotations

from typing import Any

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.procedures import ProceduralSource
from mirix_site.common.ids import row_id
from skills.lifecycle import PROVEN_STATUSES
from skills.models import Skill

PREFIX = "skill-"


def _item(hit: Any) -> dict[str, Any]:
    from skills.services.skills import skill_confidence

    skill = hit.row
    candidate = hit.candidate
    steps = [line for line in skill.instructions.splitlines() if line.strip()]
    return {
        "id": f"{PREFIX}{skill.pk}",
        "memory_type": "procedural",
        "entry_type": "skill",
        "summary": skill.description,
        "steps": steps,
        "name": skill.name,
        "skill_id": str(skill.pk),
        "version": skill.version,
        "status": skill.status,
        "confidence": skill_confidence(skill),
        "triggers": skill.triggers,
        "pitfalls": skill.pitfalls,
        "filter_tags": {},
        "turn_tags": [],
        "source_message_ids": [],
        "created_at": skill.created_at.isoformat(),
        "updated_at": skill.updated_at.isoformat(),
        "score": candidate.score,
        "ranks": {"bm25": candidate.bm25_rank, "embedding": candidate.vector_rank},
        "similarity": candidate.similarity,
        "gate": candidate.gate,
    }


def _find(tenant: Tenant, end_user: EndUser, query: str, limit: int) -> list[dict[str, Any]]:
    from skills.services.retrieval import skills_retrieve

    found = skills_retrieve(
        tenant=tenant,
        end_user=end_user,
        task=query,
        limit=limit,
        statuses=PROVEN_STATUSES,
        # Part of the conversation's retrieval, which writes the one log row.
        log=False,
    )
    return [_item(hit) for hit in found.hits]


def _delete(tenant: Tenant, end_user: EndUser, item_id: str) -> bool:
    from skills.services.skills import SkillReadOnlyError, skill_delete

    pk = row_id(item_id.removeprefix(PREFIX))
    if pk is None:
        return False
    skill = Skill.objects.readable_by(tenant, end_user=end_user).filter(pk=pk).first()
    if skill is None or skill.status == Skill.Status.DELETED:
        return False
    try:
        skill_delete(tenant=tenant, skill=skill)
    except SkillReadOnlyError:
        return False  # another client's: read-only, answered as if missing
    return True


SKILL_PROCEDURES = ProceduralSource(prefix=PREFIX, find=_find, delete=_delete)
