from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.management.scopes import end_user_in
from accounts.services import end_user_delete, removal_summary


class Command(BaseCommand):
    help = (
        "Forget an end user: delete them and everything every client of the organization "
        "stored about them (sessions, turns, memories, experiences, skills, runs, logs, vectors "
        "and index postings; images no message shows any more), in one transaction."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="the organization's id")
        parser.add_argument("user", help="the end user's id, as the API names them")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="count what would be deleted, kind by kind, and change nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        organization_id, user_id = options["organization"], options["user"]
        end_user = end_user_in(organization_id=organization_id, user_id=user_id)
        dry_run = options["dry_run"]
        removed = removal_summary(end_user_delete(end_user=end_user, dry_run=dry_run))
        width = max(map(len, removed), default=0)
        for name, count in removed.items():
            self.stdout.write(f"  {name:<{width}}  {count:>9,}")
        total = sum(removed.values())
        if dry_run:
            self.stdout.write(
                f"Dry run: forgetting {user_id} of {organization_id} would delete {total:,} "
                f"rows of {len(removed)} kinds. Nothing was changed."
            )
        else:
            self.stdout.write(
                f"Forgot {user_id} of {organization_id}: {total:,} rows of {len(removed)} "
                "kinds deleted."
            )
