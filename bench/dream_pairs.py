"""Auto-dream's merge rule (``memory.consolidation``) on labelled pairs, to choose its
similarity threshold: different facts of the fact set (``memory/calibration/facts.json``: two
utterances stating the same predicate of the user with another value, "I live in Leeds" /
"I live in Paris") and the action pairs' hard negatives (``skills/calibration/action_pairs.json``:
opposite directions, another number, the step negated), against their paraphrases. Per
threshold: the different pairs the guard lets through that the embedding would merge, and the
share of same pairs merged.

Usage (the embedding model needs the project's settings; no server is needed):
    MIRIX_DATA_DIR=DIR .venv/bin/python -m mirix_site.launcher exec -- \\
        .venv/bin/python -m bench.dream_pairs
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = (0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.96)


def _pairs() -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    from memory.consolidation import text_normalise

    facts = json.loads((ROOT / "memory/calibration/facts.json").read_text())["items"]
    by_predicate: dict[str, list[tuple[str, str]]] = {}
    for item in facts:
        for fact in item["facts"]:
            if fact["subject"] == "user":
                by_predicate.setdefault(fact["predicate"], []).append(
                    (text_normalise(fact["value"]), item["text"])
                )
    same, different = [], []
    for rows in by_predicate.values():
        for (value_a, text_a), (value_b, text_b) in itertools.combinations(rows, 2):
            if text_a != text_b:
                (same if value_a == value_b else different).append((text_a, text_b))
    fact_pairs = len(different)
    actions = json.loads((ROOT / "skills/calibration/action_pairs.json").read_text())
    for cluster in actions["clusters"]:
        same += list(itertools.combinations(cluster["same"], 2))
        different += [(s, n) for n in cluster["different"] for s in cluster["same"]]
    return same, different, fact_pairs


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    import django

    django.setup()
    import numpy as np

    from memory.consolidation import texts_opposed
    from mirix_site.providers.embeddings import embedding_provider_from_settings

    same, different, fact_pairs = _pairs()
    texts = sorted({text for pair in same + different for text in pair})
    vectors = np.asarray(embedding_provider_from_settings().embed(texts), "f4")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = {text: position for position, text in enumerate(texts)}

    def similarity(pair: tuple[str, str]) -> float:
        return float(vectors[index[pair[0]]] @ vectors[index[pair[1]]])

    through = [(similarity(pair), pair) for pair in different if texts_opposed(*pair) is None]
    facts_through = [
        similarity(pair) for pair in different[:fact_pairs] if texts_opposed(*pair) is None
    ]
    print(
        f"same pairs {len(same)}, different pairs {len(different)} (facts {fact_pairs}); "
        f"held by the guard {len(different) - len(through)}; "
        f"facts' highest different pair {max(facts_through):.3f}"
    )
    for threshold in THRESHOLDS:
        merged_same = sum(
            1 for pair in same if similarity(pair) >= threshold and texts_opposed(*pair) is None
        )
        merged_different = sum(1 for value, _pair in through if value >= threshold)
        print(
            f"threshold {threshold:.2f}: different merged {merged_different}, "
            f"same merged {merged_same / len(same):.3f}"
        )


if __name__ == "__main__":
    main()
