"""Production settings: every secret must come from the environment; nothing has a default."""

from __future__ import annotations

from mirix_site.settings.base import *  # noqa: F403
from mirix_site.settings.env import env_basic_auth, env_bool, env_str

SECRET_KEY = env_str("SECRET_KEY", required=True)
API_KEY_PEPPER = env_str("API_KEY_PEPPER", required=True)
ENCRYPTION_KEY = env_str("ENCRYPTION_KEY", required=True)
# Flower shows every task's arguments and can stop workers: never open in production.
FLOWER_BASIC_AUTH = env_basic_auth("FLOWER_BASIC_AUTH", required=True)
DEBUG = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
