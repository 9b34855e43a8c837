from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import ApiKey
from accounts.selectors import api_key_find
from accounts.services import api_key_revoke


class Command(BaseCommand):
    help = "Revoke an API key, given its key id or the full key. It stops working at once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="the key id (the part after mxk_) or the whole key")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            api_key = api_key_find(reference=options["key"])
        except ApiKey.DoesNotExist:
            raise CommandError("No such API key.") from None
        api_key_revoke(api_key=api_key)
        self.stdout.write(f"Revoked mxk_{api_key.key_id}_… of client {api_key.client_id}.")
