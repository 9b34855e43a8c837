"""Keyword topics from the last user turns of a conversation, for when no LLM is configured.

``POST /memory/retrieve/conversation`` needs a short search query from what the user has been
saying. ``topics_extract`` keeps the words that name things - proper nouns ("New York",
"Project Apollo"), identifiers ("Q3", "v2.1", "4521") and content words - and drops the rest: stop
words, chatty question words ("what did we discuss, please tell me") and temporal phrases, which
``memory.query.temporal`` turns into a date filter instead.

Ranking, deterministic: topics from the newest turn first (then the turn before, and so on); within
a turn, names and identifiers before common words, then the more frequent across all turns, then
the first mentioned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memory.query.temporal import temporal_spans

__all__ = ["topics_extract", "topics_query"]

_STOP_WORDS_TEXT = """
    a about above after again against ago all almost also although always am among an and another
    any anybody anyone anything anyway anywhere are aren't around as at away back be became because
    been before being below beside besides between beyond both but by can can't cannot could
    couldn't did didn't do does doesn't doing don't done down during each either else enough etc
    even ever every everybody everyone everything everywhere except few for from further had hadn't
    has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his
    how how's however i i'd i'll i'm i've if in inside instead into is isn't it it's its itself
    just least less let let's like likely lot lots many may maybe me might mine more most much must
    my myself near neither never no nobody none nor not nothing now nowhere of off often on once
    one only onto or other others otherwise our ours ourselves out over own per perhaps quite
    rather really same several shall she she'd she'll she's should shouldn't since so some somebody
    someone something sometime sometimes somewhere still such than that that's the their theirs
    them themselves then there there's these they they'd they'll they're they've thing things
    this those though through thus till to together too toward towards under unless until up upon
    us usually very via was wasn't we we'd we'll we're we've well were weren't what what's whatever
    when when's whenever where where's whereas wherever whether which while who who's whoever
    whole whom whose why why's will with within without won't would wouldn't yet you you'd you'll
    you're you've your yours yourself yourselves

    ask asked asking bring brought call called can come came check find found get gets getting
    give given go goes going gone went got gotten help keep kept know knew known let look looked
    make made mean meant need needed put said say saying says see seen seem show showed take
    taken tell telling told think thinking thought try tried use used want wanted wanting

    hey hi hello thanks thank thx please pls okay ok yes yeah yep nope sure right alright cool
    great awesome nice good fine oh ah hmm um uh well lol actually basically probably definitely
    literally kind sort stuff anything etc again already e.g i.e http https www

    remember remembered remind reminded recall recalled discuss discussed discussing discussion
    talk talked talking chat chatted chatting mention mentioned mentioning conversation
    conversations spoke speak speaking wonder wondering curious idea ideas info information
    detail details regarding related summary summarize summarise memory memories note notes

    today tonight yesterday tomorrow morning afternoon evening night day days week weeks weekend
    month months year years hour hours minute minutes ago last past previous recent recently
    lately earlier later since current early mid late other couple before after time times next
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

# Lower-case words that may sit inside a capitalized name: "Bank of America", "Port of Spain".
NAME_CONNECTORS = frozenset({"of", "the", "de", "da", "del", "du", "la", "le", "van", "von"})

_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_'\u2019.\-/+#]*[A-Za-z0-9_+#])?")
_SENTENCE_BREAK = re.compile(r"[.!?:;\n]")
# Ordinals, clock times and bare dates carry no topic.
_NOISE = re.compile(
    r"\d+(?:st|nd|rd|th)|\d{1,2}(?::\d\d)?(?:am|pm)|\d{1,2}:\d\d|\d{4}[-/]\d{1,2}[-/]\d{1,2}",
    re.IGNORECASE,
)


_CONTRACTIONS = ("n't", "'ve", "'ll", "'re", "'d", "'m")


@dataclass
class _Token:
    text: str
    sentence_start: bool
    after_punctuation: bool  # "Berlin, Paris": two names, not one


@dataclass
class _Topic:
    text: str
    is_name: bool
    newest_turn: int
    position: int  # order of first mention within ``newest_turn``
    count: int = 0


def _without_temporal_phrases(text: str) -> str:
    # A comma keeps "Berlin on Monday Sarah" from joining into one name, and keeps "Sarah" in
    # "Yesterday Sarah called" from looking like the word opening a sentence.
    for first, last in reversed(temporal_spans(text)):
        text = text[:first] + ", " + text[last:]
    return text


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    previous_end = 0
    for match in _TOKEN.finditer(text):
        gap = text[previous_end : match.start()]
        word = match.group().replace("\u2019", "'")
        tokens.append(
            _Token(
                text=re.sub(r"'s$", "", word, flags=re.IGNORECASE),
                sentence_start=bool(_SENTENCE_BREAK.search(gap)) or not (tokens or gap.strip()),
                after_punctuation=bool(gap.strip()),
            )
        )
        previous_end = match.end()
    return tokens


