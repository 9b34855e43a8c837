"""From a conversation's last user turns to a search: topics and a date range.

With an LLM configured, one structured call names the topics and the temporal expression (a
model that reads images, ``LLM_VISION``, is shown the turns' images too and names what they
show); without one (or when that call fails) keyword topics come from ``memory.query.topics``
and the date range from ``memory.query.temporal``. An explicit start or end date from the
caller wins.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from memory.query.temporal import DateRange, temporal_range
from memory.query.topics import topics_extract
from mirix_site.providers.llm import LLMError, PromptImage, llm_provider_from_settings

logger = logging.getLogger(__name__)

LAST_USER_TURNS = 3
# Images shown to a vision model at most: the last ones of the turns read.
MAX_PROMPT_IMAGES = 4
TOPICS_SCHEMA = {
    "type": "object",
    "required": ["topics", "temporal_expression"],
    "properties": {
        "topics": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "temporal_expression": {"type": ["string", "null"]},
    },
}
TOPICS_SYSTEM = (
    "You turn the last turns of a conversation into a memory search. List up to 8 short "
    "topics (names, things, activities) the user is asking or talking about, most important "
    "first, and copy the phrase that says when (e.g. 'last week', 'in March'), or null. "
    "When the user shows images, name what they show (people, places, things, text in them) "
    "among the topics."
)


@dataclass(frozen=True)
class ConversationQuery:
    topics: list[str]
    date_range: DateRange | None
    # The time a phrase pins, read as a search query is (``temporal_range(precise=True)``:
    # not "recently", "lately", a habit's weekday or a plan): the window of a question
    # without topic words ("what did we talk about yesterday?").
    pinned_range: DateRange | None = None


def _with_llm(
    texts: list[str], images: Sequence[PromptImage]
) -> tuple[list[str], str | None] | None:
    provider = llm_provider_from_settings()
    if provider is None:
        return None
    lines = [f"user: {text}" for text in texts]
    if images:
        lines.append(f"user: [showed {len(images)} image(s), attached]")
    try:
        result = provider.structured(
            system=TOPICS_SYSTEM,
            prompt="\n".join(lines),
            schema=TOPICS_SCHEMA,
            schema_name="conversation_topics",
            images=images,
        )
    except LLMError:
        logger.warning("topic extraction by LLM failed; using keyword topics", exc_info=True)
        return None
    topics = [str(topic).strip() for topic in result.data.get("topics") or [] if str(topic).strip()]
    expression = result.data.get("temporal_expression")
    return topics[:8], expression if isinstance(expression, str) and expression.strip() else None


def conversation_reads_images() -> bool:
    """Whether a model is configured that is shown the conversation's images."""
    return settings.LLM_VISION and settings.LLM_PROVIDER != "none"


def conversation_query(
    user_texts: list[str], *, now: datetime, images: Sequence[PromptImage] = ()
) -> ConversationQuery:
    """Topics and date range of the last user turns (oldest first) and, for a model that
    reads them (``conversation_reads_images``), of the turns' images (the last
    ``MAX_PROMPT_IMAGES``)."""
    texts = [text for text in user_texts if text.strip()][-LAST_USER_TURNS:]
    images = list(images)[-MAX_PROMPT_IMAGES:] if conversation_reads_images() else []
    if not texts and not images:
        return ConversationQuery([], None)
    by_llm = _with_llm(texts, images)
    if by_llm is not None:
        topics, expression = by_llm
        # The LLM names the phrase; the parser decides what dates it means.
        date_range = temporal_range(expression, now=now) if expression else None
        pinned = temporal_range(expression, now=now, precise=True) if expression else None
        return ConversationQuery(topics or topics_extract(texts), date_range, pinned)
    joined = " ".join(texts)
    return ConversationQuery(
        topics_extract(texts),
        temporal_range(joined, now=now),
        temporal_range(joined, now=now, precise=True),
    )
