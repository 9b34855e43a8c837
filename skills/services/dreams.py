"""Auto-dream of experiences (``POST /memory/auto_dream`` mode ``experience``): the same attempt
recorded twice becomes one. An experience is an observation that recommend counts, so two
experiences that merely read alike are two observations (nine successes of one action are
evidence, not duplicates); only rows that say the same thing *from the same turns* (the same
``source_message_ids``, or the same source session) are one attempt recorded again, e.g. a
client's retried request. The newest stays current, the others are superseded by it (kept,
read with ``include_superseded``), each change in their history."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import EndUser
from accounts.tenancy import Tenant
from memory.consolidation import text_normalise
from skills.models import Experience
from skills.models.experiences import CURRENT


def _attempt(row: Experience) -> tuple[Any, ...] | None:
    """What makes two experiences one attempt; None for a row with no provenance (never merged)."""
    if not row.source_message_ids and row.source_session_id is None:
        return None
    return (
        text_normalise(row.task),
        row.action_key,
        row.outcome,
        row.score,
        text_normalise(row.reason),
        text_normalise(f"{row.title}\n{row.content}"),
        row.lesson_type,
        json.dumps(row.filter_tags, sort_keys=True),
        tuple(sorted(row.source_message_ids)),
        row.source_session_id,
    )


@transaction.atomic
def experiences_merge(*, tenant: Tenant, end_user: EndUser, dry_run: bool) -> dict[str, int]:
    """Merge the user's current experiences the caller's client recorded twice (the module's
    docstring), the newest ``AUTO_DREAM_MAX_ROWS`` of them, as a dream of memories does (a
    retried request is recorded again soon after, not a million rows later; ``total`` counts
    those compared); ``dry_run``: count them, change nothing."""
    rows = list(
        Experience.objects.owned_by(tenant, end_user=end_user)
        .filter(CURRENT)
        .order_by("-created_at", "-id")[: settings.AUTO_DREAM_MAX_ROWS]
    )
    keepers: dict[tuple[Any, ...], Experience] = {}
    others: dict[int, list[int]] = {}
    for row in rows:
        attempt = _attempt(row)
        if attempt is None:
            continue
        keeper = keepers.setdefault(attempt, row)
        if keeper is not row:
            others.setdefault(keeper.pk, []).append(row.pk)
    if not dry_run:
        now = timezone.now()
        for keeper_id, ids in others.items():
            Experience.objects.filter(pk__in=ids).update(
                superseded_by_id=keeper_id, superseded_at=now, updated_at=now
            )
    superseded = sum(len(ids) for ids in others.values())
    return {
        "total": len(rows),
        "merged": len(others),
        "superseded": superseded,
        "unchanged": len(rows) - len(others) - superseded,
    }
