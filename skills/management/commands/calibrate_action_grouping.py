"""``manage.py calibrate_action_grouping [--pairs FILE] [--if-missing]``: measure the configured
embedding model on pairs of action phrasings that are and are not one action, and store the
similarity from which recommend pools two phrasings (``skills.services.grouping``). Setup runs
it with ``--if-missing`` (a migration ran it for the bundled model); run it again after
changing the pairs or the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mirix_site.providers.embeddings import embedding_provider_from_settings
from skills.services.grouping import (
    BUNDLED_PAIRS,
    grouping_calibrate,
    grouping_calibration_ensure,
)


class Command(BaseCommand):
    help = "Measure the embedding model on action phrasings; store the grouping threshold."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--pairs", type=Path, default=BUNDLED_PAIRS, help="JSON with 'same' and 'different'"
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="only when the model has no calibration yet, from the bundled pairs (setup)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = embedding_provider_from_settings()
        if options["if_missing"]:
            if options["pairs"] != BUNDLED_PAIRS:
                raise CommandError("--if-missing calibrates the model from the bundled pairs.")
            calibration = grouping_calibration_ensure(embedder)
            if calibration is None:
                self.stdout.write(f"{embedder.model_name}: calibrated already")
                return
        else:
            try:
                data = json.loads(options["pairs"].read_text())
                same = [tuple(pair) for pair in data["same"]]
                different = [tuple(pair) for pair in data["different"]]
                calibration = grouping_calibrate(embedder=embedder, same=same, different=different)
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise CommandError(f"{options['pairs']}: {error}") from None
        self.stdout.write(
            f"{embedder.model_name}: threshold {calibration.threshold:.4f} (above every one of "
            f"{calibration.different_pairs} different pairs, max {calibration.different_max:.4f});"
            f" {calibration.same_above:.0%} of {calibration.same_pairs} same pairs reach it "
            f"(mean {calibration.same_mean:.3f})"
        )
