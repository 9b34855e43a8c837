from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.scopes import end_user_in
from accounts.models import Client
from accounts.selectors import end_user_export

# Lines between two progress lines on stderr.
PROGRESS_EVERY = 1000


class Command(BaseCommand):
    help = (
        "Export everything the server holds about an end user (sessions and turns, the six "
        "memory types, experiences, skills with every version, the images the turns show) as "
        "JSON Lines on stdout, for import_user here or on another install. No vectors: the "
        "import embeds again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="the organization's id")
        parser.add_argument("user", help="the end user's id, as the API names them")
        parser.add_argument(
            "--client",
            help="only the rows this client of the organization wrote (default: every client's)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        organization_id, user_id = options["organization"], options["user"]
        end_user = end_user_in(organization_id=organization_id, user_id=user_id)
        clients = Client.objects.filter(organization_id=organization_id)
        if options["client"] is not None:
            clients = clients.filter(pk=options["client"])
            if not clients.exists():
                raise CommandError(
                    f"No client {options['client']!r} in organization {organization_id!r}."
                )
        written, last = 0, ""
        for line in end_user_export(
            organization=end_user.organization,
            end_user=end_user,
            client_ids=list(clients.values_list("pk", flat=True)),
        ):
            self.stdout.write(line)
            written, last = written + 1, line
            if written % PROGRESS_EVERY == 0:
                self.stderr.write(f"  {written:,} lines written")
        counts = json.loads(last)["counts"]
        kinds = ", ".join(f"{count:,} {kind}" for kind, count in counts.items()) or "no rows"
        self.stderr.write(
            f"Exported {user_id} of {organization_id}: {sum(counts.values()):,} rows ({kinds})."
        )
