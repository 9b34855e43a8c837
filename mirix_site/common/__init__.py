"""Small helpers with no domain, below every app: row hydration for hand-written SQL
(``rows``), the short-lived memo of rarely changed rows (``rowsmemo``), database and Redis
helpers, text and JSON helpers, ids, the domain's four kinds of refusal (``errors``), queueing
a task by name (``publish``) and the read-only admin."""
