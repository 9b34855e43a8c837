"""Settings for `make run` on a developer's machine: development secrets are allowed."""

from __future__ import annotations

from mirix_site.settings.base import *  # noqa: F403
from mirix_site.settings.base import API_KEY_PEPPER, ENCRYPTION_KEY, SECRET_KEY

SECRET_KEY = SECRET_KEY or "local-development-secret-key-not-for-production"
API_KEY_PEPPER = API_KEY_PEPPER or "local-development-pepper"
ENCRYPTION_KEY = ENCRYPTION_KEY or "local-development-encryption-key"
