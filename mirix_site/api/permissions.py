"""Read-only API keys may call anything that does not write."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

if TYPE_CHECKING:
    from rest_framework.views import APIView


def view_writes(view: APIView, method: str, request: Request | None = None) -> bool:
    """Whether calling ``view`` with ``method`` changes state. Views whose POST only reads
    (retrieval with a body) declare ``writes = False``; one whose read writes for some bodies
    also says which with ``writes_for(request)`` (and why in ``read_only_message``). The
    OpenAPI schema reads it too, without a request."""
    writes_for = getattr(view, "writes_for", None)
    if request is not None and writes_for is not None and writes_for(request):
        return True
    declared = getattr(view, "writes", None)
    if declared is not None:
        return bool(declared)
    return method.upper() not in SAFE_METHODS


class KeyMayWrite(BasePermission):
    message = "This API key is read-only."
    code = "read_only_key"

    def has_permission(self, request: Request, view: APIView) -> bool:
        api_key = request.auth
        if api_key is None or not view_writes(view, request.method, request):
            return True
        self.message = getattr(view, "read_only_message", self.message)
        return not api_key.read_only
