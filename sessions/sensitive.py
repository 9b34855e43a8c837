"""Sensitive values in text: credentials, private keys, contact details, account numbers.

One detector for everything that must not leak. Memory's extractor keeps each value in the
knowledge vault and redacts it from every other memory; whatever else the server derives from
turns (lessons, experiences, skills and their versions, exports) is redacted before it is
stored; the sessions API serves stored turns with the values masked to keys without the
secrets permission (the turns stay verbatim in the database, for re-extraction).

Where each form is found:
- token formats (GitHub, GitLab, Stripe, AWS, JWT, Slack, SendGrid, PyPI, private-key
  headers, ...): the regular expressions of ``detect-secrets``' plugins, so that new formats
  arrive with the library; the few it lacks (GitHub's fine-grained tokens, current OpenAI and
  Anthropic keys, Hugging Face, Google, Stripe test keys, our own keys) are listed here;
- a value given to a secret-sounding name (``"db_password": "…"``, ``DB_PASSWORD=…``,
  ``client secret: …``): detect-secrets' keyword list, plus the token words it leaves out;
- prose ("my password is …", "passphrase …", an HTTP ``Authorization`` header): our rules;
- IBANs and payment cards: candidates validated by ``python-stdnum`` (mod 97, Luhn);
  phone numbers: ``phonenumbers`` (international forms, and national ones of
  ``PHONE_DEFAULT_REGION``).

A redacted value becomes a placeholder that names its kind (``<password>``, ``<github-token>``),
which the detector never takes for a value again: redacting twice changes nothing.
``bench/secrets_corpus.jsonl`` is the labelled corpus it is measured on (``bench/secrets.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import phonenumbers
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import DENYLIST
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from django.conf import settings
from stdnum import iban, luhn

# What a value reads as where it is masked rather than redacted: served turns, vault items.
MASK = "********"


@dataclass(frozen=True)
class SensitiveKind:
    """A kind of sensitive value: its name (the placeholder's word), how a person would call
    it, and how sensitive it is (a knowledge-vault item's sensitivity)."""

    name: str
    caption: str
    sensitivity: str = "high"

    @property
    def placeholder(self) -> str:
        return f"<{self.name}>"


def _kinds(*kinds: SensitiveKind) -> dict[str, SensitiveKind]:
    return {kind.name: kind for kind in kinds}


KINDS = _kinds(
    SensitiveKind("password", "Password"),
    SensitiveKind("secret", "Secret"),
    SensitiveKind("api-key", "API key"),
    SensitiveKind("access-token", "Access token"),
    SensitiveKind("private-key", "Private key"),
    SensitiveKind("github-token", "GitHub token"),
    SensitiveKind("gitlab-token", "GitLab token"),
    SensitiveKind("stripe-key", "Stripe key"),
    SensitiveKind("aws-access-key", "AWS access key"),
    SensitiveKind("aws-secret-key", "AWS secret key"),
    SensitiveKind("azure-storage-key", "Azure storage key"),
    SensitiveKind("jwt", "JSON web token"),
    SensitiveKind("slack-token", "Slack token"),
    SensitiveKind("openai-key", "OpenAI key"),
    SensitiveKind("anthropic-key", "Anthropic key"),
    SensitiveKind("huggingface-token", "Hugging Face token"),
    SensitiveKind("google-api-key", "Google API key"),
    SensitiveKind("npm-token", "npm token"),
    SensitiveKind("pypi-token", "PyPI token"),
    SensitiveKind("sendgrid-key", "SendGrid key"),
    SensitiveKind("twilio-key", "Twilio key"),
    SensitiveKind("discord-token", "Discord token"),
    SensitiveKind("telegram-token", "Telegram token"),
    SensitiveKind("mailchimp-key", "Mailchimp key"),
    SensitiveKind("square-token", "Square token"),
    SensitiveKind("mirix-key", "mirix_site API key"),
    SensitiveKind("iban", "IBAN"),
    SensitiveKind("card-number", "Payment card number"),
    SensitiveKind("email", "Email address", "medium"),
    SensitiveKind("phone", "Phone number", "medium"),
)


@dataclass(frozen=True)
class Found:
    """One sensitive value in a text, where it is."""

    kind: SensitiveKind
    start: int
    end: int
    value: str

    @classmethod
    def given(cls, kind: str, value: str) -> Found:
        """A value known to be sensitive, found nowhere in particular (a secret an LLM filed
        in the knowledge vault): ``kind`` a name of ``KINDS``, else a secret."""
        return cls(KINDS.get(kind, KINDS["secret"]), 0, len(value), value)


# --- Token formats ------------------------------------------------------------------------------

# The library's patterns match a token's start (some stop early: JWT's last part is lazy,
# GitHub's length is exact); a token runs on to the end of its characters.
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_\-+/=.]*")
_WORD_BEFORE = re.compile(r"[A-Za-z0-9_]")

_LIBRARY_TOKENS: list[tuple[str, type]] = [
    ("aws-access-key", AWSKeyDetector),
    ("azure-storage-key", AzureStorageKeyDetector),
    ("discord-token", DiscordBotTokenDetector),
    ("github-token", GitHubTokenDetector),
    ("gitlab-token", GitLabTokenDetector),
    ("jwt", JwtTokenDetector),
    ("mailchimp-key", MailchimpDetector),
    ("openai-key", OpenAIDetector),
    ("pypi-token", PypiTokenDetector),
    ("sendgrid-key", SendGridDetector),
    ("slack-token", SlackDetector),
    ("square-token", SquareOAuthDetector),
    ("stripe-key", StripeDetector),
    ("telegram-token", TelegramBotTokenDetector),
]
# Formats detect-secrets 1.5 does not know.
_OWN_TOKENS: list[tuple[str, str]] = [
    ("github-token", r"github_pat_[A-Za-z0-9_]{40,}"),
    ("anthropic-key", r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai-key", r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("stripe-key", r"[sr]k_test_[0-9a-zA-Z]{16,}"),
    ("huggingface-token", r"hf_[A-Za-z0-9]{30,}"),
    ("google-api-key", r"AIza[0-9A-Za-z_-]{35}"),
    ("npm-token", r"npm_[A-Za-z0-9]{36}"),
    ("twilio-key", r"SK[0-9a-f]{32}"),
    ("mirix-key", r"mxk_[0-9a-f]{16}_[A-Za-z0-9]{40}"),
]


@cache
def _token_patterns() -> list[tuple[SensitiveKind, re.Pattern[str]]]:
    patterns = [
        (KINDS[kind], pattern)
        for kind, plugin in _LIBRARY_TOKENS
        for pattern in plugin.denylist
        # AWS's second pattern is a quoted assignment, found by the keyword rule below.
        if not (plugin is AWSKeyDetector and "aws" in pattern.pattern)
    ]
    patterns += [(KINDS[kind], re.compile(pattern)) for kind, pattern in _OWN_TOKENS]
    return patterns


# A token is a long run of these characters: only such runs are matched against the formats
# (prose has few), which keeps the detector's cost near that of one regular expression.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_\-+/=.:]{16,}")


def _tokens(text: str) -> Iterable[Found]:
    for run in _TOKEN_RUN.finditer(text):
        for kind, pattern in _token_patterns():
            for match in pattern.finditer(text, run.start(), run.end()):
                start = match.start()
                if start and _WORD_BEFORE.match(text, start - 1):
                    continue  # inside a longer word: not this format
                end = _TOKEN_CHARS.match(text, match.end()).end()
                value = text[start:end].rstrip(".")
                if kind.name == "jwt" and not JwtTokenDetector.is_formally_valid(value):
                    continue
                yield Found(kind, start, start + len(value), value)


# detect-secrets recognizes a private key by its header; the key is the whole block.
_PRIVATE_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_KEY_BODY = re.compile(r"(?:[A-Za-z0-9+/=:\-\\ \t\r]|\\n|\n)*")


def _private_keys(text: str) -> Iterable[Found]:
    if "PRIVATE" not in text and "PuTTY" not in text:
        return
    for pattern in PrivateKeyDetector.denylist:
        for match in pattern.finditer(text):
            start = text.rfind("-----", 0, match.start())
            start = start if start >= 0 and match.start() - start <= 6 else match.start()
            end_marker = _PRIVATE_KEY_END.search(text, match.end())
            # A block cut short (a clipped log) is redacted up to where its body ends.
            end = end_marker.end() if end_marker else _KEY_BODY.match(text, match.end()).end()
            yield Found(KINDS["private-key"], start, end, text[start:end])


# --- Values given to secret-sounding names ------------------------------------------------------

# detect-secrets' keyword list (password, passwd, pwd, secret, api_key, db_pass, private_key,
# ...) and the token words it leaves out. The name must end with the word: ``max_tokens``,
# ``token_count`` and ``password_min_length`` name no secret.
_SECRET_WORDS = "|".join(
    [
        *DENYLIST,
        "passphrase",
        "passcode",
        r"(?:access|auth|bearer|refresh|session|api|bot|personal_access|id)?_?token",
        r"(?:access|secret|signing|encryption|master|license|app|client|license)_?key",
        "credentials?",
        "client_?secret",
    ]
)
_QUOTED = r"\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"|'(?P<sq>[^'\n]*)'"
# Any name given a value; the name is then checked against the words (one pass over the
# text, rather than the words tried at every character).
_ASSIGNED = re.compile(
    r"(?<![\w.-])(?P<name>[\w.-]+)[\"']?\s*(?::=|=>|[:=])\s*"
    rf"(?:{_QUOTED}|(?P<bare>[^\s\"'`,;]+))"
)
_SECRET_NAME = re.compile(rf"(?:{_SECRET_WORDS})$", re.IGNORECASE)
# A name written as words: "client secret: …", "API key = …".
_SPOKEN_NAME = re.compile(
    r"\b(?P<name>(?:client|app|api|access|secret|private|signing)[ -](?:secret|key|token)"
    r"|(?:access|auth|bearer|api|bot|refresh) token)\s*(?::|=|\bis\b:?)\s*"
    rf"(?:{_QUOTED}|(?P<bare>[^\s\"'`,;]+))",
    re.IGNORECASE,
)
_NAME_KIND = [
    (re.compile(r"aws.*(?:secret|key)", re.I), "aws-secret-key"),
    (re.compile(r"pass|pwd|pin\b", re.I), "password"),
    (re.compile(r"token", re.I), "access-token"),
    (re.compile(r"key", re.I), "api-key"),
]


