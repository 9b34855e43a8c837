"""Backfilling skill versions: every skill's text is its newest version's, and its ``version``
counter that version's number (``skill_version_write`` keeps both so). A skill whose row was
written or changed around that service (a raw SQL update, a row inserted by hand or by old
code) breaks them:

- its text matches no version (it has none, or the newest holds other text): the text is
  written as its next version (author ``import``, operation ``backfill``), diffed from the
  newest version (or from nothing), through ``skill_version_write``;
- its counter is not its newest version's number: the counter takes that number (a counter
  behind its versions made the next edit collide with the version it would number).

A version itself is never changed (the trigger of migration ``skills/0005`` refuses it): one
whose author is none the model knows, or whose diff is not the diff of its snapshot from the
one before, is reported and left as it is. The table has no content hash to fill in.
Idempotent: a second pass finds nothing to write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.db import transaction

from skills.content import SkillContent, content_diff
from skills.models import Skill, SkillVersion
from skills.services.skills import Provenance, skill_version_write


@dataclass
class VersionsBackfill:
    """What a backfill found (and, unless a dry run, wrote)."""

    skills: int = 0
    versions_written: int = 0
    counters_set: int = 0
    # Skills and versions left as they are, one line each saying why.
    left: list[str] = field(default_factory=list)


def _skill_ids(batch: int) -> Iterator[list[int]]:
    last = 0
    while ids := list(
        Skill.objects.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:batch]
    ):
        yield ids
        last = ids[-1]


def _versions_check(skill: Skill, versions: list[SkillVersion], found: VersionsBackfill) -> None:
    authors = set(SkillVersion.Author.values)
    previous: SkillContent | None = None
    for version in versions:
        content = SkillContent.from_snapshot(version.snapshot)
        where = f"skill {skill.pk} ({skill.name}) version {version.number}"
        if version.author not in authors:
            found.left.append(f"{where}: author {version.author!r} is none known (immutable)")
        expected = content_diff(previous, content, numbers=(version.number - 1, version.number))
        if version.diff != expected:
            found.left.append(f"{where}: its diff is not that of its text (immutable)")
        previous = content


@transaction.atomic
def _skill_backfill(skill_id: int, *, dry_run: bool, found: VersionsBackfill) -> None:
    skill = Skill.objects.select_for_update().get(pk=skill_id)
    versions = list(SkillVersion.objects.filter(skill=skill).order_by("number"))
    _versions_check(skill, versions, found)
    newest = SkillContent.from_snapshot(versions[-1].snapshot) if versions else None
    number = versions[-1].number if versions else 0
    if skill.version != number:
        found.counters_set += 1
        if not dry_run:
            skill.version = number
            skill.save(update_fields=["version", "updated_at"])
    current = SkillContent.of(skill)
    if current == newest:
        return
    errors = current.redacted().errors()
    if errors:
        found.left.append(
            f"skill {skill.pk} ({skill.name}): its text breaks the rules "
            f"({', '.join(sorted(errors))}); no version written"
        )
        return
    found.versions_written += 1
    if dry_run:
        return
    skill_version_write(
        owner=skill.owner_ids,
        skill=skill,
        content=current,
        provenance=Provenance(
            author=SkillVersion.Author.IMPORT,
            operation="backfill",
            note="The skill's text, which no version held, recorded by backfill_skill_versions.",
        ),
        diff_from=newest,
    )


def skill_versions_backfill(
    *,
    dry_run: bool,
    batch: int = 500,
    on_progress: Callable[[int], None] | None = None,
) -> VersionsBackfill:
    """Write the versions and counters every skill lacks (see the module), one skill per
    transaction; ``dry_run``: count them and change nothing. ``on_progress`` is told how many
    skills were read after each batch."""
    found = VersionsBackfill()
    for ids in _skill_ids(batch):
        for skill_id in ids:
            _skill_backfill(skill_id, dry_run=dry_run, found=found)
        found.skills += len(ids)
        if on_progress is not None:
            on_progress(found.skills)
    return found
