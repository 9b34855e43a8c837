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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import islice
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
    SensitiveKind("card-code", "Card security code"),
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
    ("api-key", r"lin_api_[A-Za-z0-9]{40}"),
    ("api-key", r"(?:secret|ntn)_[A-Za-z0-9]{43,}"),
    ("api-key", r"rubygems_[0-9a-f]{48}"),
    ("api-key", r"do[opr]_v1_[0-9a-f]{64}"),
    ("api-key", r"shp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}"),
    ("secret", r"whsec_[A-Za-z0-9+/=]{24,}"),
    ("api-key", r"NRAK-[A-Z0-9]{27}"),
    ("access-token", r"sntrys_[A-Za-z0-9+/=_]{50,}"),
    ("access-token", r"(?<=discord\.com/api/webhooks/)\d+/[\w-]{60,}"),
    ("access-token", r"(?<=discordapp\.com/api/webhooks/)\d+/[\w-]{60,}"),
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
                if _filler(value) or "EXAMPLE" in value:
                    continue  # "ghp_xxxx…", "AKIAIOSFODNN7EXAMPLE": a placeholder of the format
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
# ...) and the words it leaves out: tokens, keys of services and headers, session cookies.
_SECRET_WORDS = "|".join(
    [
        *DENYLIST,
        "passphrase",
        "passcode",
        "requirepass",
        "pass",
        "appid",
        "sig",
        r"(?:access|auth|bearer|refresh|session|api|bot|app|personal[_-]access|id)?[_-]?token",
        r"(?:access|secret|signing|encryption|master|license|app|application|client|api|"
        r"subscription|account)[_-]?key",
        "credentials?",
        "auth",
        r"client[_-]?secret",
        r"sess(?:ion)?(?:[_-]?id)?",
        "jsessionid",
        "phpsessid",
        "sid",
    ]
)
# The name must end with the word, at a word's start: ``max_tokens``, ``token_count``,
# ``password_min_length`` and ``io.jsonwebtoken`` name no secret; ``dbPassword`` does.
_SECRET_NAME = re.compile(
    rf"(?:^|(?<=[_.\-\s\"'])|(?<=(?-i:[a-z]))(?=(?-i:[A-Z])))(?:{_SECRET_WORDS})$", re.IGNORECASE
)
# Names of tokens that are no credential: a page's cursor, a form's CSRF value.
_NOT_SECRET_NAME = re.compile(
    r"(?:page|next|continuation|sync|csrf|xsrf|cancellation|resume)[_-]?token$", re.IGNORECASE
)
# Names that are ordinary words as often as secrets ("session", "auth"): their value must
# look like a credential (``_secret_like``, and long).
_LOOSE_NAME = re.compile(
    r"(?:^|[_.\-])(?:auth|sess(?:ion)?(?:[_-]?id)?|sid|sig|jsessionid|phpsessid)$", re.IGNORECASE
)
# A value in quotes, also inside JSON that is itself a string ({\"password\": \"…\"}).
_QUOTED = r"\\?\"(?P<dq>(?:[^\"\\\n]|\\[^\"\n])*)\\?\"|'(?P<sq>[^'\n]*)'"
# Any name given a value (``name: v``, ``name = "v"``, ``['name'] = 'v'``, ``-name=v``); the
# name is then checked against the words (one pass over the text, rather than the words
# tried at every character). Only spaces around the sign: ``NAME=`` ends its line.
_ASSIGNED = re.compile(
    r"(?<![\w.{$-])(?<!\w:)(?P<name>[\w.-]+)(?:\\?[\"'])?\]?[ \t]*(?::=|=>|[:=])[ \t]*"
    rf"(?:{_QUOTED}|(?P<bare>[^\s\"'`,;\\]+))"
)
# An environment list's entry: {"name": "DB_PASSWORD", "value": "…"} (containers, CI).
_NAMED_VALUE = re.compile(
    r"[\"']name\\?[\"']\s*:\s*\\?[\"'](?P<name>[\w.-]+)\\?[\"']\s*,\s*"
    r"\\?[\"']value\\?[\"']\s*:\s*\\?[\"'](?P<dq>[^\"'\\\n]*)"
)
_NAME_KIND = [
    (re.compile(r"aws.*(?:secret|key)", re.I), "aws-secret-key"),
    (re.compile(r"pass|pwd|pin\b", re.I), "password"),
    (re.compile(r"token|sess|sid$", re.I), "access-token"),
    (re.compile(r"key", re.I), "api-key"),
]


