"""Admin helpers every app's admin uses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.core.paginator import Paginator
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from mirix_site.common.counts import planner_estimate, table_count
from mirix_site.common.history import history_of

# The rows of a filtered admin list counted exactly; past them, the planner's estimate.
LIST_COUNT_MAX = 10_000


class BoundedCountPaginator(Paginator):
    """An admin list's count that never scans a big table: the whole table by PostgreSQL's
    estimate past ``EXACT_COUNT_MAX`` rows (``table_count``), a filtered list counted up to
    ``LIST_COUNT_MAX`` rows and, past them, by the planner's estimate of the filter. Pages
    are read by ``LIMIT``/``OFFSET`` as before."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not rows.query.has_filters():
            return table_count(rows.model).value
        counted = rows.order_by()[: LIST_COUNT_MAX + 1].count()
        if counted <= LIST_COUNT_MAX:
            return counted
        return max(counted, planner_estimate(rows))


class BoundedCountAdmin(admin.ModelAdmin):
    """The admin of a table that grows with use (memories, turns, logs): its list's count is
    bounded (``BoundedCountPaginator``) and the unfiltered total, which the list would count
    again beside a filtered one, is not counted."""

    paginator = BoundedCountPaginator
    show_full_result_count = False


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


class StoredDateTime(forms.SplitDateTimeField):
    """A date and time as the admin shows it, to the second: a form sent back unchanged is
    unchanged, though the stored value has microseconds the page never showed."""

    def has_changed(self, initial: Any, data: Any) -> bool:
        if isinstance(initial, datetime):
            initial = initial.replace(microsecond=0)
        return super().has_changed(initial, data)


def history_table(row: Any) -> str:
    """A tracked row's changes as a table for its admin page (mirix_site.common.history)."""
    entries = history_of(row)
    if not entries:
        return "No changes."
    lines = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                entry["at"],
                entry["actor"] or "-",
                entry["operator"] or entry["key_id"] or "",
                entry["client_id"] or entry["run_id"] or entry["job_id"] or "",
                name,
                format_html("{} &rarr; {}", change["before"], change["after"]),
            )
            for entry in entries
            for name, change in entry["changes"].items()
        ),
    )
    return format_html(
        '<table class="history"><thead><tr><th>when</th><th>actor</th><th>who</th>'
        "<th>client / run / job</th><th>field</th><th>before &rarr; after</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        lines,
    )
