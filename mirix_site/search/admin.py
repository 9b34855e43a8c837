"""The retrieval engine's tables in the admin: the retrieval log (an audit), the gate's
calibrations, the embedding spaces and the kinds' codes, each shown, none edited."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from accounts.admin import (
    USER_PAGE_ROWS,
    UserPagePart,
    change_link,
    user_page_register,
    user_rows_url,
)
from accounts.models import EndUser
from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin
from mirix_site.console.charts import Series, daily_chart
from mirix_site.console.panels import (
    DailySeries,
    Dashboard,
    Panel,
    daily_series_register,
    dashboard_register,
    list_url,
    on_day,
)
from mirix_site.search.log import retrieval_daily_figures
from mirix_site.search.models import (
    EmbeddingSpace,
    GateCalibration,
    RetrievalLog,
    SearchableKindCode,
)


class LatencyFilter(admin.SimpleListFilter):
    title = "latency"
    parameter_name = "latency"
    BUCKETS = {"fast": (0, 30), "medium": (30, 100), "slow": (100, 1000), "very-slow": (1000, None)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("fast", "under 30 ms"),
            ("medium", "30-100 ms"),
            ("slow", "100 ms-1 s"),
            ("very-slow", "over 1 s"),
        ]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        bounds = self.BUCKETS.get(self.value() or "")
        if bounds is None:
            return queryset
        low, high = bounds
        queryset = queryset.filter(latency_ms__gte=low)
        return queryset.filter(latency_ms__lt=high) if high is not None else queryset


@admin.register(RetrievalLog)
class RetrievalLogAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    """Every retrieval, for audit: who asked what, what came back, what the gate decided."""

    list_display = ["created_at", "endpoint", "query", "method", "end_user", "client", "latency_ms"]
    list_filter = ["endpoint", "method", "client", "created_at", LatencyFilter]
    search_fields = ["query", "end_user__user_id"]
    list_select_related = ["end_user", "client", "organization"]
    readonly_fields = [
        "organization",
        "client",
        "end_user",
        "endpoint",
        "query",
        "method",
        "kinds",
        "results",
        "gate",
        "latency_ms",
        "created_at",
    ]
    date_hierarchy = "created_at"


@admin.register(GateCalibration)
class GateCalibrationAdmin(admin.ModelAdmin):
    """Written by `manage.py calibrate_gate`; shown, not edited."""

    list_display = [
        "model",
        "kind",
        "min_similarity",
        "strong_similarity",
        "related_mean",
        "unrelated_mean",
        "measured_at",
    ]
    list_filter = ["kind", "measured_at"]
    search_fields = ["model", "kind"]
    readonly_fields = [
        "model",
        "kind",
        "min_similarity",
        "strong_similarity",
        "related_pairs",
        "unrelated_pairs",
        "related_mean",
        "unrelated_mean",
        "measured_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(EmbeddingSpace)
class EmbeddingSpaceAdmin(admin.ModelAdmin):
    """Embedding models with vectors on file; `manage.py reembed` fills and marks them."""

    list_display = ["model", "provider", "dimensions", "status", "created_at", "completed_at"]
    list_filter = ["status", "provider"]
    search_fields = ["model"]
    readonly_fields = [
        "model",
        "provider",
        "dimensions",
        "api_base",
        "status",
        "created_at",
        "completed_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(SearchableKindCode)
class SearchableKindCodeAdmin(ReadOnlyAdmin):
    """The codes searchable kinds hold in the search index, recorded by every migrate."""

    list_display = ["code", "name", "recorded_at"]
    list_filter = ["recorded_at"]
    search_fields = ["name"]
    readonly_fields = ["code", "name", "recorded_at"]


def _user_retrievals(end_user: EndUser) -> list[UserPagePart]:
    logs = RetrievalLog.objects.filter(end_user=end_user)
    return [
        UserPagePart(
            title="Recent retrievals",
            headers=["query", "endpoint", "method", "results", "latency (ms)", "when"],
            rows=[
                [
                    change_link(log, log.query[:80] or "(no query)"),
                    log.endpoint,
                    log.method,
                    len(log.results),
                    f"{log.latency_ms:.1f}",
                    log.created_at,
                ]
                for log in logs.order_by("-created_at", "-id")[:USER_PAGE_ROWS]
            ],
            total=logs.count(),
            more_url=user_rows_url(RetrievalLog, end_user),
        )
    ]


user_page_register(40, _user_retrievals)


def _retrievals_on(day: date, series: str) -> str:
    return list_url(RetrievalLog, **on_day("created_at", day))


def _dashboard(dashboard: Dashboard) -> list[Panel]:
    return [
        Panel(
            f"Retrievals per day ({dashboard.total('retrievals', 'count'):,.0f} in "
            f"{len(dashboard.days)} days)",
            daily_chart(
                dashboard.days,
                [Series("retrievals", dashboard.values("retrievals", "count"))],
                label="retrievals per day",
                url=_retrievals_on,
            ),
            note="Every search and retrieval the API answered (the retrieval log).",
            url=list_url(RetrievalLog),
        ),
        Panel(
            "Retrieval latency per day",
            daily_chart(
                dashboard.days,
                [
                    Series("p50", dashboard.values("retrievals", "p50")),
                    Series("p95", dashboard.values("retrievals", "p95")),
                ],
                label="retrieval latency per day",
                lines=True,
                unit=" ms",
                url=_retrievals_on,
            ),
            note="Inside the server, from the request's start to its answer (the log's "
            "latency_ms).",
        ),
    ]


# The log's rows are many, and a day's figures are final once it is over: today and yesterday
# are computed again (a retrieval logged across midnight), older days once.
daily_series_register(
    DailySeries("retrievals", keys=("count",), figures=retrieval_daily_figures, settle_days=2)
)
dashboard_register(30, _dashboard)