def _name_kind(name: str) -> SensitiveKind:
    return KINDS[next((kind for pattern, kind in _NAME_KIND if pattern.search(name)), "secret")]


def _secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


# What a name may be given that is no secret: a reference to where the secret is (a variable,
# a template, an attribute, a call, a command's output, a path, a URL), a placeholder, a value
# left empty or masked, a small number.
_NOT_A_VALUE = re.compile(
    r"^(?:(?-i:\$\{?[A-Z_][A-Z0-9_]*\}?)|\$\{.*|\$\(.*|\{\{.*|\{%.*|!\w+|\[.*|\{.*\}|"
    r"<[^<>]*>|%(?:\(\w+\))?[sd]|\*+|x{3,}|\.{3,}|…|"
    r"password|passwd|pass|pwd|secret|token|key|api_?key|username|user|"
    r"str|string|bytes|int|text|secretstr|optional\[.*|(?-i:[a-z]+(?:_[a-z]+)+)|"
    r"(?-i:[a-z]+(?:[A-Z][a-z]+)+)|v?\d+(?:\.\d+)+|"
    r"(?:YOUR|MY|THE|ENTER|INSERT|REPLACE)[_-][\w-]*|[\w-]*(?:_HERE|_PLACEHOLDER)|"
    r"null|none|nil|true|false|undefined|required|optional|redacted|hidden|masked|"
    r"(?:os\.)?(?:environ|getenv|env)\b.*|process\.env\..*|"
    r"(?-i:[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*\.(?:[a-z_][a-z0-9_]*|[A-Z][A-Z0-9_]*))|"
    r"(?-i:[A-Za-z_][\w.]*[(\[].*)|(?-i:[A-Z][A-Z_]*)|.*(?:\.\.\.|…).*|[•*]+\w{0,6}|"
    r"https?://.*|(?-i:[a-z0-9_.-]+(?:/[a-z0-9_.-]+)+/?)|-?\d{1,3}|<.*|\(sensitive.*|"
    r"\(known.*|sensitive|write|read|[?].*|"
    r".*(?:your|example|placeholder|dummy|sample|fake|replace[_-]?me|insert[_-]?here).*|"
    r"(?-i:.*EXAMPLE.*)|.*[•*]{3,}.*|[a-z][a-z0-9+.-]*://.*|(?:vault|arn|ref|sm|ssm|kms):.*|"
    r"(?-i:(?:/|~/|\./)?[a-z0-9_.-]+(?:/[a-z0-9_.-]+)+/?))$",
    re.IGNORECASE,
)


def _filler(value: str) -> bool:
    """Ending in eight characters of one or two kinds: "xxxxxxxx", "ghp_********"."""
    return len(value) >= 8 and len(set(value[-8:])) <= 2


def _plausible(value: str) -> bool:
    return (
        len(value) >= 3
        and any(char.isalnum() for char in value)
        and not _NOT_A_VALUE.match(value)
        and not _filler(value)
    )


def _assignments(text: str, pattern: re.Pattern[str]) -> Iterator[re.Match[str]]:
    """Every name given a value, names inside another's value included: ``Cookie:
    sessionid=…`` and ``"Default": "…;Pwd=…"`` hold one in their value."""
    position = 0
    while (match := pattern.search(text, position)) is not None:
        yield match
        position = match.end("name")


# A card's security code given to its name: {"cvv": "737"}.
_CARD_CODE_NAME = re.compile(r"(?:^|[_.\-])(?:cvv2?|cvc2?|csc)$", re.IGNORECASE)


def _assigned(text: str) -> Iterable[Found]:
    if ":" not in text and "=" not in text:
        return
    for pattern in (_ASSIGNED, _NAMED_VALUE):
        for match in _assignments(text, pattern):
            name = match.group("name")
            group = next(g for g in ("dq", "sq", "bare") if match.groupdict().get(g) is not None)
            if _CARD_CODE_NAME.search(name) and re.fullmatch(r"\d{3,4}", match.group(group)):
                start, end = match.span(group)
                yield Found(KINDS["card-code"], start, end, match.group(group))
                continue
            if not _secret_name(name):
                continue
            value = match.group(group)
            if group == "bare":
                value = value.rstrip(".,;:)]}")
            if not _plausible(value) or not _plausible(match.group(group)):
                continue
            if _LOOSE_NAME.search(name) and not (len(value) >= 12 and _secret_like(value)):
                continue
            if group == "bare" and name.startswith("-") and not _secret_like(value):
                continue  # a command's option: --secret=slack-bot-token names a secret
            if group == "bare" and not (
                _secret_like(value) or (len(value) >= 8 and value.islower())
            ):
                continue  # "id-token: write", "1Password: Engineering": a word
            start = match.start(group)
            yield Found(_name_kind(name), start, start + len(value), value)


