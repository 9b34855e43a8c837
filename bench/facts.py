"""The deterministic fact extractor (``memory.extractors.facts``) on the labelled fact set
(``memory/calibration/facts.json``): precision and recall of extracted facts per half and per
predicate, and, on the dev half, every miss and false positive. Facts match by the set's
rule (its header's "matching"): subject and predicate equal, values equal after case folding,
trimming punctuation and a leading article or possessive, each labelled fact matched once.
Only user turns are extracted; an assistant turn's facts count as false positives if any.

Usage (the extractor needs the project's settings; no server is needed):
    MIRIX_DATA_DIR=DIR .venv/bin/python -m mirix_site.launcher exec -- \\
        .venv/bin/python -m bench.facts [--half dev|dev2|test] [--slice work|held] [--quiet]

``dev2`` is the second, independently written dev set (``memory/calibration/facts_dev2.json``).
Its items whose number is a multiple of 4 (g004, g008, …) are held out while rules are chosen:
``--slice held`` scores only them, ``--slice work`` the rest, and misses are listed for the
working slice only.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory.extractors.facts_set import LabelledUtterance

_LEADING = re.compile(r"^(?:(?:a|an|the|my|our|his|her|their)\s+)+", re.IGNORECASE)
_PUNCTUATION = " \t\n\"'`.,;:!?()[]{}"


def fact_key(subject: str, predicate: str, value: str) -> tuple[str, str, str]:
    """A fact as the set's matching rule compares it."""
    folded = value.casefold().strip(_PUNCTUATION)
    folded = _LEADING.sub("", folded).strip(_PUNCTUATION)
    return subject.casefold().strip(), predicate, " ".join(folded.split())


@dataclass
class Score:
    """Matched, extracted and labelled facts, overall and per predicate, and what went wrong."""

    matched: Counter[str] = field(default_factory=Counter)
    extracted: Counter[str] = field(default_factory=Counter)
    labelled: Counter[str] = field(default_factory=Counter)
    misses: list[tuple[str, str, tuple[str, str, str]]] = field(default_factory=list)
    false_positives: list[tuple[str, str, tuple[str, str, str]]] = field(default_factory=list)

    def precision(self, predicate: str | None = None) -> float:
        extracted = self.extracted[predicate] if predicate else sum(self.extracted.values())
        matched = self.matched[predicate] if predicate else sum(self.matched.values())
        return matched / extracted if extracted else 1.0

    def recall(self, predicate: str | None = None) -> float:
        labelled = self.labelled[predicate] if predicate else sum(self.labelled.values())
        matched = self.matched[predicate] if predicate else sum(self.matched.values())
        return matched / labelled if labelled else 1.0


def facts_score(utterances: list[LabelledUtterance]) -> Score:
    """Extract each user turn's facts and score them against the labels."""
    from memory.extractors.facts import facts_extract

    score = Score()
    for utterance in utterances:
        predicted = (
            [
                fact_key(fact.subject, fact.predicate, fact.value)
                for fact in facts_extract(text=utterance.text)
            ]
            if utterance.speaker == "user"
            else []
        )
        expected = [fact_key(f.subject, f.predicate, f.value) for f in utterance.facts]
        remaining = list(expected)
        for key in predicted:
            score.extracted[key[1]] += 1
            if key in remaining:
                remaining.remove(key)
                score.matched[key[1]] += 1
            else:
                score.false_positives.append((utterance.id, utterance.text, key))
        for key in expected:
            score.labelled[key[1]] += 1
        score.misses.extend((utterance.id, utterance.text, key) for key in remaining)
    return score


def dev2_held(item_id: str) -> bool:
    """Whether a dev2 item is in the slice held out while rules are chosen (every 4th by id)."""
    return int(re.sub(r"\D", "", item_id)) % 4 == 0


def _report(half: str, score: Score, *, details: bool) -> None:
    extracted, labelled = sum(score.extracted.values()), sum(score.labelled.values())
    print(
        f"{half}: precision {score.precision():.3f} ({sum(score.matched.values())}/{extracted})"
        f"  recall {score.recall():.3f} ({sum(score.matched.values())}/{labelled})"
    )
    for predicate in sorted(set(score.labelled) | set(score.extracted)):
        print(
            f"  {predicate:17} precision {score.precision(predicate):.2f}"
            f" ({score.matched[predicate]}/{score.extracted[predicate]})"
            f"  recall {score.recall(predicate):.2f}"
            f" ({score.matched[predicate]}/{score.labelled[predicate]})"
        )
    if details:
        print(f"\n{half} misses:")
        for item_id, text, key in score.misses:
            print(f"  {item_id} {key}  <- {text!r}")
        print(f"\n{half} false positives:")
        for item_id, text, key in score.false_positives:
            print(f"  {item_id} {key}  <- {text!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--half", choices=("dev", "dev2", "test"), help="one half (default: dev and dev2)"
    )
    parser.add_argument(
        "--slice", choices=("work", "held"), help="dev2 only: its working or held-out items"
    )
    parser.add_argument("--quiet", action="store_true", help="no list of dev misses")
    arguments = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    import django

    django.setup()
    from memory.extractors.facts_set import facts_labelled

    for half in (arguments.half,) if arguments.half else ("dev", "dev2"):
        utterances = facts_labelled(half=half)
        if half == "dev2" and arguments.slice:
            held = arguments.slice == "held"
            utterances = [u for u in utterances if dev2_held(u.id) == held]
        # Misses are listed on the sets rules are chosen on, never on test or dev2's held slice.
        _report(
            f"{half} ({arguments.slice})" if half == "dev2" and arguments.slice else half,
            facts_score(utterances),
            details=not arguments.quiet
            and (half == "dev" or (half == "dev2" and arguments.slice == "work")),
        )


if __name__ == "__main__":
    main()
