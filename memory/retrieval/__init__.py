"""The retrieval engine: BM25 over an inverted index, cosine over HNSW, fused with RRF and
checked by a per-model similarity gate. Shared by memories now and skills and experiences later."""
