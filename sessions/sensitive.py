"""Sensitive values in a turn's text: API keys, passwords, e-mail addresses, phone numbers.

One detector for everything that must not leak: memory's extractor keeps each value in the
knowledge vault and redacts it from every other memory; the sessions API serves stored turns
with them masked to keys without the secrets permission (the turns stay verbatim in the
database, for re-extraction).
"""

from __future__ import annotations

import re

# What a masked value reads as, in turns and in knowledge-vault items alike.
MASK = "********"
EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_PHONE = re.compile(r"(?<![\w+])\+?\d[\d\s().-]{7,}\d(?!\w)")
_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("api_key", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b")),
    ("api_key", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    ("api_key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("api_key", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("api_key", re.compile(r"\bmxk_[0-9a-f]{16}_[A-Za-z0-9]{40}\b")),
    ("password", re.compile(r"(?i)\b(?:password|passcode|passwd|pin)\s*(?:is|:|=)\s*(\S{4,})")),
]


def sensitive_values(text: str) -> list[tuple[str, str, str]]:
    """Every sensitive value in ``text`` as (kind, value, sensitivity), once each, in the
    order: keys and passwords ("high"), then e-mail addresses and phone numbers ("medium")."""
    found = [
        (kind, match.group(match.lastindex or 0), "high")
        for kind, pattern in _SECRETS
        for match in pattern.finditer(text)
    ]
    found.extend(("email", email, "medium") for email in EMAIL.findall(text))
    for phone in _PHONE.findall(text):
        digits = re.sub(r"\D", "", phone)
        if 9 <= len(digits) <= 15:
            found.append(("phone", phone.strip(), "medium"))
    return list(dict.fromkeys(found))


def sensitive_redacted(text: str, mask: str) -> str:
    """``text`` with each sensitive value replaced by ``mask`` (longest first, so that none
    is left half-replaced)."""
    values = sorted({value for _kind, value, _ in sensitive_values(text)}, key=len, reverse=True)
    for value in values:
        text = text.replace(value, mask)
    return text
