"""URLs with a NUL character are answered before any view sees them: PostgreSQL cannot hold
NUL in text, so no object's id has one (404, like a missing object) and no query parameter
may carry one (422, naming the parameter). Bodies are the parser's (``mirix_site.api.parsers``)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from mirix_site.api.errors import json_404, validation_body

NUL_DETAIL = "NUL characters are not allowed."


class NulRefusedMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info:
            return json_404(request)
        fields = {
            name: [NUL_DETAIL]
            for name, values in request.GET.lists()
            if "\x00" in name or any("\x00" in value for value in values)
        }
        if fields:
            return JsonResponse(validation_body(fields), status=422)
        return self.get_response(request)
