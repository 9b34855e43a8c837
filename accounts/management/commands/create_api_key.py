from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Client
from accounts.services import api_key_create


class Command(BaseCommand):
    help = "Issue a new API key for an existing client; the key is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("client_id", help="the client's id (client-...)")
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument("--read-only", action="store_true", help="issue a read-only key")
        parser.add_argument(
            "--secrets",
            action="store_true",
            help="the key may show its client's knowledge-vault values (include_secrets=true)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            client = Client.objects.get(pk=options["client_id"])
        except Client.DoesNotExist:
            raise CommandError(f"No client with id {options['client_id']!r}.") from None
        issued = api_key_create(
            client=client,
            name=options["name"],
            read_only=options["read_only"],
            reveals_secrets=options["secrets"],
        )
        self.stdout.write(issued.plaintext)
