"""Signals this app sends; higher apps (sessions) connect to them in their AppConfig.ready()."""

from __future__ import annotations

from django.dispatch import Signal

# Sent after a remote fetch finishes, stored or failed, once its transaction commits. Keyword
# arguments: ``fetch`` (the ImageFetch, with ``image`` set when stored).
image_fetch_finished = Signal()
