"""Root URLs. API paths follow the MIRIX client's (no trailing slash)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularSwaggerView

from mirix_site.api.schema_view import SchemaApi
from mirix_site.common.ids import RowIdConverter
from mirix_site.health import HealthApi
from mirix_site.mcp_http import McpApi
from mirix_site.metrics import metrics_view

# Before the apps' URLs, which name row ids in their paths as <id:...>.
register_converter(RowIdConverter, "id")

handler404 = "mirix_site.api.errors.json_404"
handler500 = "mirix_site.api.errors.json_500"

urlpatterns = [
    path("health", HealthApi.as_view(), name="health"),
    path("metrics", metrics_view, name="metrics"),
    path("mcp", McpApi.as_view(), name="mcp"),
    path("", include("accounts.api.urls")),
    path("", include("sessions.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("skills.api.urls")),
    path("", include("images.api.urls")),
    path("api/schema/", SchemaApi.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
]
