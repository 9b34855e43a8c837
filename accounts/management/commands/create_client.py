from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.management.scopes import clients_get
from accounts.models import Organization
from accounts.services import api_key_create, client_create


class Command(BaseCommand):
    help = (
        "Add a client (an application) to an existing organization, optionally reading what "
        "other clients of it wrote, and optionally with an API key (printed once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization_id", help="the organization's id (org-...)")
        parser.add_argument("name", help="the client's name")
        parser.add_argument(
            "--read-scope",
            action="append",
            default=[],
            metavar="CLIENT_ID",
            help="a client of the same organization whose rows this one may read (repeatable)",
        )
        parser.add_argument("--key", action="store_true", help="also issue an API key")
        parser.add_argument("--read-only", action="store_true", help="the key is read-only")

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            organization = Organization.objects.get(pk=options["organization_id"])
        except Organization.DoesNotExist:
            raise CommandError(f"No organization with id {options['organization_id']!r}.") from None
        if options["read_only"] and not options["key"]:
            raise CommandError("--read-only describes the key: give --key as well.")
        scopes = clients_get(options["read_scope"])
        try:
            client = client_create(
                organization=organization, name=options["name"], read_scopes=scopes
            )
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from None
        self.stdout.write(f"client:       {client.pk}")
        if scopes:
            self.stdout.write(f"reads:        {', '.join(sorted(s.pk for s in scopes))}")
        if options["key"]:
            issued = api_key_create(client=client, read_only=options["read_only"])
            self.stdout.write(f"api key:      {issued.plaintext}")
            self.stdout.write("The API key is shown only now; store it somewhere safe.")