def _is_identifier(word: str) -> bool:
    """Whether ``word`` looks like a name for a thing: "Q3", "v2.1", "memory_search", "getUser",
    "PR-42", "API", "4521"."""
    has_digit = any(character.isdigit() for character in word)
    has_letter = any(character.isalpha() for character in word)
    if has_digit and not has_letter:
        # Short numbers are counts ("3 things"); longer ones are ids, years, amounts.
        return len(word.replace(".", "").replace(",", "")) >= 3 and not _NOISE.fullmatch(word)
    if has_digit:
        return not _NOISE.fullmatch(word)
    return (
        "_" in word
        or (len(word) >= 2 and word.isupper())
        or any(character.isupper() for character in word[1:])
    )


def _is_capitalized(word: str) -> bool:
    """Capitalized like a name ("Sarah", "GitHub", "O'Brien"); "API" and "Q3" are identifiers."""
    return word[0].isupper() and not word.isupper()


def _turn_terms(tokens: list[_Token], known_names: set[str]) -> list[tuple[str, bool]]:
    """The terms of one turn in order: (text, is a name or identifier)."""
    terms: list[tuple[str, bool]] = []
    name: list[str] = []

    def close_name() -> None:
        while name and name[-1].lower() in NAME_CONNECTORS:
            name.pop()
        if len(name) > 1 or (name and name[0].lower() in known_names):
            terms.append((" ".join(name), True))
        elif name:
            # A lone capitalized word opening a sentence is usually just a common word.
            _add_word(name[0], terms)
        name.clear()

    for token in tokens:
        word = token.text
        lower = word.lower()
        if token.after_punctuation:
            close_name()
        if name and word.isdigit() and len(word) <= 4:
            name.append(word)  # "Apollo 11", "Windows 11"
            close_name()
            continue
        if lower in STOP_WORDS and not (name and lower in NAME_CONNECTORS):
            close_name()
            continue
        if _is_capitalized(word):
            name.append(word)
            continue
        if name and lower in NAME_CONNECTORS:
            name.append(lower)
            continue
        close_name()
        _add_word(word, terms)
    close_name()
    return terms


def _add_word(word: str, terms: list[tuple[str, bool]]) -> None:
    lower = word.lower()
    if lower in STOP_WORDS or _NOISE.fullmatch(word) or lower.endswith(_CONTRACTIONS):
        return
    if _is_identifier(word):
        terms.append((word, True))
    elif len(word) >= 3 and any(character.isalpha() for character in word):
        terms.append((lower, False))


def topics_extract(texts: Sequence[str], *, max_topics: int = 8) -> list[str]:
    """Up to ``max_topics`` keywords or short names from ``texts`` (oldest turn first), most
    important first."""
    if max_topics <= 0:
        return []
    turns = [_tokens(_without_temporal_phrases(text)) for text in texts]
    # A capitalized word seen mid-sentence anywhere is a name, even where it opens a sentence.
    known_names = {
        token.text.lower()
        for tokens in turns
        for token in tokens
        if not token.sentence_start and _is_capitalized(token.text)
    }
    topics: dict[str, _Topic] = {}
    for turn, tokens in enumerate(turns):
        for position, (term, is_name) in enumerate(_turn_terms(tokens, known_names)):
            key = term.lower()
            topic = topics.get(key)
            if topic is None or topic.newest_turn < turn:
                earlier_name = topic is not None and topic.is_name and not is_name
                topic = _Topic(
                    text=topic.text if topic is not None and earlier_name else term,
                    is_name=is_name or earlier_name,
                    newest_turn=turn,
                    position=position,
                    count=topic.count if topic is not None else 0,
                )
                topics[key] = topic
            elif is_name and not topic.is_name:
                topic.text, topic.is_name = term, True
            topic.count += 1

    _fold_words_into_names(topics)
    ranked = sorted(
        topics.values(),
        key=lambda topic: (-topic.newest_turn, not topic.is_name, -topic.count, topic.position),
    )
    return [topic.text for topic in ranked[:max_topics]]


def _fold_words_into_names(topics: dict[str, _Topic]) -> None:
    """Count a word inside a longer name ("apollo" in "Project Apollo") as that name."""
    names = [topic for topic in topics.values() if " " in topic.text]
    for key, topic in list(topics.items()):
        if " " in key:
            continue
        holder = next((name for name in names if key in name.text.lower().split()), None)
        if holder is None:
            continue
        holder.count += topic.count
        if topic.newest_turn > holder.newest_turn:
            holder.newest_turn, holder.position = topic.newest_turn, topic.position
        elif topic.newest_turn == holder.newest_turn:
            holder.position = min(holder.position, topic.position)
        del topics[key]


def topics_query(topics: list[str]) -> str:
    """The topics as one space-separated search query."""
    return " ".join(topic.strip() for topic in topics if topic.strip())
