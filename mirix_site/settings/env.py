"""The one environment reader: every setting that comes from the environment is parsed here.

Parsing is strict. A value that does not parse stops the process at start with an
``ImproperlyConfigured`` naming the variable, instead of running with a silently wrong value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$")


def _raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _fail(name: str, value: str, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"Environment variable {name}={value!r} is invalid: expected {expected}."
    )


def env_str(
    name: str,
    default: str | None = None,
    *,
    required: bool = False,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The variable's value (``environ``: read from this mapping, not the process's own)."""
    value = _raw(name, environ)
    if value is None:
        if required:
            raise ImproperlyConfigured(f"Environment variable {name} is required and not set.")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _fail(name, value, "one of true/false, 1/0, yes/no, on/off")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise _fail(name, value, "an integer") from None
    if minimum is not None and parsed < minimum:
        raise _fail(name, value, f"an integer >= {minimum}")
    return parsed


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise _fail(name, value, "a number") from None
    if minimum is not None and parsed < minimum:
        raise _fail(name, value, f"a number >= {minimum}")
    return parsed


def env_choice(name: str, default: str, choices: Sequence[str]) -> str:
    value = _raw(name)
    if value is None:
        return default
    if value not in choices:
        raise _fail(name, value, "one of " + ", ".join(choices))
    return value


def env_list(
    name: str,
    default: Sequence[str],
    *,
    choices: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Comma-separated items; with ``choices``, each must be one of them."""
    value = _raw(name, environ)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",") if item.strip()]
    if choices is not None and (not items or any(item not in choices for item in items)):
        raise _fail(name, value, "a comma-separated list of " + ", ".join(choices))
    return items


def env_duration(name: str, default: str) -> float:
    """Seconds, from ``90``, ``90s``, ``30m``, ``48h`` or ``2d``."""
    value = _raw(name) or default
    match = _DURATION.match(value)
    if not match:
        raise _fail(name, value, "a duration such as 3600, 90s, 30m, 48h or 2d")
    return float(match.group(1)) * _DURATION_SECONDS[match.group(2)]


def env_rate(name: str, default: str) -> str:
    """A request rate such as ``6000/min``; returned normalized to ``<count>/<period letter>``."""
    value = _raw(name) or default
    match = _RATE.match(value)
    if not match:
        raise _fail(name, value, "a rate such as 100/s, 6000/min, 100000/hour or 1000000/day")
    return f"{int(match.group(1))}/{match.group(2)[0]}"


def env_basic_auth(
    name: str, *, required: bool = False, environ: Mapping[str, str] | None = None
) -> list[str]:
    """HTTP basic-auth credentials, ``user:password`` or several separated by commas (Flower's
    ``--basic-auth``, which reads the variable itself and splits it the same way). A user
    holds no colon; neither part is empty or starts or ends with a space (Flower would compare
    it as written, so the login the operator meant would fail)."""
    value = env_str(name, required=required, environ=environ)
    if value is None:
        return []
    credentials = value.split(",")
    for credential in credentials:
        user, colon, password = credential.partition(":")
        if not (colon and user and password) or any(
            part != part.strip() for part in (user, password)
        ):
            raise ImproperlyConfigured(
                f"Environment variable {name} is invalid: expected user:password (several "
                "separated by commas), each with a user and a password and no spaces around "
                "them."
            )
    return credentials


def env_url(name: str, default: str | None, *, schemes: Sequence[str]) -> str | None:
    value = _raw(name)
    if value is None:
        return default
    parts = urlsplit(value)
    if parts.scheme not in schemes or not (parts.netloc or parts.path or parts.query):
        raise _fail(name, value, "a URL with scheme " + " or ".join(schemes))
    return value
