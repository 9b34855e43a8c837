"""Skills as Agent Skills: a ``SKILL.md`` per skill (YAML front matter ``name``,
``description`` and string ``metadata``; the instructions as the body), a zip of
``<name>/SKILL.md`` folders, and the discovery index (``index.json``, schema 0.2.0) naming
each SKILL.md with the digest of its exact bytes. Pure: rows in, bytes out.

The front matter's strings are written double-quoted with JSON's escapes, which YAML reads
alike (the specification's reference validator parses it with strictyaml)."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Sequence

from skills.content import SkillContent
from skills.models import Skill

DISCOVERY_SCHEMA = "https://schemas.agentskills.io/discovery/0.2.0/schema.json"


def _quoted(text: str) -> str:
    return json.dumps(" ".join(text.split()), ensure_ascii=False)


def skill_md(skill: Skill, *, confidence: float) -> str:
    """The skill's SKILL.md."""
    content = SkillContent.of(skill)
    metadata = {
        "version": str(skill.version),
        "confidence": f"{confidence:.4f}",
        "status": skill.status,
        "successes": str(skill.successes),
        "failures": str(skill.failures),
    }
    lines = [
        "---",
        f"name: {_quoted(content.name)}",
        f"description: {_quoted(content.description)}",
        "metadata:",
        *(f"  {key}: {_quoted(value)}" for key, value in metadata.items()),
        "---",
        "",
        content.body().rstrip(),
        "",
    ]
    return "\n".join(lines)


def skills_zip(skills: Sequence[Skill], *, confidence: Callable[[Skill], float]) -> bytes:
    """A zip of ``<name>/SKILL.md`` for each skill."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for skill in skills:
            info = zipfile.ZipInfo(f"{skill.name}/SKILL.md", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, skill_md(skill, confidence=confidence(skill)))
    return buffer.getvalue()


def discovery_index(
    skills: Sequence[Skill],
    *,
    confidence: Callable[[Skill], float],
    url: Callable[[Skill], str],
) -> dict[str, object]:
    """The skills as an Agent Skills discovery index."""
    entries = []
    for skill in skills:
        body = skill_md(skill, confidence=confidence(skill)).encode()
        entries.append(
            {
                "name": skill.name,
                "type": "skill-md",
                "description": skill.description,
                "url": url(skill),
                "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                "version": str(skill.version),
            }
        )
    return {"$schema": DISCOVERY_SCHEMA, "skills": entries}
