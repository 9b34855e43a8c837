from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Tenants and API keys"

    def ready(self) -> None:
        from accounts import signals  # noqa: F401  (connects the API key cache invalidation)
