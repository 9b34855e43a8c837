from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import end_user_get
from mirix_site.api.base import TenantAPIView, UserQuerySerializer
from mirix_site.api.pagination import PositionPage
from mirix_site.api.schema import error_response
from sessions.api.serializers import (
    MessageSerializer,
    SessionCloseInputSerializer,
    SessionSerializer,
)
from sessions.models import Session
from sessions.selectors import message_list, session_get, session_get_own, session_list
from sessions.services import session_close


class SessionListApi(TenantAPIView):
    @extend_schema(
        parameters=[UserQuerySerializer],
        responses=SessionSerializer(many=True),
        summary="The user's sessions",
    )
    def get(self, request: Request) -> Response:
        sessions = session_list(tenant=self.tenant, end_user=self.query_end_user()).select_related(
            "end_user"
        )
        return self.paginate(sessions, SessionSerializer, secrets_of=self.tenant.secrets_of)


class SessionDetailApi(TenantAPIView):
    @extend_schema(
        parameters=[UserQuerySerializer], responses=SessionSerializer, summary="One session"
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = session_get(
            tenant=self.tenant, end_user=self.query_end_user(), session_id=session_id
        )
        return Response(
            SessionSerializer(session, context={"secrets_of": self.tenant.secrets_of}).data
        )


class SessionMessagesApi(TenantAPIView):
    # A session's turns go by position: its pages, and the cursor the schema states, are
    # PositionPage's.
    pagination_class = PositionPage

    @extend_schema(
        parameters=[UserQuerySerializer],
        responses=MessageSerializer(many=True),
        summary="The session's turns, in the order they were sent",
        description="Keys, passwords, e-mail addresses and phone numbers in them are masked "
        "unless the key has the secrets permission and its client wrote the turn.",
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = session_get(
            tenant=self.tenant, end_user=self.query_end_user(), session_id=session_id
        )
        messages = message_list(tenant=self.tenant, session=session)
        return self.paginate(
            messages,
            MessageSerializer,
            secrets_of=self.tenant.secrets_of,
        )


class SessionCloseApi(TenantAPIView):
    @extend_schema(
        request=SessionCloseInputSerializer,
        responses={
            200: SessionSerializer,
            409: error_response(
                "The session is closed stating another outcome or note than this close states."
            ),
        },
        summary="Close the session (idempotent); task sessions then count toward skill learning",
        description="A task session's closer may state its outcome and a note: the learning "
        "run takes them for how the session went. A chat session takes neither (422). Closing "
        "a closed session again answers it as it is, unless the close states another outcome "
        "or note than the first did (409): the first close's outcome may already be counted.",
    )
    def post(self, request: Request, session_id: str) -> Response:
        serializer = SessionCloseInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        end_user = end_user_get(tenant=self.tenant, user_id=data["user_id"])
        session = session_get_own(tenant=self.tenant, end_user=end_user, session_id=session_id)
        closed = session_close(
            session=session,
            reason=Session.CloseReason.EXPLICIT,
            outcome=data["outcome"],
            note=data["note"],
        )
        return Response(
            SessionSerializer(closed, context={"secrets_of": self.tenant.secrets_of}).data
        )
