"""Secrets at rest (provider API keys, knowledge-vault values): Fernet, keyed from
``settings.ENCRYPTION_KEY``. Rotating that key makes stored secrets unreadable, by design."""

from __future__ import annotations

import base64
import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


@cache
def _fernet(key_material: str) -> Fernet:
    # Any string is accepted as key material; Fernet needs 32 url-safe base64 bytes.
    digest = hashlib.sha256(key_material.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def secret_encrypt(plaintext: str) -> str:
    if not plaintext:
        return ""
    return _fernet(settings.ENCRYPTION_KEY).encrypt(plaintext.encode()).decode()


def secret_decrypt(token: str) -> str | None:
    """The plaintext, or None when ``token`` is empty or was written under another key."""
    if not token:
        return None
    try:
        return _fernet(settings.ENCRYPTION_KEY).decrypt(token.encode()).decode()
    except InvalidToken:
        return None
