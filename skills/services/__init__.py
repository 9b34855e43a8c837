"""The skills app's writes: experiences (``experiences``), how phrasings of an action group
(``grouping``), recall and recommend (``retrieval``)."""
