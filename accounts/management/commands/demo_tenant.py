from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.models import Client
from accounts.selectors import api_key_authenticate
from accounts.services import api_key_create, tenant_create

DEMO_ORGANIZATION = "Demo organization"
DEMO_CLIENT = "demo"


class Command(BaseCommand):
    help = (
        "Make sure a demo organization, client and API key exist (for `make run`); the key is "
        "written to --key-file and reused while it still works."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--key-file", required=True, type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        key_file: Path = options["key_file"]
        existing = key_file.read_text().strip() if key_file.exists() else ""
        if existing and api_key_authenticate(presented=existing) is not None:
            self.stdout.write(f"Demo API key (reused): {existing}")
            return
        client = (
            Client.objects.filter(name=DEMO_CLIENT, organization__name=DEMO_ORGANIZATION)
            .order_by("created_at")
            .first()
        )
        if client is None:
            issued = tenant_create(
                organization_name=DEMO_ORGANIZATION, client_name=DEMO_CLIENT, key_name="demo"
            )
        else:
            issued = api_key_create(client=client, name="demo")
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key_file.write_text(issued.plaintext + "\n")
        key_file.chmod(0o600)
        self.stdout.write(f"Demo API key (new, also in {key_file}): {issued.plaintext}")
