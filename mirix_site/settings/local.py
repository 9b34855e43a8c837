"""Settings for `make run` on a developer's machine: development secrets are allowed."""

from __future__ import annotations

from mirix_site.settings.base import *  # noqa: F403
from mirix_site.settings.base import (
    API_KEY_PEPPER,
    DATABASES,
    DB_SYNCHRONOUS_COMMIT_CHOICES,
    ENCRYPTION_KEY,
    SECRET_KEY,
)
from mirix_site.settings.env import env_choice

SECRET_KEY = SECRET_KEY or "local-development-secret-key-not-for-production"
API_KEY_PEPPER = API_KEY_PEPPER or "local-development-pepper"
ENCRYPTION_KEY = ENCRYPTION_KEY or "local-development-encryption-key"
# A development machine trades the last fraction of a second of writes in an OS crash for
# commits that do not wait on the disk (see DB_SYNCHRONOUS_COMMIT in base settings).
DB_SYNCHRONOUS_COMMIT = env_choice("DB_SYNCHRONOUS_COMMIT", "off", DB_SYNCHRONOUS_COMMIT_CHOICES)
DATABASES["default"]["OPTIONS"]["options"] = f"-c synchronous_commit={DB_SYNCHRONOUS_COMMIT}"
