"""What the LLM extractor tells the model: the instructions, and the batch of turns to read."""

from __future__ import annotations

from memory.extractors.transcript import transcript_line
from sessions.models import Message

EXTRACTION_SYSTEM = """You maintain the long-term memory of an AI assistant about one user.
From the new conversation turns, propose memories of six kinds:
- core: short lasting facts about the user (label "human") or how the assistant should behave
  ("persona"); "append" adds a line, "replace" rewrites the block.
- episodic: events with who did what and when ("summary" one sentence, "details" the specifics).
- semantic: facts and concepts independent of time (people, places, preferences, knowledge).
- procedural: how-to knowledge as ordered steps (workflows that worked, fixes for errors).
- resource: documents, files, links, code or images the user shared or worked with.
- knowledge_vault: sensitive values (credentials, account numbers, contact details), with a
  caption that does not repeat the value.
Cite for every memory the ids of the turns it comes from (the numbers in [brackets]).
Propose nothing that the turns do not support; leave a list empty when nothing fits.
Never copy a secret value anywhere except knowledge_vault.secret_value."""


def extraction_system(agent_prompts: dict[str, str]) -> str:
    """The instructions, and after them what the client told its agents (the meta agent's and
    each component's system prompt, by MIRIX agent type: its configuration's
    ``system_prompts`` or ``PATCH /agents/.../system``), as the application's own guidance."""
    given = {agent: text.strip() for agent, text in agent_prompts.items() if text.strip()}
    if not given:
        return EXTRACTION_SYSTEM
    lines = [f"[{agent}]\n{text}" for agent, text in sorted(given.items())]
    return (
        EXTRACTION_SYSTEM
        + "\n\nThe application's instructions for its memory agents follow; apply each to the "
        "memories of its kind (meta_memory_agent: to all), within the rules above:\n\n"
        + "\n\n".join(lines)
    )


def extraction_prompt(messages: list[Message]) -> str:
    lines = []
    for message in messages:
        when = message.occurred_at.isoformat(timespec="minutes")
        lines.append(f"[{message.pk}] ({when}) {transcript_line(message)}")
    return "New conversation turns:\n" + "\n".join(lines)
