"""The API's text fields. DRF's take a number where a string is due (``{"user_id": 12345}``
becomes "12345"); a client that sends a number there has a bug it should hear about, so ours
take JSON strings only. Every serializer of the project declares text with these
(``tests/test_project.py`` holds it to that)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

NOT_A_STRING = "Not a valid string."


class _StringsOnly:
    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            raise serializers.ValidationError(NOT_A_STRING, code="invalid")
        return super().to_internal_value(data)  # type: ignore[misc]


class TextField(_StringsOnly, serializers.CharField):
    pass


class PatternField(_StringsOnly, serializers.RegexField):
    pass


class TextChoiceField(_StringsOnly, serializers.ChoiceField):
    pass
