"""A finished transcript read as one experience: the task the user asked for, the action the
assistant took, and (when the user's last word says so) how it went.

Deterministic: the task is the user's first request, the action the assistant's last answer
(its first sentence, and the tools it called), the outcome what the user's closing turn
confirms or rejects. A caller's own outcome always wins over this reading; with neither, the
transcript is refused rather than assumed a success.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mirix_site.common.errors import InvalidInputError
from mirix_site.common.text import clipped
from sessions.content import MessageInput
from sessions.sensitive import turns_redacted
from skills.models import Outcome

MAX_TASK_CHARS = 300
MAX_ACTION_CHARS = 300

# Whole words only; a rejection wins over a thanks in the same turn ("thanks, but it still
# fails"), and "partly" over both.
_PARTIAL = re.compile(r"\b(partly|partially|mostly works|almost|half of|some of it)\b", re.I)
_REJECTED = re.compile(
    r"\b(still (fails|failing|broken|crashes|errors?)|(doesn't|does not|didn't|did not|"
    r"won't|isn't|is not) work|not working|no luck|broke|broken|wrong|failed|fails|"
    r"same error|worse)\b",
    re.I,
)
_CONFIRMED = re.compile(
    r"\b(works|worked|working now|fixed|solved|perfect|great|thanks|thank you|that did it|"
    r"all good|passes|passed|resolved|exactly)\b",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


@dataclass(frozen=True)
class Draft:
    task: str
    action: str
    outcome: str | None  # None: the transcript does not say


class TranscriptError(InvalidInputError):
    """The transcript holds no task or no action to learn from (says which, of ``messages``)."""

    def __init__(self, message: str) -> None:
        super().__init__({"messages": [message]})


def first_sentence(text: str, limit: int) -> str:
    """The text's first sentence (or line), cut to ``limit`` characters."""
    return clipped(_SENTENCE_END.split(text.strip(), maxsplit=1)[0], limit)


def verdict_read(text: str) -> str | None:
    """The outcome a user's turn states (partly / rejected / confirmed), or None."""
    if _PARTIAL.search(text):
        return Outcome.PARTIAL
    if _REJECTED.search(text):
        return Outcome.FAILURE
    if _CONFIRMED.search(text):
        return Outcome.SUCCESS
    return None


def transcript_distill(messages: Sequence[MessageInput]) -> Draft:
    """The task, action and outcome a transcript records, read from its turns redacted."""
    messages = [
        replace(message, text=text, tool_calls=tool_calls)
        for message, (text, tool_calls) in zip(messages, turns_redacted(messages), strict=True)
    ]
    users = [index for index, message in enumerate(messages) if message.role == "user"]
    if not any(messages[index].text.strip() for index in users):
        raise TranscriptError("The transcript has no user turn with text to take the task from.")
    task = first_sentence(
        next(m.text for m in messages if m.role == "user" and m.text.strip()), MAX_TASK_CHARS
    )
    answers = [
        index
        for index, message in enumerate(messages)
        if message.role == "assistant" and (message.text.strip() or message.tool_calls)
    ]
    if not answers:
        raise TranscriptError("The transcript has no assistant turn to take the action from.")
    last = answers[-1]
    # The answer that closes the work: the last one with text, else the last tool calls.
    spoken = [index for index in answers if messages[index].text.strip()]
    action = first_sentence(messages[spoken[-1]].text, MAX_ACTION_CHARS) if spoken else ""
    tools = sorted(
        {
            str((call.get("function") or {}).get("name") or call.get("name") or "")
            for index in answers
            for call in messages[index].tool_calls or []
        }
        - {""}
    )
    if tools:
        called = f"called {', '.join(tools)}"
        action = f"{action} ({called})" if action else called
    closing = [
        messages[index].text for index in users if index > last and messages[index].text.strip()
    ]
    return Draft(task=task, action=action, outcome=verdict_read(closing[-1]) if closing else None)
