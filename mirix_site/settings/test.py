"""Settings for the test suite: the real PostgreSQL and Redis, fast hashing, fixed secrets."""

from __future__ import annotations

from mirix_site.settings.base import *  # noqa: F403
from mirix_site.settings.base import CACHES, DATABASES, INSTALLED_APPS

# A searchable kind of a test app's own, to show the retrieval engine serves any app's kinds.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.notes"]

SECRET_KEY = "test-secret-key"  # noqa: S105
API_KEY_PEPPER = "test-pepper"
ENCRYPTION_KEY = "test-encryption-key"
ALLOWED_HOSTS = ["*"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Keep test keys away from a development server sharing the same Redis.
CACHES["default"]["KEY_PREFIX"] = "mirix-test"
API_RATE_LIMIT = "100000/m"
# The suite's many refusals all come from 127.0.0.1; tests of the limits lower these.
AUTH_FAILURE_RATE_LIMIT = "100000/m"
ADMIN_LOGIN_FAILURE_RATE_LIMIT = "100000/m"
# Tests need no durability against OS crashes (see DB_SYNCHRONOUS_COMMIT in base settings).
DATABASES["default"]["OPTIONS"]["options"] = "-c synchronous_commit=off"
# Tests run with the calibrations a fresh install has, but made by tests/conftest.py once a
# process (and inserted again after every transactional test's flush) rather than by each
# migration that measures them. tests/memory/test_gate_setup.py migrates a fresh database
# with the default.
GATE_CALIBRATE_ON_MIGRATE = False
