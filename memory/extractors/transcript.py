"""How a message reads as one line of a transcript: in an episode's details, and in the prompt
the LLM extractor sends."""

from __future__ import annotations

from sessions.models import Message


def speaker(message: Message) -> str:
    """The name the message was sent under, else its role."""
    return message.name or message.role


def transcript_line(message: Message) -> str:
    """Who spoke and what they said, with the tools they called."""
    text = message.text
    if message.tool_calls:
        calls = ", ".join(
            str((call.get("function") or {}).get("name")) for call in message.tool_calls
        )
        text = f"{text} [calls {calls}]".strip()
    if message.role == Message.Role.TOOL and message.name:
        return f"tool {message.name}: {text}"
    return f"{speaker(message)}: {text}"
