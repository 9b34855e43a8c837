"""The deterministic extractor: no LLM, only what the text shows.

Episodic events per exchange (who said what, when, in reply to what), plus the links, files,
images and sensitive values it can recognize, and the facts a user states about themselves and
their people (``memory.extractors.facts``) as semantic memories and lines of the ``human``
block. Its episode text is what the retrieval benchmarks
(bench/RESULTS.md) search, so a change to it shows there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from memory.extractors.facts import fact_summary, fact_title, facts_extract
from memory.extractors.proposals import ExtractionOutcome, Proposal
from memory.extractors.transcript import speaker, spoken_text, transcript_line
from memory.tags import same_scope
from mirix_site.common.text import clipped
from sessions.models import Message
from sessions.sensitive import EMAIL, KINDS, sensitive_redacted, sensitive_values

SUMMARY_CHARS = 300
# A fact's value as SemanticMemory.value keeps it (memory.types).
FACT_VALUE_CHARS = 500
# An episode carries the end of the turn it answers, up to this many characters (see _context).
CONTEXT_CHARS = 200


# --- What the deterministic extractor recognizes -----------------------------------------------

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+", re.IGNORECASE)
_FILE = re.compile(
    r"(?<![\w/.@-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:pdf|docx?|xlsx?|pptx?|csv|tsv|txt|md|rst|py|js|ts|"
    r"tsx|jsx|go|rs|java|rb|php|c|cpp|h|sql|json|ya?ml|toml|ini|cfg|log|html|css|ipynb|png|jpe?g|"
    r"gif|svg|webp|zip|tar|gz|mp3|mp4|wav))\b",
    re.IGNORECASE,
)


def _redact(text: str) -> str:
    # Only before cutting text short (clipped, _sentence_around), which could leave part of a
    # value that is no longer recognized; whole fields are redacted with the rest of the
    # proposal, whichever extractor made it (``proposal_redacted``).
    return sensitive_redacted(text)


def _sentence_around(text: str, needle: str) -> str:
    start = text.find(needle)
    if start < 0:
        return clipped(text, SUMMARY_CHARS)
    left = max(text.rfind(".", 0, start), text.rfind("\n", 0, start)) + 1
    right_candidates = [i for i in (text.find(". ", start), text.find("\n", start)) if i >= 0]
    right = min(right_candidates) + 1 if right_candidates else len(text)
    return clipped(text[left:right].strip(), SUMMARY_CHARS)


@dataclass(frozen=True)
class EpisodeBounds:
    """How much one episode may hold (the EPISODE_* settings; see
    ``memory.services.extraction.episode_bounds``). An episode is one vector and one BM25
    document: longer, and the embedder reads only its start (all-MiniLM-L6-v2 reads 256 word
    pieces) while BM25's length normalisation buries the turn that answers among the ones that
    do not."""

    max_turns: int
    max_tokens: int
    # A pause this long ends an episode: a conversation taken up again is another event.
    max_gap: timedelta
    count_tokens: Callable[[str], int]
    # An AI assistant's reply is kept to its beginning, this many characters (0: whole; see
    # _episode_line).
    reply_chars: int


def same_sitting(earlier: Message, later: Message, max_gap: timedelta) -> bool:
    """One session, the same scope tags (their filter tags but those naming one turn:
    ``memory.tags``), and no longer a pause than ``max_gap`` between."""
    return (
        later.session_id == earlier.session_id
        and same_scope(later.filter_tags, earlier.filter_tags)
        and abs(later.occurred_at - earlier.occurred_at) <= max_gap
    )


def exchange_continues(
    opener: Message, previous: Message, message: Message, max_gap: timedelta
) -> bool:
    """Whether ``message`` belongs to the exchange ``opener`` began and ``previous`` last
    added to: the same sitting (see same_sitting), and not what opens the next exchange, that
    is the user's turn after a reply or, where every turn comes as role user, the opener's
    speaker again after someone else spoke."""
    if not (same_sitting(opener, message, max_gap) and same_sitting(previous, message, max_gap)):
        return False
    if message.role != Message.Role.USER:
        return True
    if previous.role != Message.Role.USER:
        return False
    return not (speaker(message) == speaker(opener) != speaker(previous))


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _context(before: Message | None) -> str | None:
    """What an exchange answers: the last sentences (at most CONTEXT_CHARS) of the turn before
    it, where the question or remark it replies to usually is. A reply without it is half an
    event ("Caroline: a sunset, last week"), and a search for what was asked misses it."""
    if before is None or before.role not in (Message.Role.USER, Message.Role.ASSISTANT):
        return None
    text = " ".join(spoken_text(before).split())
    if not text:
        return None
    context = ""
    for sentence in reversed(_SENTENCE_END.split(text)):
        longer = f"{sentence} {context}" if context else sentence
        if context and len(longer) > CONTEXT_CHARS:
            break
        context = longer
    if len(context) > CONTEXT_CHARS:  # the last sentence alone is longer: its end
        context = "…" + context[-(CONTEXT_CHARS - 1) :].lstrip()
    return f"{speaker(before)}: {context}"


def _assistant_reply(message: Message) -> bool:
    """An AI assistant's turn: role assistant under no name of its own, or a turn sent as
    ``"assistant: ..."`` (named participants are people, whatever their role)."""
    if message.role == Message.Role.ASSISTANT:
        return not message.name
    return message.role == Message.Role.USER and speaker(message) == "assistant"


def _episode_line(message: Message, bounds: EpisodeBounds) -> str:
    """The turn as the episode holds it: a transcript line, an AI assistant's reply kept to its
    first ``reply_chars`` (what was asked and what the user said is what a user's questions
    are about; a long reply would outweigh it in both lanes: bench/RESULTS.md)."""
    line = transcript_line(message)
    if not (bounds.reply_chars and _assistant_reply(message)):
        return line
    prefix = f"{speaker(message)}: "
    text = line[len(prefix) :]
    if len(text) <= bounds.reply_chars:
        return line
    head = text[: bounds.reply_chars]
    words = head.rsplit(None, 1)  # cut at the last word that ends within the limit
    return f"{prefix}{words[0] if len(words) == 2 else head} …"


def _context_line(context: str) -> str:
    return f"(replying to {context})"


def _episodes(
    messages: list[Message], bounds: EpisodeBounds, preceding: dict[int, Message]
) -> list[tuple[list[Message], str | None]]:
    """The turns as episodes, each with the turn it replies to (see _context): exchanges (see
    exchange_continues), cut further where one would pass ``bounds``, its context counted (a
    turn longer than them is an episode alone). System turns are left out. ``preceding``: per
    session, the turn before these."""
    episodes: list[tuple[list[Message], str | None]] = []
    last = dict(preceding)
    tokens = 0
    for message in messages:
        if message.role == Message.Role.SYSTEM:
            continue
        cost = bounds.count_tokens(_episode_line(message, bounds))
        current = episodes[-1][0] if episodes else None
        if (
            current is not None
            and exchange_continues(current[0], current[-1], message, bounds.max_gap)
            and len(current) < bounds.max_turns
            and tokens + cost <= bounds.max_tokens
        ):
            current.append(message)
            tokens += cost
        else:
            before = last.get(message.session_id)
            # Only a turn of the same sitting is what this one replies to: the text of turns
            # under other scope tags must not show under these.
            replying = before is not None and same_sitting(before, message, bounds.max_gap)
            context = _context(before) if replying else None
            context_cost = bounds.count_tokens(_context_line(context)) if context else 0
            if cost + context_cost > bounds.max_tokens:  # no room for it beside the turn
                context, context_cost = None, 0
            episodes.append(([message], context))
            tokens = cost + context_cost
        last[message.session_id] = message
    return episodes


def _episodic(
    exchange: list[Message], context: str | None, bounds: EpisodeBounds
) -> Proposal | None:
    lines = [
        _episode_line(message, bounds) for message in exchange if message.text or message.tool_calls
    ]
    if not lines:
        return None
    opener = exchange[0]
    if context is not None:
        lines.insert(0, _context_line(context))
    summary_source = next((message for message in exchange if message.text), opener)
    return Proposal.of_turns(
        "episodic",
        {
            "event_type": "conversation",
            # Redacted before shortening: a value cut in half would no longer be recognized.
            "summary": clipped(
                _redact(f"{speaker(summary_source)}: {spoken_text(summary_source)}"),
                SUMMARY_CHARS,
            ),
            "details": "\n".join(lines),
            "actor": speaker(opener),
        },
        exchange,
    )


def _resources(message: Message) -> list[Proposal]:
    proposals = []
    seen: set[str] = set()
    for found in _URL.findall(message.text):
        url = found.rstrip(".,;:!?")
        if url in seen:
            continue
        seen.add(url)
        parts = urlsplit(url)
        proposals.append(
            Proposal(
                memory_type="resource",
                fields={
                    "title": clipped(f"{parts.netloc}{parts.path}", 200),
                    "summary": _sentence_around(_redact(message.text), url),
                    "content": message.text,
                    "resource_type": "link",
                    "uri": url,
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    text_without_urls = _URL.sub(" ", message.text)
    for path in dict.fromkeys(_FILE.findall(text_without_urls)):
        if EMAIL.search(path):
            continue
        proposals.append(
            Proposal(
                memory_type="resource",
                fields={
                    "title": path,
                    "summary": _sentence_around(_redact(message.text), path),
                    "content": message.text,
                    "resource_type": "file",
                    "uri": "",
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    for part in message.content or []:
        url = (
            (part.get("image_url") or {}).get("url", "") if part.get("type") == "image_url" else ""
        )
        image_id = part.get("image_id", "") if part.get("type") == "image" else ""
        if not (url or image_id):
            continue
        remote = url.startswith(("http://", "https://"))
        proposals.append(
            Proposal(
                memory_type="resource",
                fields={
                    "title": clipped(url, 200) if remote else f"image {image_id[:12] or 'inline'}",
                    "summary": clipped(
                        _redact(f"Image shared by {speaker(message)}. {message.text}"),
                        SUMMARY_CHARS,
                    ),
                    "content": message.text,
                    "resource_type": "image",
                    "uri": url if remote else (f"image:{image_id}" if image_id else ""),
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    return proposals


def _vault_items(message: Message) -> list[Proposal]:
    proposals = []
    redacted = _redact(message.text)
    for kind, value, sensitivity in sensitive_values(message.text):
        placeholder = KINDS[kind].placeholder
        proposals.append(
            Proposal(
                memory_type="knowledge_vault",
                fields={
                    "entry_type": kind,
                    "caption": f"{KINDS[kind].caption} shared by {speaker(message)}: "
                    + _sentence_around(redacted, placeholder),
                    "secret_value": value,
                    "sensitivity": sensitivity,
                    "source": f"{message.role} message",
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
    return proposals


def _fact_subject(subject: str, named: str | None) -> str:
    """Whom a stored fact is about, so that two people's facts are never compared as one's:
    ``user`` (the end user), or the name a participant spoke under, and their people as the
    extractor names them ("Maya (daughter)"), a participant's as theirs ("Caroline's Maya
    (daughter)")."""
    if named is None:
        return subject
    return named if subject == "user" else f"{named}'s {subject}"


