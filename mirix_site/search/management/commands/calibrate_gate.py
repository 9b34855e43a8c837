"""``manage.py calibrate_gate [--kind K] [--pairs FILE] [--if-missing]``: measure the configured
embedding model on related and unrelated pairs and store the similarity gate's thresholds for
it (for every kind, or for one kind). Setup runs it with ``--if-missing`` (and the migration that
created the table's first rows ran it for the bundled model); run it again after changing the
pairs or the model. See ``mirix_site.search.gate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mirix_site.providers.embeddings import EmbeddingProvider, embedding_provider_from_settings
from mirix_site.search.gate import BUNDLED_PAIRS, gate_calibrate, gate_calibration_ensure
from mirix_site.search.kinds import kind_get, kinds
from mirix_site.search.models import GateCalibration


class Command(BaseCommand):
    help = (
        "Measure the configured embedding model on related/unrelated pairs; store gate thresholds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--pairs", type=Path, default=BUNDLED_PAIRS, help="JSON with 'related' pairs"
        )
        parser.add_argument(
            "--kind",
            default=None,
            help="a searchable kind whose own thresholds these are (default: every kind)",
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="only when the model has no calibration yet, from the bundled pairs (setup)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = embedding_provider_from_settings()
        if options["if_missing"]:
            if options["kind"] is not None or options["pairs"] != BUNDLED_PAIRS:
                raise CommandError("--if-missing calibrates the model from the bundled pairs.")
            made = gate_calibration_ensure(embedder)
            if not made:
                self.stdout.write(f"{embedder.model_name}: calibrated already")
                return
        else:
            made = [self._calibrate(embedder, options)]
        for calibration in made:
            scope = f" ({calibration.kind})" if calibration.kind else ""
            self.stdout.write(
                f"{embedder.model_name}{scope}: related mean {calibration.related_mean:.3f} "
                f"(n={calibration.related_pairs}), unrelated mean "
                f"{calibration.unrelated_mean:.3f} (n={calibration.unrelated_pairs}); "
                f"min_similarity {calibration.min_similarity:.3f}, strong_similarity "
                f"{calibration.strong_similarity:.3f}"
            )

    def _calibrate(self, embedder: EmbeddingProvider, options: dict[str, Any]) -> GateCalibration:
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
        try:
            return gate_calibrate(
                embedder=embedder, related_pairs=[tuple(pair) for pair in related_pairs], kind=kind
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