def _name_kind(name: str) -> SensitiveKind:
    return KINDS[next((kind for pattern, kind in _NAME_KIND if pattern.search(name)), "secret")]


# What a name may be given that is no secret: a reference to where the secret is, a
# template, a placeholder, a value left empty.
_NOT_A_VALUE = re.compile(
    r"^(?:\$\{?\w+\}?|\[.*|\{\{.*\}\}|\{.*\}|<[^<>]*>|%\(?\w+\)?s?|\*+|x{3,}|X{3,}|\.{3,}|…|"
    r"(?:YOUR|MY|THE|ENTER|INSERT|REPLACE)[_-][\w-]*|[\w-]*(?:_HERE|_PLACEHOLDER)|"
    r"null|none|nil|true|false|undefined|required|optional|redacted|hidden|masked|"
    r"(?:os\.)?(?:environ|getenv|env)\b.*|process\.env\..*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"
    r"|\w+\(.*|\w+\[.*|-?\d{1,3})$",
    re.IGNORECASE,
)


def _plausible(value: str) -> bool:
    return len(value) >= 3 and not _NOT_A_VALUE.match(value)


def _assigned(text: str) -> Iterable[Found]:
    lower = text.lower()
    patterns = [_ASSIGNED] if ":" in text or "=" in text else []
    if any(word in lower for word in ("key", "secret", "token")):
        patterns.append(_SPOKEN_NAME)
    for pattern in patterns:
        for match in pattern.finditer(text):
            if pattern is _ASSIGNED and not _SECRET_NAME.search(match.group("name")):
                continue
            group = next(g for g in ("dq", "sq", "bare") if match.group(g) is not None)
            value = match.group(group)
            if group == "bare":
                value = value.rstrip(".,;:)]}")
            if not _plausible(value):
                continue
            start = match.start(group)
            yield Found(_name_kind(match.group("name")), start, start + len(value), value)