# Kubernetes Secrets: every value under ``data:`` or ``stringData:`` is one (base64 or not).
_SECRET_MANIFEST = re.compile(r"(?m)^kind:[ \t]*Secret[ \t]*$|\bget secrets?\b")
_SECRET_DATA = re.compile(r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*$")
_DATA_ENTRY = re.compile(r"(?m)^(?P<indent>[ \t]+)[\w.-]+:[ \t]*(?P<value>\S+)[ \t]*$")
# A Terraform variable's default: variable "db_password" { default = "…" }
_TERRAFORM_DEFAULT = re.compile(
    r'variable\s+"(?P<name>[\w-]+)"\s*\{[^}]*?\bdefault\s*=\s*"(?P<value>[^"\n]+)"'
)
# Wi-Fi QR codes: WIFI:T:WPA;S:<network>;P:<password>;;
_WIFI_QR = re.compile(r"WIFI:[^\n]*?\bP:(?P<value>(?:[^;\\\n]|\\.)+);")
# .pgpass lines: host:port:database:user:password
_PGPASS = re.compile(r"(?m)^[\w.*-]+:(?:\d+|\*):[\w.*-]+:[\w.*-]+:(?P<value>\S+)$")
# An AWS secret access key beside its key id (a CSV of credentials, a chat message).
_AWS_PAIR = re.compile(
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b[^\n]{0,60}?(?<![A-Za-z0-9/+])"
    r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)


def _structured(text: str) -> Iterable[Found]:
    """Forms whose place says they are secrets, whatever the value looks like."""
    if "ecret" in text and _SECRET_MANIFEST.search(text):
        for block in _SECRET_DATA.finditer(text):
            outer = len(block.group("indent"))
            for entry in _DATA_ENTRY.finditer(text, block.end()):
                if len(entry.group("indent")) <= outer:
                    break
                value = entry.group("value")
                yield Found(KINDS["secret"], entry.start("value"), entry.end("value"), value)
    for match in _TERRAFORM_DEFAULT.finditer(text) if "variable" in text else ():
        if _secret_name(match.group("name")) and _plausible(match.group("value")):
            start, end = match.span("value")
            yield Found(_name_kind(match.group("name")), start, end, match.group("value"))
    for pattern, kind, present in (
        (_WIFI_QR, "password", "WIFI:" in text),
        (_PGPASS, "password", text.count(":") >= 4),
        (_AWS_PAIR, "aws-secret-key", "AKIA" in text or "ASIA" in text),
    ):
        for match in pattern.finditer(text) if present else ():
            if _plausible(match.group("value")):
                start, end = match.span("value")
                yield Found(KINDS[kind], start, end, match.group("value"))


# --- Prose --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spoken:
    """How people name a secret when they give one in a sentence: the names (a regular
    expression, in the languages agents' users write most), the kind, how many words may
    stand between the name and the value ("the password for the staging server is …"), what
    the value looks like (``secret``: a word that looks like one; ``digits``: a PIN, a door
    code; ``words``: a passphrase of plain words), and whether the value may follow the name
    with nothing between ("API key fd8a…"; not "pass the test")."""

    names: str
    kind: str
    context_words: int
    shape: str = "secret"
    bare: bool = True


_SPOKEN = [
    _Spoken(
        r"pass(?:word|wd)s?|passwort|kennwort|mot de passe|contrase[ñn]a|clave|senha|has[łl]o|"
        r"wachtwoord|parola\w*|lösenord\w*|şifre\w*|пароль|wi-?fi (?:password|key|code)|"
        r"mdp|palavra-passe|密码|密碼|口令|パスワード|暗証番号|"
        r"code wi-?fi|wlan-?(?:passwort|schlüssel)",
        "password",
        6,
    ),
    _Spoken(
        r"pass ?phrases?|seed phrase|recovery phrase|mnemonic(?: phrase)?|phrase secr[eè]te",
        "password",
        6,
        "words",
    ),
    _Spoken(r"pass|pw|pwd", "password", 3, "strong"),
    _Spoken(
        r"pin(?: code)?|code pin|passcode|puk|geheimzahl|(?:door|gate|alarm|disarm|safe|lock|"
        r"garage|entry|access|verification|security|one-time|otp|2fa|mfa|sms|unlock)[ -]?code|"
        r"combination|code (?:de la porte|d'accès|d'entrée)|türcode|kod(?: do [\w]+)?|keypad|"
        r"pin ?kod|pincode|code(?= (?:für|van|voor|for|of|de|del|do|pour)\b)|"
        r"c[óo]digo(?: de (?:acceso|la puerta|verificación))?",
        "password",
        6,
        "digits",
    ),
    _Spoken(r"cvv2?|cvc2?|csc|card security code", "card-code", 2, "digits"),
    _Spoken(r"(?:client|app|api|access|signing|shared|webhook)[ _-]?secret", "secret", 6),
    _Spoken(r"secret(?: value| key)?|cl[ée] secr[eè]te", "secret", 1),
    _Spoken(
        r"api[ _-]?key|cl[ée] (?:d'|de l')?(?:api|acc[eè]s)|api[ -]schl[üu]ssel|access[ _-]?key|"
        r"recovery key|license key|klucz api|chiave api|api anahtar\w*|clave (?:de )?api|"
        r"chave (?:de |da )?api",
        "api-key",
        6,
    ),
    _Spoken(
        r"(?:access|auth|bearer|api|bot|refresh|personal access|deploy|ci)[ _-]?token",
        "access-token",
        6,
    ),
    _Spoken(r"token", "access-token", 4),
]
_SPOKEN_NAME = re.compile(
    # Not a part of an identifier: ".Data.password", "arn:…:secret:…", "--password-stdin".
    "(?:(?<![A-Za-z0-9_:/.-])|(?<=[^\\W\\d_]-))(?:"
    + "|".join(f"(?P<n{index}>{spoken.names})" for index, spoken in enumerate(_SPOKEN))
    + ")(?![A-Za-z0-9_-])",
    re.IGNORECASE,
)
# What every name of ``_SPOKEN`` holds (lowercased): a text without any has none of them.
_SPOKEN_STEMS = (
    "mdp",
    "密",
    "口令",
    "パスワード",
    "暗証",
    "pass",
    "pw",
    "pin",
    "puk",
    "secret",
    "secrè",
    "key",
    "token",
    "cl",
    "schl",
    "senha",
    "has",
    "contrase",
    "wachtwoord",
    "parola",
    "пароль",
    "geheim",
    "kennwort",
    "code",
    "kod",
    "digo",
    "phrase",
    "mnemonic",
    "combination",
    "cvv",
    "cvc",
    "csc",
    "lösen",
    "şifre",
    "wi",
)
# The words that give a value ("is", "lautet", "est", "changed to", ...), besides ":" and "=".
_GIVES = frozenset(
    re.findall(
        r"\S+",
        "is are was were ist lautet sind est es é è jest será sera era to it's its c'est är "
        "是 为 は \uff1a \uff1d "
        "en na a op -> → => \u2014 \u2013",
    )
)
# A word of the same line (a name and its value are on one line).
_TOKEN = re.compile(r"[ \t]*(\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|“[^”\n]{1,200}”|[^\s]+)")
_QUOTES = "\"'“”`"
# Punctuation a word may carry, typographic quotes included.
_QUOTE_MARKS = "\"'`\u201c\u201d\u201e\u201a\u2018\u2019\u00ab\u00bb"
_PUNCTUATION = ".,;:!?()[]{}*" + _QUOTE_MARKS
# Words that follow "the password is" without being one.
_NOT_A_PASSWORD = frozenset(
    re.findall(
        r"\w+",
        """required incorrect wrong invalid correct valid too not empty missing expired changed
        reset the a an set stored saved same different weak strong long short hidden masked
        redacted protected encrypted hashed needed optional ignored unknown known secret field
        fields must should will can cannot manager managers policy policies change changes
        length rules rule prompt used being still also only please shown""",
    )
)
_ARTICLES = frozenset(re.findall(r"\S+", "the a an le la l' el der die das de het un une"))
_DIGITS_VALUE = re.compile(r"\d+(?:[ -]\d+)*")


def _secret_like(value: str) -> bool:
    """A bare word that looks like a secret rather than prose or a name: a digit, a symbol
    (not an apostrophe or a hyphen: "dell'account", "notifications-api"), or a capital after
    its first letter."""
    return any(
        char.isdigit()
        or (not char.isalnum() and char not in "'-\u2019")
        or (index and char.isupper())
        for index, char in enumerate(value)
    )


def _shaped(value: str, shape: str) -> bool:
    if shape == "strong":  # after an everyday name ("pass"): letters and digits, not "5 tests"
        letters = any(char.isalpha() for char in value)
        digits = any(char.isdigit() for char in value)
        marked = any(char.isupper() or not char.isalnum() for char in value)
        return len(value) >= 8 and letters and digits and marked
    if shape == "digits":
        return bool(_DIGITS_VALUE.fullmatch(value)) and 3 <= sum(c.isdigit() for c in value) <= 12
    if shape == "words":
        return " " in value or value.count("-") >= 2 or _secret_like(value)
    return _secret_like(value)


# A passphrase of words ("river ember saffron mango"): the words up to the end of the line or
# sentence, when they are three to twenty-four (a wallet's seed phrase).
_PASSPHRASE = re.compile(r"[^\W\d_]+(?:[ \t]+[^\W\d_]+){2,23}(?=[ \t]*(?:[.,;!?\n\"]|\\n|$))")
_DIGITS_RUN = re.compile(r"\d+(?:[ -]\d+)*")


def _words_after(text: str, position: int) -> Iterator[tuple[str, int]]:
    """The words (a quoted string is one) after ``position``, with where each starts."""
    while (match := _TOKEN.match(text, position)) is not None:
        yield match.group(1), match.start(1)
        position = match.end()


# What a value reads as once redacted or masked.
_ALREADY_REDACTED = re.compile(r"<[a-z-]+>|[*•]{3,}")


def _spoken_value(text: str, position: int, spoken: _Spoken) -> tuple[int, str] | None:
    """The value given after a spoken name that ends at ``position``: after ":", "=" or a
    word that gives it ("is", "to"), within its context words; or right after the name when
    it has the value's shape. Returns where it starts and the value."""
    given = False
    following = islice(_words_after(text, position), spoken.context_words + 3)
    for index, (word, word_start) in enumerate(following):
        if _ALREADY_REDACTED.fullmatch(word.strip(_PUNCTUATION.replace("*", ""))):
            break  # the value is a placeholder or a mask already
        token, start = word, word_start
        if not given and token[0] in ":=\uff1a是为は" and len(token) > 1 and token[1] not in ":=":
            # "pass:N1mbus", ": value" glued: the sign gives, the rest is the value
            given, token = True, token[1:].lstrip()
            start = word_start + len(word) - len(token)
        elif not given:
            if (
                token.lower().rstrip(":") in _GIVES
                or token in (":", "=")
                or (token[-1] == ":" and index < spoken.context_words)
            ):
                given = True
            elif index == 0 and spoken.bare and _shaped(token.strip(_PUNCTUATION), spoken.shape):
                return start, token
            elif index >= spoken.context_words or (token[-1] in ".!?" and not token[:-1].isdigit()):
                return None
            continue
        if token.lower() in _GIVES or token.lower() in _ARTICLES:
            continue  # "ist es …", "est le …": still to come
        if token[0] in _QUOTES and token[-1] in _QUOTES and len(token) > 2:
            return start + 1, token[1:-1]
        shaped = {"words": _PASSPHRASE, "digits": _DIGITS_RUN}.get(spoken.shape)
        run = shaped.match(text, start) if shaped is not None else None
        if run is not None and _shaped(run.group(), spoken.shape):
            return start, run.group()
        if _shaped(token.strip(_PUNCTUATION), spoken.shape) or index > spoken.context_words:
            return start, token
        given = False  # "changed to the new one: …": a word, not the value; read on
    return None


def _said(text: str) -> Iterable[Found]:
    lower = text.lower()
    if not any(stem in lower for stem in _SPOKEN_STEMS):
        return
    for match in _SPOKEN_NAME.finditer(text):
        if match.end() < len(text) and text[match.end()] not in " \t:=,\uff1a是为は":
            continue  # part of something else: an attribute's value, "<password>", a name
        group = next(name for name, value in match.groupdict().items() if value is not None)
        spoken = _SPOKEN[int(group[1:])]
        found = _spoken_value(text, match.end(), spoken)
        if found is None:
            continue
        start, value = found
        quoted_value = start > 0 and text[start - 1] in _QUOTES
        if not quoted_value:
            value = value.rstrip(".,;:!?)]}*" + _QUOTE_MARKS).lstrip("([{*" + _QUOTE_MARKS)
        if not value or value.lower() in _NOT_A_PASSWORD:
            continue
        if spoken.shape != "digits" and not (_plausible(value) and _plausible(found[1])):
            continue
        if not quoted_value and not _shaped(value, spoken.shape):
            continue
        start = text.index(value, start)
        yield Found(KINDS[spoken.kind], start, start + len(value), value)


# Credentials as a pair: "login: admin / W1ll0w…", "creds -> sam@acme.io / Badger1190*".
_LOGIN_PAIR = re.compile(
    r"(?i)\b(?:logins?|credentials|creds|identifiants?|zugangsdaten|credenciales|accesso|"
    r"user(?:name)?|account)(?![\w-])[^\n]{0,40}?[\s:>\-](?P<user>[^\s/:]+)[ \t]+/[ \t]+"
    r"(?P<value>[^\s/]+)"
)


def _pairs(text: str) -> Iterable[Found]:
    if "/" not in text:
        return
    for match in _LOGIN_PAIR.finditer(text):
        value = match.group("value").rstrip(".,;)")
        if _plausible(value) and _secret_like(value) and value[0] not in "/.~":
            start = match.start("value")
            yield Found(KINDS["password"], start, start + len(value), value)


_AUTHORIZATION = re.compile(
    r"\b(?:Bearer|Token|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{12,})", re.IGNORECASE
)
# Credentials in a URL: scheme://user:password@host.
_URL_PASSWORD = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s/:@]*:(?P<value>[^\s/@]+)@", re.IGNORECASE
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


