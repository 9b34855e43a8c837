"""``manage.py calibrate_gate``: measure the embedding model on related and unrelated pairs and
store the similarity gate's thresholds for it.

- ``min_similarity``: the unrelated pairs' 95th percentile (a result scoring lower looks like
  an unrelated pair, and is dropped), but never above the related pairs' 5th percentile (where
  the model separates the two poorly, keep what is related rather than drop it);
- ``strong_similarity``: above every unrelated pair measured and at least the related pairs'
  90th percentile: a result there is ranked first, so it must be rare and sure.

Each memory is embedded as the store embeds it (the chunks that fit the model) and compared
through its nearest chunk, as the vector lane compares it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.models import GateCalibration
from memory.providers.embeddings import embedding_provider_from_settings

DEFAULT_PAIRS = Path(__file__).resolve().parents[2] / "calibration" / "pairs.json"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    lower, upper = int(position), min(int(position) + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def _cosine(left: list[float], right: list[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    norm = (sum(a * a for a in left) * sum(b * b for b in right)) ** 0.5
    return dot / norm if norm else 0.0


class Command(BaseCommand):
    help = (
        "Measure the configured embedding model on related/unrelated pairs; store gate thresholds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--pairs", type=Path, default=DEFAULT_PAIRS, help="JSON with 'related' pairs"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            related_pairs = json.loads(options["pairs"].read_text())["related"]
        except (OSError, ValueError, KeyError) as error:
            raise CommandError(f"Cannot read calibration pairs: {error}") from None
        if len(related_pairs) < 10:
            raise CommandError("At least 10 related pairs are needed.")
        embedder = embedding_provider_from_settings()
        questions = embedder.embed([question for question, _ in related_pairs])
        # A memory is stored as the chunks that fit the model and searched by its nearest
        # chunk: compare it here the same way.
        passages = [embedder.chunk(memory) for _, memory in related_pairs]
        vectors = embedder.embed([passage for group in passages for passage in group])
        memories, start = [], 0
        for group in passages:
            memories.append(vectors[start : start + len(group)])
            start += len(group)
        related = [
            max(_cosine(q, v) for v in memory)
            for q, memory in zip(questions, memories, strict=True)
        ]
        unrelated = [
            max(_cosine(question, v) for v in memory)
            for i, question in enumerate(questions)
            for j, memory in enumerate(memories)
            if i != j
        ]
        minimum = min(_percentile(unrelated, 0.95), _percentile(related, 0.05))
        strong = max(*unrelated, _percentile(related, 0.9))
        calibration, _ = GateCalibration.objects.update_or_create(
            model=embedder.model_name,
            defaults={
                "min_similarity": round(minimum, 4),
                "strong_similarity": round(strong, 4),
                "related_pairs": len(related),
                "unrelated_pairs": len(unrelated),
                "related_mean": round(statistics.fmean(related), 4),
                "unrelated_mean": round(statistics.fmean(unrelated), 4),
            },
        )
        self.stdout.write(
            f"{embedder.model_name}: related mean {calibration.related_mean:.3f} "
            f"(n={len(related)}), unrelated mean {calibration.unrelated_mean:.3f} "
            f"(n={len(unrelated)}); min_similarity {calibration.min_similarity:.3f}, "
            f"strong_similarity {calibration.strong_similarity:.3f}"
        )
