"""A skill's text and its rules, with no database: what every version snapshots
(``SkillContent``), the Agent Skills limits it is held to, how it is quoted, diffed and how
much of it an edit rewrote."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mirix_site.common.text import clipped
from sessions.sensitive import sensitive_redacted

if TYPE_CHECKING:
    from skills.models import Skill

NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_TRIGGERS = 100
MAX_PITFALLS = 50
# An exported SKILL.md stays under 500 lines: its front matter and headings need some.
MAX_INSTRUCTION_LINES = 450
MAX_INSTRUCTION_CHARS = 40_000
# An edit rewriting more than this share of a skill's text is flagged for review.
REWRITE_REVIEW_SHARE = 0.4
# What a skill quotes from the sessions it was learned from (a user's request, a tool's output)
# is data for the agent that loads it, never an instruction: one line in double quotes,
# escaped as JSON, at most this many characters.
MAX_QUOTED_CHARS = 200


def quoted(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """``text`` as a skill quotes it: on one line, clipped, in double quotes, escaped."""
    return json.dumps(clipped(" ".join(text.split()), limit), ensure_ascii=False)


@dataclass(frozen=True)
class SkillContent:
    """A skill's text: what every version snapshots."""

    name: str
    description: str
    triggers: tuple[str, ...] = ()
    instructions: str = ""
    pitfalls: tuple[str, ...] = ()

    @classmethod
    def of(cls, skill: Skill) -> SkillContent:
        return cls(
            name=skill.name,
            description=skill.description,
            triggers=tuple(skill.triggers),
            instructions=skill.instructions,
            pitfalls=tuple(skill.pitfalls),
        )

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> SkillContent:
        return cls(
            name=snapshot["name"],
            description=snapshot["description"],
            triggers=tuple(snapshot.get("triggers", ())),
            instructions=snapshot.get("instructions", ""),
            pitfalls=tuple(snapshot.get("pitfalls", ())),
        )

    def snapshot(self) -> dict[str, Any]:
        values = asdict(self)
        return {**values, "triggers": list(self.triggers), "pitfalls": list(self.pitfalls)}

    def errors(self) -> dict[str, list[str]]:
        """What breaks the rules, by field (empty: none)."""
        errors: dict[str, list[str]] = {}
        if not 1 <= len(self.name) <= MAX_NAME_CHARS or not NAME_PATTERN.match(self.name):
            errors["name"] = [
                f"1 to {MAX_NAME_CHARS} lowercase letters, digits and single hyphens, "
                "not starting or ending with a hyphen."
            ]
        if not self.description.strip() or len(self.description) > MAX_DESCRIPTION_CHARS:
            errors["description"] = [f"1 to {MAX_DESCRIPTION_CHARS} characters."]
        if len(self.triggers) > MAX_TRIGGERS or any(not t.strip() for t in self.triggers):
            errors["triggers"] = [f"At most {MAX_TRIGGERS} phrasings, none empty."]
        if len(self.pitfalls) > MAX_PITFALLS or any(not p.strip() for p in self.pitfalls):
            errors["pitfalls"] = [f"At most {MAX_PITFALLS} pitfalls, none empty."]
        if (
            len(self.instructions) > MAX_INSTRUCTION_CHARS
            or self.instructions.count("\n") >= MAX_INSTRUCTION_LINES
        ):
            errors["instructions"] = [
                f"At most {MAX_INSTRUCTION_LINES} lines and {MAX_INSTRUCTION_CHARS} characters."
            ]
        return errors

    def body(self) -> str:
        """The skill as the markdown body of its SKILL.md: the instructions, then when to use
        it and what to avoid."""
        parts = [self.instructions.strip()] if self.instructions.strip() else []
        if self.triggers:
            # The requests it was learned from, quoted: the words of whoever sent them.
            parts.append("## When to use\n" + "\n".join(f"- {quoted(t)}" for t in self.triggers))
        if self.pitfalls:
            parts.append("## Pitfalls\n" + "\n".join(f"- {p}" for p in self.pitfalls))
        return "\n\n".join(parts) + "\n"

    def redacted(self) -> SkillContent:
        """The content with every sensitive value replaced by its kind's placeholder
        (``sessions.sensitive``): what every version stores, whoever wrote it. A name holds
        none (lowercase letters, digits and hyphens)."""
        return SkillContent(
            name=self.name,
            description=sensitive_redacted(self.description),
            triggers=tuple(sensitive_redacted(trigger) for trigger in self.triggers),
            instructions=sensitive_redacted(self.instructions),
            pitfalls=tuple(sensitive_redacted(pitfall) for pitfall in self.pitfalls),
        )

    def text(self) -> str:
        """Everything a version's diff compares, one line per line of text."""
        return f"name: {self.name}\ndescription: {self.description}\n\n{self.body()}"


def content_diff(
    before: SkillContent | None, after: SkillContent, *, numbers: tuple[int, int]
) -> str:
    """A unified diff of the two versions' text (from nothing for a first version)."""
    old = before.text().splitlines(keepends=True) if before is not None else []
    return "".join(
        difflib.unified_diff(
            old,
            after.text().splitlines(keepends=True),
            fromfile=f"v{numbers[0]}",
            tofile=f"v{numbers[1]}",
        )
    )


def content_diff_table(
    before: SkillContent, after: SkillContent, *, numbers: tuple[int, int]
) -> str:
    """The two versions' text side by side, changed lines marked: an HTML table (difflib's,
    which escapes the text), for the admin."""
    return difflib.HtmlDiff(wrapcolumn=72).make_table(
        before.text().splitlines(),
        after.text().splitlines(),
        fromdesc=f"version {numbers[0]}",
        todesc=f"version {numbers[1]}",
    )


def rewrite_share(before: SkillContent, after: SkillContent) -> float:
    """How much of the skill an edit rewrote: the share of its old lines (name, description and
    each non-blank line of its SKILL.md body) that the new text does not keep, from 0 (all
    kept, whatever was added) to 1 (none)."""
    old = [line for line in before.text().splitlines() if line.strip()]
    new = [line for line in after.text().splitlines() if line.strip()]
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    return 1.0 - kept / len(old) if old else 0.0