# Credentials on a command line, as tools echo them: long options that name a secret, and the
# short ones of the commands agents run most (``docker login -p``, ``mysql -p…``,
# ``redis-cli -a``, ``curl -u user:…``), and ``user/password@host`` connect strings.
# An option's value: quoted, or a word.
_VALUE = r"(?P<value>'[^'\n]+'|\"[^\"\n]+\"|[^\s\"']+)"
_COMMAND_LINE = [
    re.compile(
        r"(?<!\S)--?(?:password|passwd|pass|token|api[-_]?key|secret|auth[-_]?token|requirepass|"
        r"access[-_]?token|client[-_]?secret)(?:=|[ \t]+)"
        r"(?P<value>[^\s\"']+|\"[^\"\n]+\"|'[^'\n]+')",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:docker|podman|nerdctl|helm|sshpass|heroku|oras)\b[^\n]*?[ \t]-p[ \t]+"
        r"(?P<value>[^\s\"']+|\"[^\"\n]+\"|'[^'\n]+')"
    ),
    re.compile(r"\b(?:mysql|mysqldump|mariadb|mysqladmin|7z|7za|zip|rar)\b[^\n]*?[ \t]-p" + _VALUE),
    re.compile(
        r"\b(?:sqlcmd|bcp|osql|az|sshpass|keytool|openssl)\b[^\n]*?[ \t]-(?:P|p|k|pass|storepass|"
        r"keypass)[ \t]+(?P<value>[^\s\"']+|\"[^\"\n]+\"|'[^'\n]+')"
    ),
    re.compile(r"\b(?:smbclient|rpcclient|smbmap)\b[^\n]*?[ \t]-U[ \t]+[^\s%]+%(?P<value>\S+)"),
    re.compile(r"\bredis-cli\b[^\n]*?[ \t]-a[ \t]+" + _VALUE),
    re.compile(r"(?<!\S)(?:-u|--user)[ \t]+[^\s:,]+[:,]" + _VALUE),
    # An exec-form command list: ["redis-server", "--requirepass", "…"].
    re.compile(
        r"[\"']--?(?:requirepass|password|passwd|pass|token|secret|api-key|auth)[\"'][ \t]*,"
        r"[ \t]*[\"'](?P<value>[^\"'\n]+)[\"']"
    ),
    # A password piped to a login that reads it: echo '…' | docker login … --password-stdin
    re.compile(r"\becho[ \t]+" + _VALUE + r"[ \t]*\|[^\n]*\blogin\b"),
    re.compile(r"(?<![\w/.@-])[\w.-]+/(?P<value>[^\s/@\"']{4,})@(?!sha\d+:)(?://)?[\w.-]+[.:/]"),
]


