"""``python -m mirix_site.mcp``: the MCP server over stdio (see ``mirix_site.mcp``)."""

from __future__ import annotations

from mirix_site.mcp import main

main()
