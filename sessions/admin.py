"""Read-only browsing of conversations: operators audit what callers sent, never edit it."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.timesince import timesince

from accounts.admin import (
    USER_PAGE_ROWS,
    UserPagePart,
    change_link,
    user_page_register,
    user_rows_url,
)
from accounts.models import EndUser
from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin
from mirix_site.console.charts import Bar, bar_chart, table
from mirix_site.console.panels import Dashboard, Panel, dashboard_register, list_url
from sessions.models import Message, MessageImage, Session
from sessions.selectors import sessions_by_status, turns_waiting


class MessageInline(admin.TabularInline):
    model = Message
    fields = ["position", "role", "name", "text", "tool_calls", "occurred_at", "extraction"]
    readonly_fields = fields
    ordering = ["position"]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class MessageImageInline(admin.TabularInline):
    """The images a turn carries; a remote one's fetch, and why it failed if it did."""

    model = MessageImage
    fields = ["part", "image", "fetch", "fetch_status", "fetch_reason", "fetch_finished_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[MessageImage]:
        return super().get_queryset(request).select_related("image", "fetch")

    @admin.display(description="fetch")
    def fetch_status(self, link: MessageImage) -> str:
        return link.fetch.status if link.fetch else "-"

    @admin.display(description="failure")
    def fetch_reason(self, link: MessageImage) -> str:
        return link.fetch.reason if link.fetch else ""

    @admin.display(description="finished")
    def fetch_finished_at(self, link: MessageImage) -> object:
        return link.fetch.finished_at if link.fetch else None


@admin.register(Session)
class SessionAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    list_display = [
        "__str__",
        "end_user",
        "client",
        "organization",
        "tag",
        "status",
        "close_reason",
        "outcome",
        "message_count",
        "last_activity_at",
    ]
    list_filter = ["tag", "status", "close_reason", "outcome", "organization", "client"]
    search_fields = ["session_id", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "session_id",
        "tag",
        "status",
        "close_reason",
        "outcome",
        "note",
        "message_count",
        "filter_tags",
        "created_at",
        "last_activity_at",
        "closed_at",
    ]
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    list_display = [
        "__str__",
        "role",
        "end_user",
        "client",
        "organization",
        "extraction",
        "occurred_at",
    ]
    list_filter = ["role", "extraction", "organization", "client"]
    search_fields = ["text", "end_user__user_id", "session__session_id"]
    list_select_related = ["end_user", "client", "organization", "session"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "session",
        "position",
        "role",
        "content",
        "text",
        "tool_calls",
        "name",
        "tool_call_id",
        "filter_tags",
        "occurred_at",
        "created_at",
        "extraction",
        "extraction_attempts",
        "extracted_at",
    ]
    inlines = [MessageImageInline]


def _user_sessions(end_user: EndUser) -> list[UserPagePart]:
    sessions = Session.objects.filter(end_user=end_user)
    newest = sessions.select_related("client").order_by("-last_activity_at", "-id")
    return [
        UserPagePart(
            title="Sessions",
            headers=["session", "client", "tag", "status", "outcome", "turns", "last activity"],
            rows=[
                [
                    change_link(session),
                    session.client,
                    session.tag,
                    session.status,
                    session.outcome or "-",
                    session.message_count,
                    session.last_activity_at,
                ]
                for session in newest[:USER_PAGE_ROWS]
            ],
            total=sessions.count(),
            more_url=user_rows_url(Session, end_user),
        )
    ]


user_page_register(10, _user_sessions)


def _dashboard(dashboard: Dashboard) -> list[Panel]:
    by_status = sessions_by_status()
    waiting, oldest = turns_waiting()
    return [
        Panel(
            "Sessions",
            bar_chart(
                [
                    Bar(status, count.value, list_url(Session, status__exact=status), count.shown)
                    for status, count in by_status.items()
                ],
                label="sessions open and closed",
            ),
            note="Open ones close when their caller says, or after SESSION_IDLE_TIMEOUT idle.",
            url=list_url(Session),
        ),
        Panel(
            "Turns waiting for extraction",
            table(
                ["turns", "oldest waiting since"],
                [[waiting, f"{timesince(oldest)}" if oldest else "-"]],
            ),
            note="Chat turns stored and not yet made memories (task sessions' turns are for "
            "skill learning).",
            url=list_url(Message, extraction__exact=Message.Extraction.PENDING),
        ),
    ]


dashboard_register(20, _dashboard)
