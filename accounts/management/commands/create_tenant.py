from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.services import tenant_create


class Command(BaseCommand):
    help = "Create an organization with one client and an API key; the key is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="organization name")
        parser.add_argument("--client", default="default", help="client (application) name")
        parser.add_argument("--key-name", default="", help="a label for the API key")
        parser.add_argument("--read-only", action="store_true", help="issue a read-only key")

    def handle(self, *args: Any, **options: Any) -> None:
        issued = tenant_create(
            organization_name=options["organization"],
            client_name=options["client"],
            key_name=options["key_name"],
            read_only=options["read_only"],
        )
        client = issued.api_key.client
        self.stdout.write(f"organization: {client.organization_id}")
        self.stdout.write(f"client:       {client.pk}")
        self.stdout.write(f"api key:      {issued.plaintext}")
        self.stdout.write("The API key is shown only now; store it somewhere safe.")
