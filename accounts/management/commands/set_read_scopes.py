from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.scopes import clients_get
from accounts.services import client_read_scopes_set


class Command(BaseCommand):
    help = (
        "Set which clients of its organization a client may read (replacing the list it had); "
        "--none leaves it reading only its own rows. Takes effect on the next request."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("client_id", help="the client whose read scopes change")
        parser.add_argument("scopes", nargs="*", metavar="CLIENT_ID", help="clients it may read")
        parser.add_argument("--none", action="store_true", help="read no other client")

    def handle(self, *args: Any, **options: Any) -> None:
        if bool(options["scopes"]) == options["none"]:
            raise CommandError("Name the clients it may read, or give --none.")
        (client,) = clients_get([options["client_id"]])
        try:
            client_read_scopes_set(client=client, scopes=clients_get(options["scopes"]))
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from None
        reads = sorted(client.read_scopes.values_list("pk", flat=True))
        self.stdout.write(f"{client.pk} reads: {', '.join(reads) or 'its own rows only'}")
