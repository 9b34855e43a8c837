"""The benchmarks: run by hand against a live server (``make run``), from the project root, as
``.venv/bin/python -m bench.<name>``; their figures are recorded in ``bench/RESULTS.md``. What
several benches need lives in ``bench.common``; no bench imports another. ``make test`` runs
each in its ``--smoke`` mode (``tests/test_bench.py``)."""
