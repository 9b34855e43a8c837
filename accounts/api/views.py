from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.serializers import (
    UserCreateOrGetInputSerializer,
    UserDeleteOutputSerializer,
    UserOutputSerializer,
)
from accounts.selectors import EndUserRow, end_user_export, end_user_get, end_users_page
from accounts.services import end_user_create_or_get, end_user_delete_own
from mirix_site.api.base import TenantAPIView


class UserCreateOrGetApi(TenantAPIView):
    @extend_schema(
        request=UserCreateOrGetInputSerializer,
        responses={200: UserOutputSerializer, 201: UserOutputSerializer},
        summary="Create an end user, or return the existing one with this user_id",
    )
    def post(self, request: Request) -> Response:
        serializer = UserCreateOrGetInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user, created = end_user_create_or_get(
            tenant=self.tenant, user_id=data.get("user_id"), name=data.get("name")
        )
        return Response(
            UserOutputSerializer(user).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class UserListApi(TenantAPIView):
    @extend_schema(
        responses=UserOutputSerializer(many=True), summary="List the organization's end users"
    )
    def get(self, request: Request) -> Response:
        def fetch(after: list[Any] | None, count: int) -> list[EndUserRow]:
            return end_users_page(tenant=self.tenant, after=after, count=count)

        return self.paginate(fetch, UserOutputSerializer)


class UserDetailApi(TenantAPIView):
    @extend_schema(responses=UserOutputSerializer, summary="One end user")
    def get(self, request: Request, user_id: str) -> Response:
        user = end_user_get(tenant=self.tenant, user_id=user_id)
        return Response(UserOutputSerializer(user).data)

    @extend_schema(
        responses={200: UserDeleteOutputSerializer},
        summary="Delete everything this client holds about an end user",
        description="Other clients' rows about the user stay; the user goes with the last "
        "of them. `deleted` counts this client's rows only. Forgetting a person across every "
        "client is an operator's action (the admin).",
    )
    def delete(self, request: Request, user_id: str) -> Response:
        user = end_user_get(tenant=self.tenant, user_id=user_id)
        deleted = end_user_delete_own(tenant=self.tenant, end_user=user)
        return Response({"success": True, "id": user_id, "deleted": deleted})


class UserExportApi(TenantAPIView):
    @extend_schema(
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                description="JSON Lines: a header, one line per row, an end line with the counts"
            )
        },
        summary="Export everything this client holds about an end user",
        description="The client's own rows about the user (other clients' stay out, as for "
        "DELETE): sessions and their turns, memories of the six types (knowledge-vault values "
        "encrypted, as stored), experiences, skills with every version, and the images the "
        "turns show, in base64. No vectors. Sensitive values in the turns are masked unless the "
        "key may reveal secrets. `manage.py import_user` reads the file. Streamed.",
    )
    def get(self, request: Request, user_id: str) -> StreamingHttpResponse:
        user = end_user_get(tenant=self.tenant, user_id=user_id)
        lines = end_user_export(
            organization=self.tenant.organization,
            end_user=user,
            client_ids=[self.tenant.client.pk],
            secrets=self.tenant.reveals_secrets,
        )
        response = StreamingHttpResponse(
            (f"{line}\n" for line in lines), content_type="application/x-ndjson"
        )
        response["Content-Disposition"] = f'attachment; filename="{user.pk}.jsonl"'
        return response