# --- Prose --------------------------------------------------------------------------------------

# "my password is hunter22", "the PIN: 4821", "passphrase correct-horse-battery".
_SAID_PASSWORD = re.compile(
    r"\b(?P<name>pass(?:word|wd|phrase|code)|pwd|pin(?:\s+code)?)"
    r"(?:\s+(?:for|of|to|on)\s+(?:the\s+|my\s+|our\s+)?[\w.@-]+)?"
    r"(?P<said>\s*(?:is|was|will be|would be|=|:)\s*:?\s*|\s+)"
    r"[\"'“`]?(?P<value>[^\s\"'”`]{4,})",
    re.IGNORECASE,
)
# Words that follow "password is" without being one.
_NOT_A_PASSWORD = frozenset(
    re.findall(
        r"\w+",
        """required incorrect wrong invalid correct valid too not empty missing expired changed
        reset the a an set stored saved same different weak strong long short hidden masked
        redacted protected encrypted hashed needed optional ignored unknown known secret field
        fields must should will can cannot manager managers policy policies change changes
        length rules rule prompt used being still also only please""",
    )
)
_PROSE_WORD = re.compile(r"^[a-z]+[.,;:!?)]*$")


def _said_passwords(text: str) -> Iterable[Found]:
    lower = text.lower()
    if not any(word in lower for word in ("pass", "pwd", "pin")):
        return
    for match in _SAID_PASSWORD.finditer(text):
        value = match.group("value").rstrip(".,;:)")
        said = match.group("said").strip()
        if not _plausible(value) or value.lower() in _NOT_A_PASSWORD:
            continue
        # Without "is" or ":" the next word must look like a secret, not prose.
        if not said and _PROSE_WORD.match(value):
            continue
        if match.group("name").lower().startswith("pin") and not value.isdigit():
            continue
        start = match.start("value")
        yield Found(KINDS["password"], start, start + len(value), value)


