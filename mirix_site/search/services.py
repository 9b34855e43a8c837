"""The one call every retrieval endpoint makes, memory or skill: search the rows the caller may
read with the embedding model searches read now, and write the retrieval log."""

from __future__ import annotations

import time
from typing import Any

from accounts.models import EndUser
from accounts.tenancy import Scope, Tenant
from mirix_site.search.engine import SearchOutcome, SearchRequest, search
from mirix_site.search.log import retrieval_log_write
from mirix_site.search.query_vectors import query_vector_start
from mirix_site.search.spaces import read_embedder


def retrieval_start(query: str) -> None:
    """Start embedding the query of a search about to be made (its text exactly as the search
    will have it), so that what the caller reads before calling ``retrieval_search`` runs
    beside the model."""
    query_vector_start(query, read_embedder())


def retrieval_search(
    *,
    tenant: Tenant,
    end_user: EndUser | None,
    endpoint: str,
    request: SearchRequest,
    extra: dict[str, Any] | None = None,
    log: bool = True,
) -> SearchOutcome:
    """Search the rows the tenant may read (of ``end_user``, or of every user when None) and
    log the retrieval under ``endpoint`` (``extra``: what else the log should say of the
    request). A blank query finds nothing, and is logged as asked. ``log=False``: a search that
    is part of a retrieval logged on its own (the procedures served with a conversation's
    memories), so that one retrieval stays one log row."""
    began = time.perf_counter()
    if request.query.strip():
        outcome = search(
            request, scope=Scope.readable_by(tenant, end_user=end_user), embedder=read_embedder()
        )
    else:
        outcome = SearchOutcome(hits=[], embedding_model=None)
    if not log:
        return outcome
    retrieval_log_write(
        tenant=tenant,
        end_user=end_user,
        endpoint=endpoint,
        query=request.query,
        method=request.method,
        kinds=[kind.name for kind in request.kinds],
        outcome=outcome,
        latency_ms=(time.perf_counter() - began) * 1000,
        extra=extra,
    )
    return outcome
