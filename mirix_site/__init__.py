"""The mirix_site project package: settings, root URLs, the Celery app and the launcher."""

from __future__ import annotations

from mirix_site.celery import app as celery_app

__all__ = ["celery_app"]
__version__ = "0.1.0"