_AUTHORIZATION = re.compile(
    r"\b(?:Bearer|Token|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{12,})", re.IGNORECASE
)
# Credentials in a URL: scheme://user:password@host.
_URL_PASSWORD = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s/:@]+:(?P<value>[^\s/@]+)@", re.IGNORECASE
)


def _headers_and_urls(text: str) -> Iterable[Found]:
    lower = text.lower()
    spoken = any(word in lower for word in ("bearer", "basic", "token"))
    for match in _AUTHORIZATION.finditer(text) if spoken else ():
        value = match.group("value")
        if _plausible(value) and any(char.isdigit() for char in value):
            yield Found(KINDS["access-token"], match.start("value"), match.end("value"), value)
    for match in _URL_PASSWORD.finditer(text) if "://" in text and "@" in text else ():
        value = match.group("value")
        if _plausible(value):
            yield Found(KINDS["password"], match.start("value"), match.end("value"), value)


# --- Personal data ------------------------------------------------------------------------------

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])")
# Card networks' first digits (Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay):
# with the Luhn check, what tells a card from a long order number.
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[0689]|6(?:011|5|4[4-9]|2))")
_NUMBER = re.compile(r"\d\d")
_PHONE_HINT = re.compile(r"\d[\d\s().-]{5,}\d")


def _personal(text: str) -> Iterable[Found]:
    for match in EMAIL.finditer(text) if "@" in text else ():
        yield Found(KINDS["email"], match.start(), match.end(), match.group())
    if not _NUMBER.search(text):
        return  # IBANs, cards and phones all hold a run of digits
    for match in _IBAN.finditer(text):
        if iban.is_valid(match.group()):
            yield Found(KINDS["iban"], match.start(), match.end(), match.group())
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and luhn.is_valid(digits):
            yield Found(KINDS["card-number"], match.start(), match.end(), match.group())
    if _PHONE_HINT.search(text):
        matcher = phonenumbers.PhoneNumberMatcher(
            text, settings.PHONE_DEFAULT_REGION, leniency=phonenumbers.Leniency.VALID
        )
        for match in matcher:
            yield Found(KINDS["phone"], match.start, match.end, match.raw_string)


# --- The detector -------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"<[a-z-]+>")

_FINDERS = (_private_keys, _tokens, _headers_and_urls, _assigned, _said_passwords, _personal)


