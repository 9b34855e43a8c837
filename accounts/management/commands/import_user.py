from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.scopes import tenant_named
from accounts.services import UserImportError, end_user_import
from mirix_site.common.history import OPERATOR, history_context


class Command(BaseCommand):
    help = (
        "Import an end user's export file (export_user) into an end user of an organization "
        "(created if new), as rows of one of its clients: references re-linked, memories, "
        "experiences and skills indexed and embedded as new ones are. All or nothing: a bad "
        "line refuses the whole file, naming it. Importing the same file into the same user "
        "and client twice is refused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="the organization's id")
        parser.add_argument("user", help="the end user's id, as the API names them")
        parser.add_argument(
            "file", nargs="?", help="the export file (default: read from stdin)", default=None
        )
        parser.add_argument(
            "--client",
            required=True,
            help="the client of the organization the rows go to, by id or name",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="read and check every line, count what would be written, and change nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        organization_id, user_id = options["organization"], options["user"]
        tenant = tenant_named(organization_id=organization_id, client=options["client"])
        client = tenant.client
        dry_run = options["dry_run"]
        path = options["file"]
        try:
            stream = sys.stdin if path in (None, "-") else open(path, encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None
        try:
            with history_context(OPERATOR, operator="import_user"):
                summary = end_user_import(
                    tenant=tenant,
                    user_id=user_id,
                    lines=stream,
                    dry_run=dry_run,
                    progress=lambda rows: self.stderr.write(f"  {rows:,} rows read"),
                )
        except UserImportError as exc:
            raise CommandError(f"Nothing was imported: {exc}") from None
        except UnicodeDecodeError:
            raise CommandError("Nothing was imported: the file is not UTF-8 text.") from None
        finally:
            if stream is not sys.stdin:
                stream.close()
        width = max(map(len, summary.counts), default=0)
        for kind, count in summary.counts.items():
            self.stdout.write(f"  {kind:<{width}}  {count:>9,}")
        total = sum(summary.counts.values())
        dropped = (
            f" {summary.dropped_references:,} provenance ids named rows the file does not hold"
            " and were left out."
            if summary.dropped_references
            else ""
        )
        if dry_run:
            self.stdout.write(
                f"Dry run: importing export {summary.export_id} into {user_id} of "
                f"{organization_id} would write {total:,} rows of {len(summary.counts)} kinds."
                f"{dropped} Nothing was changed."
            )
        else:
            self.stdout.write(
                f"Imported export {summary.export_id} into {user_id} of {organization_id} "
                f"(client {client.pk}): {total:,} rows of {len(summary.counts)} kinds.{dropped}"
            )
