"""The sensitive-value detector (``sessions.sensitive``) on its labelled corpus
(``bench/secrets_corpus.jsonl``): recall over the values that must be hidden, false positives
over the texts that must stay as they are, per half and per form.

The corpus was written apart from the detector (to a list of the forms agents send, never
reading its rules), and split into a dev half, which the rules were chosen on, and a test
half, which is what the figures report. Its lines: ``{"id", "half", "form", "text",
"secrets"}``; a positive lists the exact substrings of its text that must not survive
redaction, a negative lists none and must come out unchanged.

Run: ``.venv/bin/python -m bench.secrets [--half dev|test|all] [--misses]``. In-process, no
server; ``make test`` runs the scoring on both halves (``tests/sessions/test_sensitive.py``).
Goals ([11/18]): recall >= 0.97 and false positives <= 2 % on the test half.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "secrets_corpus.jsonl"
RECALL_GOAL = 0.97
FALSE_POSITIVE_GOAL = 0.02


@dataclass(frozen=True)
class Entry:
    id: str
    half: str
    form: str
    text: str
    secrets: tuple[str, ...]


@dataclass
class Scores:
    """What the detector did on some entries."""

    values: int = 0  # secret values to hide
    hidden: int = 0
    negatives: int = 0
    changed: int = 0  # negatives the redaction changed
    misses: list[tuple[Entry, str]] = field(default_factory=list)
    false_positives: list[tuple[Entry, str]] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.hidden / self.values if self.values else float("nan")

    @property
    def false_positive_rate(self) -> float:
        return self.changed / self.negatives if self.negatives else float("nan")

    @property
    def met(self) -> bool:
        return self.recall >= RECALL_GOAL and self.false_positive_rate <= FALSE_POSITIVE_GOAL


def corpus_read(path: Path = CORPUS) -> list[Entry]:
    with path.open(encoding="utf-8") as lines:
        return [
            Entry(
                id=item["id"],
                half=item["half"],
                form=item["form"],
                text=item["text"],
                secrets=tuple(item["secrets"]),
            )
            for item in map(json.loads, lines)
        ]


def corpus_score(entries: Sequence[Entry], redact: Callable[[str], str]) -> Scores:
    """Recall counts each listed value not left whole in the redacted text; a negative is a
    false positive when its redacted text differs from it."""
    scores = Scores()
    for entry in entries:
        redacted = redact(entry.text)
        if entry.secrets:
            for value in entry.secrets:
                scores.values += 1
                if value in redacted:
                    scores.misses.append((entry, value))
                else:
                    scores.hidden += 1
        else:
            scores.negatives += 1
            if redacted != entry.text:
                scores.changed += 1
                scores.false_positives.append((entry, redacted))
    return scores


def detector() -> Callable[[str], str]:
    """The server's redaction, at its default settings (the phone region is a setting)."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(PHONE_DEFAULT_REGION=os.environ.get("PHONE_DEFAULT_REGION", "US"))
    from sessions.sensitive import sensitive_redacted

    return sensitive_redacted


def _line(name: str, scores: Scores) -> str:
    return (
        f"{name:<6} recall {scores.recall:.4f} ({scores.hidden}/{scores.values} values)   "
        f"false positives {scores.false_positive_rate:.4f} "
        f"({scores.changed}/{scores.negatives} negatives)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half", choices=["dev", "test", "all"], default="test")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--misses", action="store_true", help="print each miss and false hit")
    arguments = parser.parse_args(argv)
    entries = corpus_read(arguments.corpus)
    redact = detector()
    halves = ["dev", "test"] if arguments.half == "all" else [arguments.half]
    print(f"corpus: {arguments.corpus.name}, {len(entries)} entries")
    for half in halves:
        chosen = [entry for entry in entries if entry.half == half]
        began = time.perf_counter()
        scores = corpus_score(chosen, redact)
        elapsed = time.perf_counter() - began
        print(_line(half, scores))
        by_form: dict[str, list[Entry]] = defaultdict(list)
        for entry in chosen:
            by_form[entry.form].append(entry)
        weak = [
            (form, corpus_score(items, redact))
            for form, items in sorted(by_form.items())
            if any(
                entry.id in {e.id for e, _ in scores.misses + scores.false_positives}
                for entry in items
            )
        ]
        for form, form_scores in weak:
            print(f"  {form}: {_line('', form_scores).strip()}")
        if arguments.misses:
            for entry, value in scores.misses:
                print(f"  MISS {entry.id}: {value!r} in {entry.text[:160]!r}")
            for entry, redacted in scores.false_positives:
                print(f"  FALSE {entry.id}: {redacted[:160]!r}")
        goal = (
            f"goal (recall >= {RECALL_GOAL}, false positives <= {FALSE_POSITIVE_GOAL:.0%}): "
            f"{'met' if scores.met else 'NOT met'}"
        )
        print(f"  {goal}; {1e6 * elapsed / max(len(chosen), 1):.0f} us a text")
    return 0


if __name__ == "__main__":
    sys.exit(main())
