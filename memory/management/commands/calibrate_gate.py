"""``manage.py calibrate_gate [--kind K]``: measure the configured embedding model on related
and unrelated pairs and store the similarity gate's thresholds for it (for every kind, or for
one kind). See ``memory.retrieval.gate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.providers.embeddings import embedding_provider_from_settings
from memory.retrieval.gate import gate_calibrate
from memory.retrieval.kinds import kind_get, kinds

DEFAULT_PAIRS = Path(__file__).resolve().parents[2] / "calibration" / "pairs.json"


class Command(BaseCommand):
    help = (
        "Measure the configured embedding model on related/unrelated pairs; store gate thresholds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--pairs", type=Path, default=DEFAULT_PAIRS, help="JSON with 'related' pairs"
        )
        parser.add_argument(
            "--kind",
            default=None,
            help="a searchable kind whose own thresholds these are (default: every kind)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            related_pairs = json.loads(options["pairs"].read_text())["related"]
        except (OSError, ValueError, KeyError) as error:
            raise CommandError(f"Cannot read calibration pairs: {error}") from None
        kind = None
        if options["kind"] is not None:
            kind = kind_get(options["kind"])
            if kind is None:
                names = ", ".join(kind.name for kind in kinds())
                raise CommandError(f"Unknown kind {options['kind']!r}; one of {names}.")
        embedder = embedding_provider_from_settings()
        try:
            calibration = gate_calibrate(
                embedder=embedder, related_pairs=[tuple(pair) for pair in related_pairs], kind=kind
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        scope = f" ({kind.name})" if kind is not None else ""
        self.stdout.write(
            f"{embedder.model_name}{scope}: related mean {calibration.related_mean:.3f} "
            f"(n={calibration.related_pairs}), unrelated mean {calibration.unrelated_mean:.3f} "
            f"(n={calibration.unrelated_pairs}); min_similarity "
            f"{calibration.min_similarity:.3f}, strong_similarity "
            f"{calibration.strong_similarity:.3f}"
        )
