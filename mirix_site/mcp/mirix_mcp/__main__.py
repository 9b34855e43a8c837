"""``python -m mirix_mcp``: the MCP server over stdio (see ``mirix_mcp``)."""

from __future__ import annotations

from mirix_mcp import main

main()
