"""``manage.py reembed --model M``: give every searchable row vectors of embedding model M.

Run it beside the running server, with the server's current settings (they name the model
searches read now); name the new model with the options. See ``mirix_site.search.reembed``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mirix_site.providers.embeddings import (
    EmbeddingProvider,
    EmbeddingSettings,
    embedding_provider,
    embedding_provider_from_settings,
)
from mirix_site.search.reembed import SpaceMismatchError, reembed_run


class Command(BaseCommand):
    help = "Embed every searchable row with another embedding model, resumably; index it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model", required=True, help="the model to fill")
        parser.add_argument("--provider", choices=["local", "openai", "gemini"])
        parser.add_argument("--api-base", default=None)
        parser.add_argument("--api-key", default=None, help="default: EMBEDDING_API_KEY")
        parser.add_argument("--dimensions", type=int, default=None)
        parser.add_argument("--batch", type=int, default=256, help="rows per transaction")
        parser.add_argument(
            "--max-batches", type=int, default=None, help="stop after this many (then resume later)"
        )

    def _target(self, options: dict[str, Any]) -> EmbeddingProvider:
        configured = embedding_provider_from_settings()
        if options["model"] == configured.model_name and not options["provider"]:
            return configured
        return embedding_provider(
            EmbeddingSettings(
                provider=options["provider"] or settings.EMBEDDING_PROVIDER,
                model=options["model"],
                api_base=options["api_base"],
                api_key=options["api_key"] or settings.EMBEDDING_API_KEY,
                dimensions=options["dimensions"],
            )
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            target = self._target(options)
            outcome = reembed_run(
                target=target,
                provider=options["provider"] or settings.EMBEDDING_PROVIDER,
                api_base=options["api_base"],
                batch=options["batch"],
                max_batches=options["max_batches"],
                progress=self.stdout.write,
            )
        except (ValueError, SpaceMismatchError) as error:
            raise CommandError(str(error)) from None
        if outcome.complete:
            self.stdout.write(f"{target.model_name} is ready.")
        else:
            self.stdout.write(f"Stopped after {outcome.batches} batches; run again to resume.")
