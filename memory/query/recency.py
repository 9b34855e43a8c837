"""Whether a retrieval query names a topic, or only asks what is new.

"What happened recently?", "what did we talk about yesterday?", "anything new?" hold no word
a memory could match: searched, they found nothing (BM25 had no term, and the gate dropped
what the embedding lane guessed). ``content_terms`` reads a query as the keyword lane does
(PostgreSQL's ``to_tsvector`` with ``TEXT_SEARCH_CONFIG``: its stop words dropped, the rest
stemmed) after taking out

- the time phrases ``memory.query.temporal`` recognizes ("yesterday", "last week", "since
  Monday", "recently"), and
- ``CONVERSATION_WORDS`` below: words that ask about the conversation itself rather than a
  topic, stemmed by the same analyser, so that "talked", "talking" and "talk" go alike.

What is left are the query's content terms. None left: ``memory.services.retrieval`` answers
with the newest memories instead of searching (within the time a phrase pins, if one does).
"""

from __future__ import annotations

from memory.query.temporal import temporal_spans
from mirix_site.search.bm25 import query_lexemes

__all__ = ["CONVERSATION_WORDS", "content_terms"]

# Words asking about the conversation, not a topic: kept short, since a word here can never
# be searched for on its own ("news" alone lists the newest memories, not the ones about news).
# Greetings are not among them: "who said hello?" asks about a hello.
CONVERSATION_WORDS = """
    happen happened happening going go went
    talk talked discuss discussed say said tell told chat chatted mention mentioned
    speak spoke conversation conversations know
    recent recently lately latest last new news update updates recap catch
    remind remember summary summarize summarise
    anything everything something whatever thing things stuff event events time us
    please thanks
"""


def content_terms(text: str, *, temporal: bool = True) -> list[str]:
    """The lexemes of ``text`` that name a topic (sorted): the keyword lane's, less those of
    its time phrases (``temporal=False``: a time phrase is only words, and counts) and of
    ``CONVERSATION_WORDS``. Empty: the text asks only what is new."""
    if temporal:
        for first, last in reversed(temporal_spans(text)):
            text = f"{text[:first]} {text[last:]}"
    if not text.strip():
        return []
    return query_lexemes(text, less=CONVERSATION_WORDS)
