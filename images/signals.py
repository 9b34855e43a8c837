"""Signals this app sends; higher apps (sessions) connect to them in their AppConfig.ready()."""

from __future__ import annotations

from django.dispatch import Signal

# Sent when a remote fetch finishes, stored or failed, inside the transaction that records it
# (receivers' writes commit with it). Keyword arguments: ``fetch`` (the ImageFetch, with
# ``image`` set when stored).
image_fetch_finished = Signal()
