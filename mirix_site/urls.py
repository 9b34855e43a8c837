"""Root URLs. API paths follow the MIRIX client's (no trailing slash)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from mirix_site.health import HealthApi

handler404 = "accounts.api.errors.json_404"
handler500 = "accounts.api.errors.json_500"

urlpatterns = [
    path("health", HealthApi.as_view(), name="health"),
    path("", include("accounts.api.urls")),
    path("", include("sessions.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("skills.api.urls")),
    path("", include("images.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
]
