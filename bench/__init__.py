"""The benchmarks: run by hand against a live server (``make run``), from the project root, as
``.venv/bin/python -m bench.<name>``; their figures are recorded in ``bench/RESULTS.md``. ``make
test`` runs each in its ``--smoke`` mode (``tests/test_bench.py``).

No bench imports another. Benches share code only through library modules, which are never run
on their own:
- ``bench.common``: what all the benches share (the server, its key and the options every bench
  takes, a keep-alive client, loads, percentiles, the data directory, the words of the BM25
  baselines, and the server's local model and database for the benches that work in-process);
- ``bench.experiences_data``: the experiences and queries generated from a seed, which
  ``experiences`` stores and asks, ``embedding_runtime`` embeds and ``recommend_path`` asks;
- ``bench.memories_load``: memories at scale loaded straight into the database (the corpus,
  synthetic vectors, the loader and its HNSW handling), for ``retrieval_latency`` and
  ``dashboard``;
- ``bench.skills_common``: the task sessions, the wait for their learning runs and the BM25
  baseline of ``skill_learning``, ``skill_families`` and ``task_families``;
- the library modules of the ``bench.retrieval_quality`` package, ``datasets``, ``ingest``,
  ``scoring`` and ``report`` (the bench itself is its ``__main__``): ``fairness`` loads and
  ingests its heavy tenant with ``datasets`` and ``ingest``.
"""
