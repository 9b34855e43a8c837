"""How a message reads as one line of a transcript: in an episode's details, and in the prompt
the LLM extractor sends. Who spoke is the message's ``name``, else a leading ``"<name>: "`` of
its text (clients that send every turn as role ``user`` name the speaker that way), else its
role."""

from __future__ import annotations

import re

from sessions.models import Message

# "Caroline: ...", "Dr. Li Wen: ...", "user: ...": one to three capitalised words, or a role.
_NAMED = re.compile(
    r"^[ \t]*((?:[A-Z][\w.'-]{0,30})(?: [A-Z][\w.'-]{0,30}){0,2}|user|assistant):[ \t]+(?=\S)"
)
# Labels that open a line the way a name does, and are not one.
NOT_SPEAKERS = frozenset(
    {
        "Note",
        "Re",
        "Fwd",
        "Fw",
        "Subject",
        "Warning",
        "Error",
        "Edit",
        "Update",
        "Todo",
        "TODO",
        "Tip",
        "Hint",
        "Important",
        "Example",
        "Summary",
        "Title",
        "Date",
        "Time",
        "Reminder",
        "PS",
        "P.S.",
        "NB",
        "FYI",
        "Http",
        "Https",
    }
)


def _named_prefix(message: Message) -> re.Match[str] | None:
    if message.name or message.role not in (Message.Role.USER, Message.Role.ASSISTANT):
        return None
    found = _NAMED.match(message.text)
    if found is None or found.group(1) in NOT_SPEAKERS or any(c.isdigit() for c in found.group(1)):
        return None
    return found


def speaker(message: Message) -> str:
    """The name the message was sent under (``name``, else a leading ``"<name>: "``), else its
    role."""
    if message.name:
        return message.name
    found = _named_prefix(message)
    return found.group(1) if found is not None else message.role


def spoken_text(message: Message) -> str:
    """The message's text without the leading ``"<name>: "`` that named its speaker."""
    found = _named_prefix(message)
    return message.text[found.end() :] if found is not None else message.text


def transcript_line(message: Message) -> str:
    """Who spoke and what they said, with the tools they called."""
    text = spoken_text(message)
    if message.tool_calls:
        calls = ", ".join(
            str((call.get("function") or {}).get("name")) for call in message.tool_calls
        )
        text = f"{text} [calls {calls}]".strip()
    if message.role == Message.Role.TOOL and message.name:
        return f"tool {message.name}: {text}"
    return f"{speaker(message)}: {text}"
