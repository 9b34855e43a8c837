"""The API's fields of text, numbers and booleans. DRF's take a number where a string is due
(``{"user_id": 12345}`` becomes "12345") and text or a number where a boolean is due (``"yes"``,
``0.0``); a client that sends those has a bug it should hear about, and the schema says so, so
in a JSON body ours take the JSON type they declare. In a query string every value is text,
read as DRF reads it. Every serializer of the project declares these fields with these
(``tests/test_project.py`` holds it to that)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.http import QueryDict
from django.utils import timezone
from rest_framework import serializers
from rest_framework.fields import empty

from mirix_site.api.parsers import JsonTooDeepError, json_text_load

NOT_A_STRING = "Not a valid string."


class _StringsOnly:
    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            raise serializers.ValidationError(NOT_A_STRING, code="invalid")
        return super().to_internal_value(data)  # type: ignore[misc]


# A character str.strip() keeps, spelled out code point by code point so that ECMA (clients,
# the schema) and Python read the class alike: text holding one is not blank once trimmed.
NOT_BLANK_PATTERN = "[^{}]".format(
    "".join(f"\\u{ord(char):04x}" for char in map(chr, range(0x10000)) if char.isspace())
)


class TextField(_StringsOnly, serializers.CharField):
    """Trimmed (unless ``trim_whitespace=False``), and then refused if blank unless
    ``allow_blank``: the schema states that with ``NOT_BLANK_PATTERN``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.trim_whitespace and not self.allow_blank:
            # Never fails: CharField refuses blank text first. It puts the rule in the schema.
            self.validators.append(RegexValidator(NOT_BLANK_PATTERN))


class WholeMatchValidator(RegexValidator):
    """The pattern must match the whole value, as it does in the OpenAPI schema: ECMA's ``$``
    is the end of the text, Python's also matches before a final newline ("bob\\n")."""

    def __call__(self, value: Any) -> None:
        if not self.regex.fullmatch(str(value)):
            raise ValidationError(self.message, code=self.code, params={"value": value})


class PatternField(TextField):
    """Text matching ``pattern`` whole. Write the pattern in the dialect ECMA and Python share
    (no ``\\A``, ``\\Z``, ``\\d``): the schema publishes it for clients to check. Nothing is
    trimmed: " bob" does not match a pattern without spaces, here or in a client."""

    default_error_messages = {"invalid": "This value does not match the required pattern."}

    def __init__(self, pattern: str, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators.append(WholeMatchValidator(pattern, message=self.error_messages["invalid"]))


class TextChoiceField(_StringsOnly, serializers.ChoiceField):
    pass


def _reads_query_string(field: serializers.Field) -> bool:
    return isinstance(getattr(field.root, "initial_data", None), QueryDict)


class _JsonTyped:
    """In a JSON body, only values of ``json_types`` (a boolean is no number)."""

    json_types: tuple[type, ...] = ()

    def to_internal_value(self, data: Any) -> Any:
        if not _reads_query_string(self) and (  # type: ignore[arg-type]
            not isinstance(data, self.json_types)
            or (isinstance(data, bool) and bool not in self.json_types)
        ):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class BooleanField(_JsonTyped, serializers.BooleanField):
    json_types = (bool,)


# The widest integer a column here holds (a bigint): a number past it is refused as out of
# range, never sent to the database to fail there (a 500).
BIGINT_MAX = 2**63 - 1


class IntegerField(_JsonTyped, serializers.IntegerField):
    json_types = (int,)

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", BIGINT_MAX)
        kwargs.setdefault("min_value", -BIGINT_MAX - 1)
        super().__init__(**kwargs)


class FloatField(_JsonTyped, serializers.FloatField):
    json_types = (int, float)


class JsonTextField(TextField):
    """JSON carried as text, as a query parameter carries it (``?filter_tags={"a": 1}``), read
    by the body's rules (``mirix_site.api.parsers.json_text_load``); empty text is no value
    (None). ``schema`` is the JSON's own schema: the OpenAPI schema declares the parameter as
    ``content: application/json`` with it (``mirix_site.api.schema``), so clients send JSON."""

    def __init__(self, *, schema: dict[str, Any], **kwargs: Any) -> None:
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)
        self.json_schema = schema

    def run_validation(self, data: Any = empty) -> Any:
        value = super().run_validation(data)
        return None if value == "" else value

    def to_internal_value(self, data: Any) -> Any:
        text = super().to_internal_value(data)
        try:
            return json_text_load(text)
        except JsonTooDeepError as error:
            raise serializers.ValidationError(str(error.detail)) from None
        except ValueError:
            raise serializers.ValidationError("Not valid JSON.") from None


# What MIRIX accepts (its own sample user is "caring cathy"), but for what a URL path segment
# (/users/{user_id}) cannot hold or hides: no slash, no control character (C0, DEL, C1), no
# space at either end, and no U+FFFD, which the JSON parser puts for a NUL or a lone surrogate
# (mirix_site.api.parsers): a user id that held one is refused, not stored altered.
_USER_ID_CHAR = "[^\\u0000-\\u001F\\u007F-\\u009F\\uFFFD/]"
_USER_ID_EDGE = "[^\\u0000-\\u001F\\u007F-\\u009F\\uFFFD/ ]"
USER_ID_PATTERN = f"^{_USER_ID_EDGE}(?:{_USER_ID_CHAR}{{0,253}}{_USER_ID_EDGE})?$"


class UserIdField(PatternField):
    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("max_length", 255)
        super().__init__(
            USER_ID_PATTERN,
            error_messages={
                "invalid": "Must be 1-255 characters, without a slash, a control or NUL "
                "character, or a space at either end."
            },
            **kwargs,
        )


def datetime_text(value: datetime) -> str:
    """A time as DRF's DateTimeField writes it (ISO 8601 in the current time zone, UTC as
    "Z"), without building the field: its copy per serializer cost more than the list's query."""
    text = timezone.localtime(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
