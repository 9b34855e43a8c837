from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The dashboard's daily figures (a table) and the admin site that shows them
    (``mirix_site.console.site``)."""

    name = "mirix_site.console"
    label = "console"
    verbose_name = "Console"
