"""Query understanding: what a retrieval request's words say beyond their keywords. The time
they pin (``temporal``: "a week ago", "in March" as a date range), the topics of a conversation
(``topics``), and both read from a conversation's last user turns (``conversation``, by an LLM
when one is configured)."""