def _facts(message: Message) -> list[Proposal]:
    """The facts a user's turn states: one semantic memory each, and for the end user's own
    turns (no other name given) a line each in the ``human`` block. A turn sent under a name
    ("Caroline: …") is one participant's of several: its facts are theirs, named so, and the
    block (which is the end user's) is left alone. An AI assistant's "I" is never the user."""
    if message.role != Message.Role.USER or _assistant_reply(message):
        return []
    who = speaker(message)
    named = who != Message.Role.USER
    subject = who if named else "User"
    proposals = []
    for fact in facts_extract(text=spoken_text(message)):
        summary = fact_summary(fact=fact, speaker=subject)
        proposals.append(
            Proposal(
                memory_type="semantic",
                fields={
                    "name": fact_title(fact=fact, speaker=subject),
                    "summary": summary,
                    "details": clipped(fact.sentence, SUMMARY_CHARS),
                    "source": f"{who} message {message.pk}",
                    "subject": _fact_subject(fact.subject, who if named else None),
                    "predicate": fact.predicate,
                    "value": clipped(fact.value, FACT_VALUE_CHARS),
                },
                source_message_ids=[message.pk],
                occurred_at=message.occurred_at,
                filter_tags=message.filter_tags,
            )
        )
        if not named:
            proposals.append(
                Proposal(
                    memory_type="core",
                    fields={"label": "human", "value": summary, "mode": "append"},
                    source_message_ids=[message.pk],
                )
            )
    return proposals


def extract_deterministic(
    messages: list[Message], preceding: dict[int, Message], bounds: EpisodeBounds
) -> ExtractionOutcome:
    """Episodic events (who said what, when, in reply to what) for each exchange, within
    ``bounds``, plus the links, files, images and sensitive values the text shows, and the
    facts users state about themselves (see _facts). Secrets found are redacted from the other
    memories. ``preceding``: per session, the turn before
    the first of these (from an earlier batch), which the session's first exchange here
    replies to."""
    proposals: list[Proposal] = []
    for exchange, context in _episodes(messages, bounds, preceding):
        episodic = _episodic(exchange, context, bounds)
        if episodic is not None:
            proposals.append(episodic)
    for message in messages:
        if message.role in (Message.Role.USER, Message.Role.ASSISTANT):
            proposals.extend(_resources(message))
            proposals.extend(_vault_items(message))
            proposals.extend(_facts(message))
    return ExtractionOutcome(proposals=proposals)
