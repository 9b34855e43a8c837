"""What the LLM extractor tells the model: the instructions, and the batch of turns to read."""

from __future__ import annotations

from memory.extractors.transcript import transcript_line
from memory.types import MEMORY_TYPES
from sessions.models import Message

EXTRACTION_SYSTEM = (
    "You maintain the long-term memory of an AI assistant about one user.\n"
    "From the new conversation turns, propose memories of six kinds:\n"
    + "".join(
        f"- {name}: {memory_type.description}\n" for name, memory_type in MEMORY_TYPES.items()
    )
    + "Cite for every memory the ids of the turns it comes from (the numbers in [brackets]).\n"
    "Propose nothing that the turns do not support; leave a list empty when nothing fits.\n"
    "Never copy a secret value anywhere except knowledge_vault.secret_value."
)


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
