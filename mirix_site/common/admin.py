"""Admin helpers every app's admin uses."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """Browse, never add, change or delete: for records kept as they were written."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class StoredText(forms.CharField):
    """A text field read as the API stores text: a browser's CRLF line breaks are the LF ones
    stored, and nothing is stripped. Otherwise saving a form nobody changed would rewrite every
    multi-line text (and count it as an edit)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "strip": False})

    def to_python(self, value: Any) -> Any:
        value = super().to_python(value)
        return value.replace("\r\n", "\n") if isinstance(value, str) else value
