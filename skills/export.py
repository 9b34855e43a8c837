"""Skills as Agent Skills: a ``SKILL.md`` per skill (YAML front matter ``name``,
``description`` and string ``metadata``; the instructions as the body), a zip of
``<name>/SKILL.md`` folders, and the discovery index (``index.json``, schema 0.2.0) naming
each SKILL.md with the digest of its exact bytes; and a SKILL.md read back into a skill's
content (``skill_md_read``, the writer's inverse). Pure: rows in, bytes out, and back.

The front matter's strings are written double-quoted with JSON's escapes, which YAML reads
alike (the specification's reference validator parses it with strictyaml)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import yaml

from skills.content import SkillContent
from skills.models import Skill

DISCOVERY_SCHEMA = "https://schemas.agentskills.io/discovery/0.2.0/schema.json"
WHEN_TO_USE = "## When to use"
PITFALLS = "## Pitfalls"
# The front matter: from a first line "---" to the next line "---" (the writer's strings are
# each on one line, so no such line is inside one).
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^---[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)


def one_line(text: str) -> str:
    """``text`` as its SKILL.md's front matter (and the discovery index) hold it: one line."""
    return " ".join(text.split())


def _quoted(text: str) -> str:
    return json.dumps(one_line(text), ensure_ascii=False)


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
                # As its SKILL.md's front matter says it (the discovery RFC: it SHOULD match).
                "description": one_line(skill.description),
                "url": url(skill),
                "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                "version": str(skill.version),
            }
        )
    return {"$schema": DISCOVERY_SCHEMA, "skills": entries}


class SkillMarkdownError(ValueError):
    """A SKILL.md that cannot be read as a skill: one sentence saying why."""


@dataclass(frozen=True)
class SkillMarkdown:
    """A SKILL.md read back: the skill's content and its front matter's ``metadata``."""

    content: SkillContent
    metadata: dict[str, str]


def _listed(text: str, heading: str) -> tuple[str, list[str]] | None:
    """(the text before, the items) when ``text`` ends with ``heading`` and a list of ``- ``
    items (a line not starting one continues the item before it); else None. A blank line or a
    heading after the list's first item ends it: then it is not the closing section (the
    instructions' own, which stays theirs)."""
    marker = heading + "\n"
    if text.startswith(marker):
        start, before = len(marker), ""
    else:
        at = text.rfind("\n" + marker)
        if at < 0:
            return None
        start, before = at + 1 + len(marker), text[:at]
    lines = text[start:].split("\n")
    if not lines[0].startswith("- "):
        return None
    items: list[str] = []
    for line in lines:
        if line.startswith("- "):
            items.append(line[2:])
        elif not line.strip() or line.startswith("#"):
            return None
        else:
            items[-1] += "\n" + line
    return before.rstrip(), [item.rstrip() for item in items]


def _triggers_read(items: list[str]) -> list[str] | None:
    """The phrasings a "When to use" list quotes (``skills.content.quoted``), or None when it
    is not such a list (a SKILL.md written elsewhere: its section stays in the instructions)."""
    phrasings = []
    for item in items:
        try:
            phrasing = json.loads(item) if item.startswith('"') and "\n" not in item else None
        except ValueError:
            return None
        if not isinstance(phrasing, str):
            return None
        phrasings.append(phrasing)
    return phrasings


def _body_read(body: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(instructions, triggers, pitfalls) of a SKILL.md body, the inverse of
    ``SkillContent.body``: a closing "Pitfalls" list, before it a "When to use" list of
    quoted phrasings, before them the instructions."""
    text = body.strip()
    triggers: list[str] = []
    pitfalls: list[str] = []
    found = _listed(text, PITFALLS)
    if found is not None:
        text, pitfalls = found
    found = _listed(text, WHEN_TO_USE)
    if found is not None and (phrasings := _triggers_read(found[1])) is not None:
        text, triggers = found[0], phrasings
    return text.strip(), tuple(triggers), tuple(pitfalls)


def skill_md_read(text: str) -> SkillMarkdown:
    """The skill a SKILL.md describes, the inverse of ``skill_md``: its front matter's
    ``name``, ``description`` and ``metadata``, its body's instructions, the phrasings its
    "When to use" quotes and its pitfalls. Raises SkillMarkdownError. The content is not
    checked against the rules here (``SkillContent.errors``) nor redacted."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise SkillMarkdownError("It does not open with YAML front matter between --- lines.")
    try:
        front = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        raise SkillMarkdownError("Its front matter is not valid YAML.") from None
    if not isinstance(front, dict):
        raise SkillMarkdownError("Its front matter is not a mapping of fields.")
    for field in ("name", "description"):
        if not isinstance(front.get(field), str) or not front[field].strip():
            raise SkillMarkdownError(f"Its front matter has no {field} (a string).")
    metadata = front.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise SkillMarkdownError("Its front matter's metadata is not a mapping.")
    instructions, triggers, pitfalls = _body_read(text[match.end() :])
    return SkillMarkdown(
        content=SkillContent(
            name=front["name"].strip(),
            description=front["description"].strip(),
            triggers=triggers,
            instructions=instructions,
            pitfalls=pitfalls,
        ),
        metadata={str(key): str(value) for key, value in metadata.items()},
    )


def skill_md_same(first: SkillContent, second: SkillContent) -> bool:
    """Whether the two contents' SKILL.md say the same (the one is the other read back)."""

    def said(content: SkillContent) -> tuple[str, str, str]:
        return (content.name, one_line(content.description), content.body().strip())

    return said(first) == said(second)
