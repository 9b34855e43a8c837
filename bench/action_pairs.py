"""The action grouping on the labelled action pairs (``skills/calibration/action_pairs.json``;
its "about" says how they were written and split): per half, the share of same-action pairs
the rule joins (recall) and of different-action pairs it keeps apart, with the embedding
(all-MiniLM-L6-v2 through the project's provider) and with the words alone (what decides
before the worker has embedded a phrasing). The thresholds are chosen on the dev half as
``manage.py calibrate_action_grouping`` chooses them, then applied to the test half.

Usage (the embedding model needs the project's settings; no server is needed):
    MIRIX_DATA_DIR=DIR .venv/bin/python -m mirix_site.launcher exec -- \\
        .venv/bin/python -m bench.action_pairs [--misses]
"""

from __future__ import annotations

import argparse
import os
from collections import Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="print the dev half's misses")
    arguments = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mirix_site.settings.local")
    import django

    django.setup()
    from mirix_site.providers.embeddings import embedding_provider_from_settings
    from skills.services.grouping import (
        GroupingRule,
        action_guard,
        action_pairs_score,
        action_pairs_similarities,
        actions_same,
        bundled_pairs,
        grouping_measure,
    )

    embedder = embedding_provider_from_settings()
    dev_same, dev_different = bundled_pairs("dev")
    chosen = grouping_measure(embedder=embedder, same=dev_same, different=dev_different)
    rule = GroupingRule(
        threshold=float(chosen["threshold"]),
        guarded_threshold=float(chosen["guarded_threshold"]),
    )
    print(
        f"model {embedder.model_name}; chosen on dev: threshold {rule.threshold:.2f}, "
        f"guarded threshold {rule.guarded_threshold:.2f}"
    )
    for half in ("dev", "test"):
        same, different = bundled_pairs(half)
        same_values = action_pairs_similarities(embedder=embedder, pairs=same)
        different_values = action_pairs_similarities(embedder=embedder, pairs=different)
        recall, apart = action_pairs_score(
            rule=rule,
            same=same,
            different=different,
            same_similarities=same_values,
            different_similarities=different_values,
        )
        words_recall, words_apart = action_pairs_score(
            rule=rule,
            same=same,
            different=different,
            same_similarities=[None] * len(same),
            different_similarities=[None] * len(different),
        )
        guards = Counter(action_guard(a, b) for a, b in different)
        print(
            f"{half}: {len(same)} same pairs, {len(different)} different pairs | "
            f"embedded: recall {recall:.3f}, apart {apart:.3f} | "
            f"words alone: recall {words_recall:.3f}, apart {words_apart:.3f} | "
            f"different pairs held by a guard: {dict(guards.most_common())}"
        )
        if arguments.misses and half == "dev":
            for (a, b), value in zip(same, same_values, strict=True):
                if not actions_same(left=a, right=b, similarity=value, rule=rule):
                    print(f"  apart, same   {value:.3f} {action_guard(a, b)}: {a!r} / {b!r}")
            for (a, b), value in zip(different, different_values, strict=True):
                if actions_same(left=a, right=b, similarity=value, rule=rule):
                    print(f"  joined, diff  {value:.3f}: {a!r} / {b!r}")


if __name__ == "__main__":
    main()
