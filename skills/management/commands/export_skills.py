"""``manage.py export_skills ORG USER [--client CLIENT] [-o FILE.zip | --dir DIR]``: the user's
served skills as Agent Skills ``<name>/SKILL.md`` folders, the bytes ``GET /skills/export``
answers (``skills.export``), to a zip or unpacked into a folder; in the folder, beside them,
their discovery index (``index.json``, relative urls): the tree a publisher serves at
``/.well-known/agent-skills/``, and what ``import_skills`` reads."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.scopes import end_user_named, tenant_named
from skills.export import discovery_index, skills_zip
from skills.selectors import skills_served
from skills.services.skills import skill_confidence


class Command(BaseCommand):
    help = (
        "Export an end user's served skills as Agent Skills: a zip of <name>/SKILL.md, as "
        "GET /skills/export answers it (-o), or those folders in a directory with their "
        "discovery index, index.json (--dir)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="the organization's id")
        parser.add_argument("user", help="the end user's id, as the API names them")
        parser.add_argument(
            "--client",
            help="the client whose skills (and those it has read scopes on) are exported, by "
            "id or name (default: the organization's only client)",
        )
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("-o", "--output", type=Path, help="the zip file to write")
        target.add_argument(
            "--dir", type=Path, help="the directory to write the folders and index.json in"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(organization_id=options["organization"], client=options["client"])
        end_user = end_user_named(tenant=tenant, user_id=options["user"])
        skills = skills_served(tenant=tenant, end_user=end_user)
        body = skills_zip(skills, confidence=skill_confidence)
        output, directory = options["output"], options["dir"]
        try:
            if output is not None:
                output.write_bytes(body)
            else:
                directory.mkdir(parents=True, exist_ok=True)
                with zipfile.ZipFile(io.BytesIO(body)) as archive:
                    archive.extractall(directory)
                index = discovery_index(
                    skills, confidence=skill_confidence, url=lambda skill: f"{skill.name}/SKILL.md"
                )
                (directory / "index.json").write_text(json.dumps(index, indent=2) + "\n")
        except OSError as error:
            raise CommandError(f"Could not write the export: {error}") from None
        for skill in skills:
            self.stdout.write(f"  {skill.name}/SKILL.md  v{skill.version} {skill.status}")
        self.stdout.write(
            f"Exported {len(skills)} skills of {end_user.user_id} of {tenant.organization.pk} "
            f"(client {tenant.client.name}) to {output if output is not None else directory}."
        )
