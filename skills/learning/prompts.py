"""What a learning run tells the model: the distiller's and the curator's instructions, and the
JSON shapes they answer in. (The curator's prompt of skills and lessons is built from the
curator's views of them: ``skills.learning.curate.curator_prompt``.)"""

from __future__ import annotations

from typing import Any

# The curator's operations: what the model may answer, what ``curate`` writes.
OPERATIONS = ("create", "edit", "merge", "deprecate", "split", "none")

DISTILL_SYSTEM = (
    "You read an AI agent's task session (its user's request, its tool calls and their "
    "results, the user's reactions) and write down what it teaches for next time, as lessons: "
    "`learn` (what worked, e.g. the fix after a tool error) or `avoid` (what failed or the user "
    "rejected). Each lesson: type, title (one line), content (the lesson, self-contained), task "
    "(the kind of request it applies to), action (what to do or not do), evidence (a short "
    "quote from the session), signal (tool_error, user_critique, user_confirmation, "
    "self_correction or inferred), importance and credibility in [0, 1], outcome (success, "
    "failure or partial). When the agent stated how the session went on closing it, that "
    "statement (outcome and note) comes first: take its outcome for the session's, weigh its "
    "note as the agent's own account. Only lessons the session supports; none is a valid "
    "answer."
)

DISTILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"lessons": {"type": "array", "items": {"type": "object"}}},
    "required": ["lessons"],
}


CURATOR_SYSTEM = (
    "You maintain a library of reusable skills an AI agent learned from its work. Given the "
    "agent's existing skills (name: description) and new lessons distilled from its task "
    "sessions, decide which skills to create, edit, merge, deprecate or split, so that each "
    "skill is one reusable procedure: what it does and when to use it (description), task "
    "phrasings it is for (triggers), the steps (instructions, markdown) and what to avoid "
    "(pitfalls). Prefer editing an existing skill to creating a near-duplicate. Every lesson "
    "id must be named by exactly one operation; use `none` for lessons that change no skill. "
    "Names: lowercase letters, digits and single hyphens, at most 64 characters."
)

OPERATIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": list(OPERATIONS)},
                    "skill": {"type": "string"},
                    "sources": {"type": "array", "items": {"type": "string"}},
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "triggers": {"type": "array", "items": {"type": "string"}},
                    "instructions": {"type": "string"},
                    "pitfalls": {"type": "array", "items": {"type": "string"}},
                    "lesson_ids": {"type": "array", "items": {"type": "integer"}},
                    "parts": {"type": "array", "items": {"type": "object"}},
                    "reason": {"type": "string"},
                },
                "required": ["op", "lesson_ids"],
            },
        }
    },
    "required": ["operations"],
}
