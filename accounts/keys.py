"""The API key format, ``mxk_<key_id>_<secret>``, and the keyed digest stored for it."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass

from django.conf import settings

KEY_PREFIX = "mxk"
KEY_ID_LENGTH = 16
SECRET_LENGTH = 40
_SECRET_ALPHABET = string.ascii_letters + string.digits
_KEY_PATTERN = re.compile(
    rf"{KEY_PREFIX}_(?P<key_id>[0-9a-f]{{{KEY_ID_LENGTH}}})_(?P<secret>[A-Za-z0-9]{{{SECRET_LENGTH}}})"
)


@dataclass(frozen=True)
class PresentedKey:
    key_id: str
    secret: str


def key_generate() -> tuple[str, str]:
    """A new (key_id, secret) pair; the secret has about 238 bits of entropy."""
    key_id = secrets.token_hex(KEY_ID_LENGTH // 2)
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(SECRET_LENGTH))
    return key_id, secret


def key_format(*, key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}_{key_id}_{secret}"


def key_parse(presented: str) -> PresentedKey | None:
    match = _KEY_PATTERN.fullmatch(presented)
    if match is None:
        return None
    return PresentedKey(key_id=match["key_id"], secret=match["secret"])


def secret_digest(secret: str) -> str:
    pepper = settings.API_KEY_PEPPER
    return hmac.new(pepper.encode(), secret.encode(), hashlib.sha256).hexdigest()


def digests_match(presented_digest: str, stored_digest: str) -> bool:
    return hmac.compare_digest(presented_digest, stored_digest)
