"""The tenant-scoped base of every API view."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from accounts.models import EndUser
from accounts.selectors import end_user_get
from accounts.tenancy import Tenant
from mirix_site.api.fields import UserIdField
from mirix_site.api.permissions import view_writes
from mirix_site.common.history import API, history_context


class UserQuerySerializer(serializers.Serializer):
    """The end user a request is about, named by its ``user_id`` query parameter."""

    user_id = UserIdField(help_text="the end user's id")


class UnscopedRequestError(RuntimeError):
    """A tenant view was reached without a resolved tenant: a configuration bug, never a 200."""


class TenantAPIView(APIView):
    """Authenticates the API key, resolves the caller's organization and client, and refuses to
    run the handler without them. Subclasses read ``self.tenant`` and pass it to selectors and
    services; none of them queries a model directly.

    ``writes`` overrides the method-based guess of whether a request writes (for read-only keys).
    ``history = False``: a write that changes no tracked row (it inserts, which keeps no
    history, and updates only untracked tables; see ``mirix_site.common.history``) runs without
    a history context, which would otherwise be set before each of its statements for nothing.
    """

    writes: bool | None = None
    history: bool = True
    pagination_class = api_settings.DEFAULT_PAGINATION_CLASS

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if not isinstance(request.user, Tenant):
            raise UnscopedRequestError(f"{type(self).__name__} ran without a tenant")
        # What a write changes is this key's, of this client (a no-op outside ``dispatch``'s
        # history context: reads have none).
        history_context(API, key_id=request.user.api_key.key_id, client_id=request.user.client.pk)

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        """A write runs in a history context (its changes say who made them); a read, even
        over POST (``writes = False``), runs without one and pays nothing for it."""
        if self.history and view_writes(self, request.method):
            with history_context(API):
                return super().dispatch(request, *args, **kwargs)
        return super().dispatch(request, *args, **kwargs)

    @property
    def tenant(self) -> Tenant:
        tenant = self.request.user
        if not isinstance(tenant, Tenant):
            raise UnscopedRequestError(f"{type(self).__name__} ran without a tenant")
        return tenant

    def query_end_user(self) -> EndUser:
        """The end user the ``user_id`` query parameter names: 422 when it is missing or
        malformed, 404 when the organization has no such user."""
        params = UserQuerySerializer(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        return end_user_get(tenant=self.tenant, user_id=params.validated_data["user_id"])

    def paginate(
        self,
        source: Any,
        serializer_class: type,
        *,
        paginator_class: type | None = None,
        **context: Any,
    ) -> Any:
        """One page of ``source`` rendered by ``serializer_class``, with the next page link.
        ``source`` is a queryset, or a function ``fetch(after, count)`` returning rows (see
        ``KeysetPage.paginate_fetch``)."""
        paginator = (paginator_class or self.pagination_class)()
        if callable(source):
            page = paginator.paginate_fetch(source, self.request)
        else:
            page = paginator.paginate_queryset(source, self.request, view=self)
        serializer = serializer_class(page, many=True, context={"request": self.request, **context})
        return paginator.get_paginated_response(serializer.data)
