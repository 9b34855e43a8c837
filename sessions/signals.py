"""Signals this app sends; higher apps (skills) connect to them in their AppConfig.ready()."""

from __future__ import annotations

from django.dispatch import Signal

# Sent after a session closes (explicitly, idle, or by the sweeper), once per close, after the
# transaction commits. Keyword arguments: ``session`` (the closed Session).
session_closed = Signal()
