"""Production settings: every secret must come from the environment; nothing has a default."""

from __future__ import annotations

from mirix_site.settings.base import *  # noqa: F403
from mirix_site.settings.env import env_bool, env_str

SECRET_KEY = env_str("SECRET_KEY", required=True)
API_KEY_PEPPER = env_str("API_KEY_PEPPER", required=True)
ENCRYPTION_KEY = env_str("ENCRYPTION_KEY", required=True)
DEBUG = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
