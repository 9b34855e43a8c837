"""Django's admin app with the console's site (INSTALLED_APPS names it in place of
``django.contrib.admin``). A module of its own: an app config is imported before any model."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class ConsoleAdminConfig(AdminConfig):
    """``admin.site`` is the console's site, whose index is the dashboard."""

    default_site = "mirix_site.console.site.ConsoleSite"