def sensitive_found(text: str) -> list[Found]:
    """Every sensitive value in ``text``, in order, none overlapping another: of two that
    overlap, the one that starts first is kept, and of two that start together the one found
    by the more specific rule (the order of ``_FINDERS``: a token's format before a name's
    value before prose), then the longer."""
    found = sorted(
        (
            (item.start, rank, item.start - item.end, item)
            for rank, finder in enumerate(_FINDERS)
            for item in finder(text)
            if item.value and not _PLACEHOLDER.fullmatch(item.value)
        ),
        key=lambda entry: entry[:3],
    )
    kept: list[Found] = []
    for *_, item in found:
        if not kept or item.start >= kept[-1].end:
            kept.append(item)
    return kept


def sensitive_values(text: str) -> list[tuple[str, str, str]]:
    """Every sensitive value in ``text`` as (kind, value, sensitivity), once each."""
    return list(
        dict.fromkeys(
            (item.kind.name, item.value, item.kind.sensitivity) for item in sensitive_found(text)
        )
    )


# A value known from elsewhere (a password given in one turn, echoed in a tool's result) is
# replaced wherever it appears, if it is long enough not to be an ordinary word or number.
_KNOWN_MIN_CHARS = 6


def sensitive_redacted(text: str, *, mask: str | None = None, known: Iterable[Found] = ()) -> str:
    """``text`` with every sensitive value replaced by ``mask``, or by its kind's placeholder
    (``<password>``). ``known``: values found elsewhere (in the other turns of a session),
    replaced here too wherever they appear."""
    found = sensitive_found(text)
    parts, position = [], 0
    for item in found:
        parts += [text[position : item.start], mask or item.kind.placeholder]
        position = item.end
    parts.append(text[position:])
    redacted = "".join(parts)
    others = {
        item.value: item.kind
        for item in (*found, *known)
        if len(item.value) >= _KNOWN_MIN_CHARS and item.value in redacted
    }
    for value in sorted(others, key=len, reverse=True):
        redacted = redacted.replace(value, mask or others[value].placeholder)
    return redacted


def sensitive_redacted_json(
    value: Any, *, mask: str | None = None, known: Iterable[Found] = ()
) -> Any:
    """``value`` (decoded JSON) with every sensitive value redacted as ``sensitive_redacted``
    does, in its strings and keys, and with the value of a secret-sounding name
    (``{"db_password": "..."}``) replaced whole, whatever it looks like."""
    known = tuple(known)
    if isinstance(value, str):
        return sensitive_redacted(value, mask=mask, known=known)
    if isinstance(value, list):
        return [sensitive_redacted_json(item, mask=mask, known=known) for item in value]
    if not isinstance(value, dict):
        return value
    redacted = {}
    for key, item in value.items():
        name = str(key)
        if (
            isinstance(item, str | int | float)
            and not isinstance(item, bool)
            and _SECRET_NAME.search(name)
            and _plausible(str(item))
        ):
            redacted[sensitive_redacted(name, mask=mask, known=known)] = (
                mask or _name_kind(name).placeholder
            )
        else:
            redacted[sensitive_redacted(name, mask=mask, known=known)] = sensitive_redacted_json(
                item, mask=mask, known=known
            )
    return redacted


def sensitive_known(values: Iterable[Any]) -> list[Found]:
    """The sensitive values found in any of ``values`` (texts, or decoded JSON such as a
    turn's tool calls, where a secret-sounding name's value counts whole): what redacting
    the turns of one session uses, since a value given in one reappears bare in another."""
    found: list[Found] = []
    for value in values:
        if isinstance(value, str):
            found += sensitive_found(value)
        elif isinstance(value, list):
            found += sensitive_known(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, str) and _SECRET_NAME.search(str(key)) and _plausible(item):
                    found.append(Found.given(_name_kind(str(key)).name, item))
            found += sensitive_known([str(key) for key in value] + list(value.values()))
    return found


class _Turn(Protocol):
    text: str
    tool_calls: list[dict[str, Any]] | None


def turns_redacted(turns: Sequence[_Turn]) -> list[tuple[str, list[dict[str, Any]] | None]]:
    """The text and tool calls of each of one conversation's turns, redacted, each also of the
    values found in the others (a password given as a tool's argument, echoed bare in its
    result): what whatever is derived from a conversation is read from."""
    known = sensitive_known([turn.text for turn in turns] + [turn.tool_calls for turn in turns])
    return [
        (
            sensitive_redacted(turn.text, known=known),
            sensitive_redacted_json(turn.tool_calls, known=known),
        )
        for turn in turns
    ]
