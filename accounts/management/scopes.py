"""What the client commands share: clients named on the command line."""

from __future__ import annotations

from django.core.management.base import CommandError

from accounts.models import Client


def clients_get(client_ids: list[str]) -> list[Client]:
    """The clients with these ids, in order; a ``CommandError`` naming any that does not
    exist."""
    found = Client.objects.in_bulk(client_ids)
    missing = [client_id for client_id in client_ids if client_id not in found]
    if missing:
        raise CommandError(f"No client with id {', '.join(map(repr, missing))}.")
    return [found[client_id] for client_id in client_ids]