# A credential passed to a call that takes one, as code writes it: connect(host, user, "…"),
# PlainAuth("", user, "…"), jwt.sign(payload, "…"), and a name given to define()/env().
_CREDENTIAL_CALL = re.compile(
    r"\b(?:connect|getConnection|login|PlainAuth|JedisPool|PDO|mysqli|init|sign|basic|"
    r"authenticate|create_engine|Redis|StrictRedis|MongoClient|SMTP_SSL|starttls|auth)"
    r"[ \t]*\((?P<arguments>[^()\n]*(?:\([^()\n]*\)[^()\n]*)*)\)"
)
_LITERAL = re.compile(r"(?P<quote>[\"'])(?P<value>[^\"'\n]{8,200})(?P=quote)")
_NAMED_ARGUMENT = re.compile(
    r"\b(?:define|env|getenv|get)[ \t]*\([ \t]*[\"'](?P<name>[\w.-]+)[\"'][ \t]*,[ \t]*"
    r"[\"'](?P<value>[^\"'\n]+)[\"']"
)
_HOST_LIKE = re.compile(r"^(?:[\w-]+\.)+[a-z]{2,}(?::\d+)?$|^\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?$")


def _code(text: str) -> Iterable[Found]:
    if "(" not in text:
        return
    for call in _CREDENTIAL_CALL.finditer(text):
        for literal in _LITERAL.finditer(call.group("arguments")):
            value = literal.group("value")
            if (
                " " in value
                or "@" in value
                or "://" in value
                or value[0] in "/$~."
                or _HOST_LIKE.match(value)
                or not (_plausible(value) and _secret_like(value))
            ):
                continue
            start = call.start("arguments") + literal.start("value")
            yield Found(KINDS["password"], start, start + len(value), value)
    for match in _NAMED_ARGUMENT.finditer(text):
        if _secret_name(match.group("name")) and _plausible(match.group("value")):
            start, end = match.span("value")
            yield Found(_name_kind(match.group("name")), start, end, match.group("value"))


