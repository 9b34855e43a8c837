"""The learning-run endpoints: list and read runs, queue one now, retry one that stopped short.
Each validates with a serializer, makes one service or selector call and renders the run."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import end_user_get
from mirix_site.api.base import TenantAPIView
from mirix_site.api.fields import IntegerField, TextField, UserIdField
from mirix_site.api.schema import error_response
from skills.models import LearningRun
from skills.selectors import learning_run_get, learning_runs_list
from skills.services.learning import (
    learning_run_request,
    learning_run_retry,
)


class LearningRunSerializer(serializers.Serializer):
    """A learning run: its state, what it learns from, what it did and cost."""

    id = TextField(source="pk")
    user_id = TextField(source="end_user.user_id")
    client_id = TextField()
    state = TextField()
    trigger = TextField()
    session_ids = serializers.SerializerMethodField()
    attempts = IntegerField()
    steps = IntegerField()
    llm_calls = IntegerField()
    input_tokens = IntegerField()
    output_tokens = IntegerField()
    skills_created = IntegerField()
    skills_edited = IntegerField()
    skills_merged = IntegerField()
    skills_deprecated = IntegerField()
    experiences_distilled = IntegerField()
    experiences_consumed = IntegerField()
    experiences_pooled = IntegerField()
    warnings = serializers.ListField(child=TextField())
    error = TextField(allow_blank=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_session_ids(self, run: LearningRun) -> list[str]:
        """The task sessions it learns from, by the callers' session ids."""
        return sorted(link.session.session_id or "" for link in run.session_links.all())


class LearningRunListParamsSerializer(serializers.Serializer):
    user_id = UserIdField(required=False)


class LearningRunRequestSerializer(serializers.Serializer):
    user_id = UserIdField()


RUN_ID = OpenApiParameter("run_id", str, OpenApiParameter.PATH, description="the run's id")


class LearningRunListApi(TenantAPIView):
    @extend_schema(
        parameters=[LearningRunListParamsSerializer],
        responses={
            200: LearningRunSerializer(many=True),
            404: error_response("user_id names no user of this organization."),
        },
        summary="Learning runs, newest first (of one user with user_id)",
    )
    def get(self, request: Request) -> Response:
        params = LearningRunListParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        user_id = params.validated_data.get("user_id")
        end_user = end_user_get(tenant=self.tenant, user_id=user_id) if user_id else None
        return self.paginate(
            learning_runs_list(tenant=self.tenant, end_user=end_user), LearningRunSerializer
        )

    @extend_schema(
        request=LearningRunRequestSerializer,
        responses={
            201: LearningRunSerializer,
            200: LearningRunSerializer,
            409: error_response("No closed task session of the user is left to learn from."),
        },
        summary="Queue a learning run of the user now (or return the one already queued)",
    )
    def post(self, request: Request) -> Response:
        body = LearningRunRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        end_user = end_user_get(tenant=self.tenant, user_id=body.validated_data["user_id"])
        run, created = learning_run_request(tenant=self.tenant, end_user=end_user)
        run = learning_run_get(tenant=self.tenant, run_id=str(run.pk))
        return Response(
            LearningRunSerializer(run).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class LearningRunDetailApi(TenantAPIView):
    @extend_schema(parameters=[RUN_ID], responses=LearningRunSerializer, summary="A learning run")
    def get(self, request: Request, run_id: str) -> Response:
        return Response(LearningRunSerializer(_run(self, run_id)).data)


class LearningRunRetryApi(TenantAPIView):
    @extend_schema(
        parameters=[RUN_ID],
        request=None,
        responses={
            200: LearningRunSerializer,
            409: error_response("The run did not stop short, or a run of the user is queued."),
        },
        summary="Queue a run that failed (or hit its context or budget limit) again",
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = learning_run_retry(tenant=self.tenant, run=_run(self, run_id))
        return Response(
            LearningRunSerializer(learning_run_get(tenant=self.tenant, run_id=str(run.pk))).data
        )


def _run(view: TenantAPIView, run_id: str) -> LearningRun:
    return learning_run_get(tenant=view.tenant, run_id=run_id)
