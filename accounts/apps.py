from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Tenants and API keys"

    def ready(self) -> None:
        # Connect the API key cache invalidation and the admin login failures' counter.
        from accounts import admin_login, signals  # noqa: F401
        from accounts.models import UserImport
        from accounts.portability import portable_skip

        portable_skip(UserImport, "This install's record of the files imported.")