def _command_lines(text: str) -> Iterable[Found]:
    if "-" not in text and "@" not in text:
        return
    for pattern in _COMMAND_LINE:
        for match in pattern.finditer(text):
            value = match.group("value")
            start = match.start("value")
            if value[0] in _QUOTES and value[-1] in _QUOTES:
                value, start = value[1:-1], start + 1
            if value[0] in "-/$~." or not _plausible(value) or not _secret_like(value):
                continue
            yield Found(KINDS["password"], start, start + len(value), value)


# --- Personal data ------------------------------------------------------------------------------

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,30}\b", re.IGNORECASE)
_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])")
# Card networks' first digits (Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay):
# with the Luhn check, what tells a card from a long order number.
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[0689]|35|6(?:011|5|4[4-9]|2))")
_NUMBER = re.compile(r"\d\d")
# Cheaper scans than the patterns' own, which a text must pass for them to be run.
_IBAN_START = re.compile(r"[A-Za-z]{2}\d\d")
_CARD_DIGITS = re.compile(r"\d{4}")
_IPV4 = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}")
_PHONE_HINT = re.compile(r"\d[\d\s().-]{5,}\d")
# A number said to be a phone's ("Tel.: 06 86 11 74 76", "phone": "020 7946 0899"), in
# whatever country's format; and what a run of bare digits needs before it to be taken for one
# (an ISBN or an order number is ten digits too).
_PHONE_SAID = re.compile(
    r"(?<!<)\b(?:phone|t[ée]l|telephone|mobile|cell|fax|whatsapp|telefon|t[ée]l[ée]phone|handy|"
    r"portable|call me(?: at)?|text me(?: at)?|ll[áa]mame(?: al)?|m[óo]vil|celular|"
    r"telefone|telefono|cellulare|n[uú]mer[oa]?|nummer|numéro|me liga(?: no)?|ruf(?:en sie)?|"
    r"rückruf|anrufen|chiamami|bel me|mijn nummer is|contact|handynummer|telefonnummer|"
    r"mobilnummer|rufnummer|call \w+ at)\b[^\d\n+(]{0,12}"
    r"(?P<value>\+?\(?\d[\d \t().-]{5,}\d)",
    re.IGNORECASE,
)


