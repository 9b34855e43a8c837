"""The retrieval engine, for every searchable kind any app registers (``kinds``): BM25 over an
inverted index (``bm25``, written by ``index``), cosine over HNSW indexes shared per kind and
model and owned by large users (``vectors``, ``vector_indexes``), fused with RRF and checked by
the similarity gate (``fusion``, ``gate``), one search over several kinds (``engine``), the
retrieval log (``log``), which embedding model is read and written (``spaces``), re-embedding
(``reembed``). Endpoints call ``services.retrieval_search``: search and log in one call.

It names no kind: memories, experiences and skills are declarations it is handed."""
