"""The schema's view, apart from ``mirix_site.api.schema``: drf-spectacular's views read the
settings, which name that module's schema class."""

from __future__ import annotations

from typing import Any

from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response


class SchemaApi(SpectacularAPIView):
    """``/api/schema/``: the schema is generated from the code, which does not change while a
    process runs, so each process generates it once (per version and language) rather than for
    every anonymous request (each a visible wait; bench/RESULTS.md)."""

    _generated: dict[tuple[str | None, str | None], Any] = {}

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, translation.get_language())
        if key not in self._generated:
            generator = self.generator_class(
                urlconf=self.urlconf, api_version=version, patterns=self.patterns
            )
            self._generated[key] = generator.get_schema(request=request, public=self.serve_public)
        filename = self._get_filename(request, version)
        return Response(
            data=self._generated[key],
            headers={"Content-Disposition": f'inline; filename="{filename}"'},
        )