def _inside_word(text: str, start: int, end: int) -> bool:
    """Part of something longer: an identifier ("ORD-2024-000123"), an address (10.1.2.3)."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    dotted = (before == "." and start > 1 and text[start - 2].isdigit()) or (
        after == "." and end + 1 < len(text) and text[end + 1].isdigit()
    )
    return dotted or before.isalnum() or before == "-" or after.isalnum() or after == "-"


def _accounts(text: str) -> Iterable[Found]:
    if not _NUMBER.search(text):
        return  # IBANs and cards hold a run of digits
    for match in _IBAN.finditer(text) if _IBAN_START.search(text) else ():
        # The pattern runs on over the words after it ("… 3000 for the rent"): shorter
        # candidates, a space-separated group at a time, until one is valid.
        candidate = match.group()
        # Mod 97 and the country's length; not the national check digits, which some
        # countries' IBANs carry and others do not.
        while len(candidate) >= 15 and not iban.is_valid(candidate.upper(), check_country=False):
            candidate = candidate.rsplit(" ", 1)[0] if " " in candidate else ""
        if len(candidate) >= 15:
            start = match.start()
            yield Found(KINDS["iban"], start, start + len(candidate), candidate)
    for match in _CARD.finditer(text) if _CARD_DIGITS.search(text) else ():
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and luhn.is_valid(digits):
            yield Found(KINDS["card-number"], match.start(), match.end(), match.group())


def _contacts(text: str) -> Iterable[Found]:
    for match in EMAIL.finditer(text) if "@" in text else ():
        yield Found(KINDS["email"], match.start(), match.end(), match.group())
    if _PHONE_HINT.search(text):
        matcher = phonenumbers.PhoneNumberMatcher(
            text, settings.PHONE_DEFAULT_REGION, leniency=phonenumbers.Leniency.VALID
        )
        found = list(matcher)
        # A number written with its country code ("+31 6 0905…") is a phone's whatever its
        # validity (the operator's plan, a new range): only its length is checked.
        found += (
            [
                match
                for match in phonenumbers.PhoneNumberMatcher(
                    text, None, leniency=phonenumbers.Leniency.POSSIBLE
                )
                if not any(match.start == known.start for known in found)
            ]
            if "+" in text
            else []
        )
        for match in found:
            if _inside_word(text, match.start, match.end) or _IPV4.search(match.raw_string):
                continue  # part of an identifier: "ORD-2024-000123", or an address
            bare = match.raw_string.isdigit()
            if not bare or _PHONE_SAID.search(text, max(0, match.start - 40), match.end):
                yield Found(KINDS["phone"], match.start, match.end, match.raw_string)
        for match in _PHONE_SAID.finditer(text):
            digits = sum(char.isdigit() for char in match.group("value"))
            if (
                7 <= digits <= 15
                and not _inside_word(text, *match.span("value"))
                and not _IPV4.search(match.group("value"))
            ):
                start, end = match.span("value")
                yield Found(KINDS["phone"], start, end, match.group("value"))


# --- The detector -------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"<[a-z-]+>")

_FINDERS = (
    _private_keys,
    _tokens,
    _structured,
    _headers_and_urls,
    _assigned,
    _command_lines,
    _code,
    _said,
    _pairs,
    _accounts,
    _contacts,
)


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


# No text shorter than this holds a value the detector finds (the shortest, a PIN, needs the
# word before it): half of what a recorded experience's context holds is such words.
_SHORTEST_TEXT = 6


def sensitive_redacted(text: str, *, mask: str | None = None, known: Iterable[Found] = ()) -> str:
    """``text`` with every sensitive value replaced by ``mask``, or by its kind's placeholder
    (``<password>``). ``known``: values found elsewhere (in the other turns of a session),
    replaced here too wherever they appear."""
    if len(text) < _SHORTEST_TEXT and not known:
        return text
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
        card_code = _CARD_CODE_NAME.search(name) and re.fullmatch(r"\d{3,4}", str(item))
        if card_code:
            redacted[sensitive_redacted(name, mask=mask, known=known)] = (
                mask or KINDS["card-code"].placeholder
            )
        elif (
            isinstance(item, str | int | float)
            and not isinstance(item, bool)
            and _secret_name(name)
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
                if isinstance(item, str) and _secret_name(str(key)) and _plausible(item):
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
