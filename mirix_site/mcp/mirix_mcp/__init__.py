"""mirix-mcp: a mirix_site memory server's tools and learned skills for an MCP client.

``mirix-mcp`` (or ``python -m mirix_mcp``) serves them over stdio for one end user, calling
the server's REST API with ``MIRIX_API_URL``, ``MIRIX_API_KEY`` and ``MIRIX_USER_ID``; the
memory server serves the same at ``/mcp`` over streamable HTTP (``server_create``)."""

from __future__ import annotations

import os
import sys

from mirix_mcp.api import (
    Api,
    ApiError,
    ConfigurationError,
    Naming,
    Settings,
    key_check,
    settings_from_environment,
)
from mirix_mcp.server import server_create

__all__ = ["Api", "ApiError", "Naming", "Settings", "main", "server_create"]


def main() -> None:
    """``mirix-mcp``: the server over stdio for the user the environment names, once the API
    has accepted its key."""
    try:
        settings = settings_from_environment(os.environ)
        key_check(settings)
    except (ConfigurationError, ApiError) as error:
        # Before any protocol traffic: the MCP client shows the server's stderr.
        sys.stderr.write(f"mirix-mcp: {error}\n")
        raise SystemExit(2) from None
    api = Api(settings)
    seconds = float(os.environ.get("MIRIX_SKILLS_POLL_SECONDS", "") or 30)
    server_create(lambda: api, watch_seconds=seconds if seconds > 0 else None).run("stdio")
