"""Redacting what was learned before the detector knew a form (``sessions.sensitive``):
experiences and lessons, recommendations, the phrasings actions are grouped by, and skills —
every version of them, in place, then a new version authored ``redaction`` that says so.

A skill's versions are immutable (a database trigger refuses updates); a redaction is the one
change made to them (their text, nothing else), which the trigger lets through while the
transaction says so (``skills.redacting``, migration ``skills/0010``). A redacted version's diff
is recomputed from its redacted neighbour, so that no diff keeps the old text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import connection, models, transaction

from mirix_site.search.index import documents_reindex
from sessions.sensitive import sensitive_redacted, sensitive_redacted_json
from skills.content import SkillContent, content_diff
from skills.models import ActionPhrase, Experience, Recommendation, Skill, SkillVersion
from skills.search import EXPERIENCE_KIND
from skills.services.experiences import experience_redacted
from skills.services.skills import Provenance, skill_version_write

_EXPERIENCE_FIELDS = (
    "task",
    "action",
    "action_key",
    "reason",
    "title",
    "content",
    "evidence",
    "pool_reason",
    "context",
    "filter_tags",
)


def _rows(queryset: models.QuerySet, batch: int) -> Iterator[list[Any]]:
    last = 0
    while rows := list(queryset.filter(pk__gt=last).order_by("pk")[:batch]):
        yield rows
        last = rows[-1].pk


@transaction.atomic
def _experiences_batch(rows: list[Experience], *, dry_run: bool) -> int:
    changed = []
    for row in rows:
        before = {name: getattr(row, name) for name in _EXPERIENCE_FIELDS}
        experience_redacted(row)
        names = [name for name in _EXPERIENCE_FIELDS if getattr(row, name) != before[name]]
        if names:
            changed.append(row)
            if not dry_run:
                row.save(update_fields=[*names, "updated_at"])
    if changed and not dry_run:
        ids = [row.pk for row in changed]
        documents_reindex(documents=[(EXPERIENCE_KIND, row) for row in changed], embedders=[])
        # Embedded again from the redacted text by the worker's sweep
        # (``experiences_unembedded``), which also groups their actions' phrasings again.
        EXPERIENCE_KIND.embedding_model.objects.filter(experience_id__in=ids).delete()
    return len(changed)


@transaction.atomic
def _recommendations_batch(rows: list[Recommendation], *, dry_run: bool) -> int:
    changed = 0
    for row in rows:
        fields = {
            "task": sensitive_redacted(row.task),
            "action": sensitive_redacted(row.action),
            "action_key": sensitive_redacted(row.action_key),
            "runners_up": sensitive_redacted_json(row.runners_up),
        }
        names = [name for name, value in fields.items() if getattr(row, name) != value]
        if names:
            changed += 1
            if not dry_run:
                for name in names:
                    setattr(row, name, fields[name])
                row.save(update_fields=names)
    return changed


def _phrases_redact(*, dry_run: bool, batch: int) -> int:
    """Phrasings whose key held a value go: the experiences they grouped have new keys, and
    get phrasings again when the worker embeds them."""
    stale = [
        phrase.pk
        for rows in _rows(ActionPhrase.objects.only("id", "key", "group_key"), batch)
        for phrase in rows
        if sensitive_redacted(phrase.key) != phrase.key
        or sensitive_redacted(phrase.group_key) != phrase.group_key
    ]
    if stale and not dry_run:
        ActionPhrase.objects.filter(pk__in=stale).delete()
    return len(stale)


def _versions_redact(skill: Skill) -> int:
    """Redact the skill's versions in place (the trigger is off: see the module); returns how
    many held a value."""
    versions = list(SkillVersion.objects.filter(skill=skill).order_by("number"))
    changed = 0
    previous: SkillContent | None = None
    for version in versions:
        content = SkillContent.from_snapshot(version.snapshot).redacted()
        snapshot = content.snapshot()
        diff = content_diff(previous, content, numbers=(version.number - 1, version.number))
        note = sensitive_redacted(version.note)
        if (snapshot, diff, note) != (version.snapshot, version.diff, version.note):
            changed += 1
            SkillVersion.objects.filter(pk=version.pk).update(
                snapshot=snapshot, diff=diff, note=note
            )
        previous = content
    return changed


@transaction.atomic
def _skill_redact(skill: Skill, *, dry_run: bool) -> bool:
    current = SkillContent.of(skill)
    redacted = current.redacted()
    held = redacted != current or any(
        SkillContent.from_snapshot(snapshot).redacted().snapshot() != snapshot
        or sensitive_redacted(diff) != diff
        for snapshot, diff in SkillVersion.objects.filter(skill=skill).values_list(
            "snapshot", "diff"
        )
    )
    described = sensitive_redacted_json(skill.tool_descriptions)
    held = held or described != skill.tool_descriptions
    if not held or dry_run:
        return held
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('skills.redacting', 'on', true)")
        try:
            versions = _versions_redact(skill)
        finally:
            cursor.execute("SELECT set_config('skills.redacting', 'off', true)")
    # The row takes the redacted text first, so that the version recording the redaction has
    # an empty diff rather than one quoting what it removed.
    skill.name, skill.description = redacted.name, redacted.description
    skill.triggers, skill.instructions = list(redacted.triggers), redacted.instructions
    skill.pitfalls, skill.tool_descriptions = list(redacted.pitfalls), described
    skill.review_reason = sensitive_redacted(skill.review_reason)
    skill.save()
    skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=redacted,
        provenance=Provenance(
            author=SkillVersion.Author.REDACTION,
            operation="redact",
            note=f"Sensitive values redacted from the skill and {versions} of its versions.",
        ),
        embedders=[],
    )
    return True


def learned_redact_stored(*, dry_run: bool, batch: int = 500) -> dict[str, int]:
    """Redact everything learned and stored: returns how many rows of each held a sensitive
    value (and were changed, unless ``dry_run``)."""
    return {
        "experiences": sum(
            _experiences_batch(rows, dry_run=dry_run) for rows in _rows(Experience.objects, batch)
        ),
        "recommendations": sum(
            _recommendations_batch(rows, dry_run=dry_run)
            for rows in _rows(Recommendation.objects, batch)
        ),
        "action phrasings": _phrases_redact(dry_run=dry_run, batch=batch),
        "skills": sum(
            _skill_redact(skill, dry_run=dry_run)
            for rows in _rows(Skill.objects, batch)
            for skill in rows
        ),
    }
