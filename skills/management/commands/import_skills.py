"""``manage.py import_skills ORG USER INDEX [--client CLIENT] [--dry-run]``: import the skills an
Agent Skills discovery index lists (a file, or an http(s) URL such as another server's
``/.well-known/agent-skills/index.json``) as the end user's skills, each checked against its
digest and written as a version authored ``import`` (``skills.services.imports``). Reports
each entry: created, updated, unchanged, refused (why) or skipped; fails when one was
refused."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.scopes import end_user_named, tenant_named
from skills.services.imports import SkillIndexError, skills_index_import

_DRY = {"created": "would be created", "updated": "would be updated"}


class Command(BaseCommand):
    help = (
        "Import the skills of an Agent Skills discovery index (index.json, a file or an "
        "http(s) URL) as an end user's skills: each SKILL.md checked against its digest and "
        "written as a new version (author import); --dry-run reports and writes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="the organization's id")
        parser.add_argument("user", help="the end user's id, as the API names them")
        parser.add_argument("index", help="the discovery index: a file path or an http(s) URL")
        parser.add_argument(
            "--client",
            help="the client the skills are written for, by id or name (default: the "
            "organization's only client)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what each entry would do; write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(organization_id=options["organization"], client=options["client"])
        end_user = end_user_named(tenant=tenant, user_id=options["user"])
        dry_run = options["dry_run"]
        try:
            done = skills_index_import(
                tenant=tenant, end_user=end_user, location=options["index"], dry_run=dry_run
            )
        except SkillIndexError as error:
            raise CommandError(f"Could not import {options['index']}: {error}") from None
        for note in done.notes:
            self.stdout.write(f"  note: {note}")
        for entry in done.entries:
            shown = _DRY.get(entry.outcome, entry.outcome) if dry_run else entry.outcome
            because = f" ({entry.reason})" if entry.reason else ""
            self.stdout.write(f"  {entry.name}: {shown}{because}")
        counts = ", ".join(
            f"{done.count(outcome)} {outcome}"
            for outcome in ("created", "updated", "unchanged", "refused", "skipped")
        )
        who = f"{end_user.user_id} of {tenant.organization.pk} (client {tenant.client.name})"
        if dry_run:
            self.stdout.write(
                f"Dry run: importing {options['index']} for {who}: {counts}. Nothing was changed."
            )
        else:
            self.stdout.write(f"Imported {options['index']} for {who}: {counts}.")
        if done.count("refused"):
            raise CommandError(f"{done.count('refused')} entries were refused (see above).")
