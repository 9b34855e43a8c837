"""The retrieval-quality bench: LoCoMo and LongMemEval-S through ``POST /memory/add`` and
``GET /memory/search``, run as ``.venv/bin/python -m bench.retrieval_quality``. What it measures
and how is ``__main__``'s docstring (its first line is the ``--help`` description).

Its modules, in the order of a run, each importing only those before it:
- ``datasets``: the benchmarks' files read into what each bench end user is told (``Haystack``)
  and asked (``Question``, with its gold units), per held-out split and client pattern;
- ``ingest``: the adds, the wait until the worker has extracted every turn, and the provenance
  that maps each stored message back to its benchmark turn;
- ``scoring``: the searches, each result list turned into ranked units, the metrics (recall@k,
  nDCG@10) and the reference (plain BM25, computed here);
- ``report``: every figure of a run, printed as tables and written by ``--json-out``;
- ``__main__``: the options and the run.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The bench's run (``__main__.main``), for callers that import the package (the tests).
    Imported when called: importing ``__main__`` with the package would make
    ``python -m bench.retrieval_quality`` find it imported already."""
    from bench.retrieval_quality.__main__ import main as run

    return run(argv)
