"""The experience endpoints: record (one, a batch, a failure, a transcript), recall, recommend,
recent, stats, action groups, one by id, supersede, delete. Each validates with a serializer,
makes one service or selector call and renders the answer."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import end_user_get
from memory.api.retrieval import RetrievalApiView
from mirix_site.api.base import TenantAPIView, UserQuerySerializer
from mirix_site.api.errors import UnprocessableEntity
from mirix_site.api.fields import BooleanField, IntegerField, TextField
from mirix_site.api.history import history_response, history_serializer
from mirix_site.api.pagination import KeysetPage
from mirix_site.api.schema import error_response
from mirix_site.search.services import retrieval_start
from skills.api.serializers import (
    ActionGroupSerializer,
    ConversationRecordSerializer,
    ExperienceBatchSerializer,
    ExperienceRecordSerializer,
    ExperienceSerializer,
    ExperienceSettingsSerializer,
    FailureRecordSerializer,
    RecalledSerializer,
    RecallParamsSerializer,
    RecentParamsSerializer,
    RecommendParamsSerializer,
    SupersedeSerializer,
    experience_input,
)
from skills.learning.transcripts import transcript_distill
from skills.models import Experience, Origin
from skills.selectors import (
    action_groups_list,
    experience_get,
    experience_settings_get,
    experience_stats,
    experiences_recent,
    half_life_for,
)
from skills.services.experiences import (
    Recorded,
    experience_delete,
    experience_record_transcript,
    experience_settings_set,
    experience_supersede,
    experiences_record,
    transcript_digest,
)
from skills.services.retrieval import experience_recommend, experiences_recall

CONTEXT_PARAM = re.compile(r"^context\.([A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*)$")
MAX_CONTEXT_FILTERS = 10

REFERENCE_MISSING = error_response(
    "supersedes or recommendation_id names nothing of this user that this client owns "
    "(missing, another user's or another client's alike)."
)
RECORDED = inline_serializer(
    "ExperienceRecorded",
    {
        "success": BooleanField(),
        "experience": ExperienceSerializer(),
        "warnings": serializers.ListField(child=TextField()),
    },
)


def _recorded_single(recorded: Recorded) -> dict[str, Any]:
    return {
        "success": True,
        "experience": ExperienceSerializer(recorded.experiences[0]).data,
        "warnings": [message for _, message in recorded.warnings],
    }


def _record(tenant: Any, user_id: str, items: list[Any], prefix: str = "") -> Recorded:
    return experiences_record(tenant=tenant, user_id=user_id, items=items, prefix=prefix)


class ExperienceRecordApi(TenantAPIView):
    @extend_schema(
        request=ExperienceRecordSerializer,
        responses={201: RECORDED, 404: REFERENCE_MISSING},
        summary="Record an experience, or a batch of up to 1,000 ({user_id, experiences: [...]})",
        description="A batch is validated whole: one bad item refuses them all, named "
        "experiences.<index>.<field>. A score that contradicts the outcome is stored, with "
        "a warning.",
    )
    def post(self, request: Request) -> Response:
        if isinstance(request.data, dict) and "experiences" in request.data:
            batch = ExperienceBatchSerializer(data=request.data)
            batch.is_valid(raise_exception=True)
            data = batch.validated_data
            recorded = _record(
                self.tenant,
                data["user_id"],
                [experience_input(item) for item in data["experiences"]],
                prefix="experiences.",
            )
            body = {
                "success": True,
                "experiences": ExperienceSerializer(recorded.experiences, many=True).data,
                "count": len(recorded.experiences),
                "warnings": [
                    {"index": index, "message": message} for index, message in recorded.warnings
                ],
            }
            return Response(body, status=status.HTTP_201_CREATED)
        single = ExperienceRecordSerializer(data=request.data)
        single.is_valid(raise_exception=True)
        recorded = _record(self.tenant, single.validated_data["user_id"], [single.to_input()])
        return Response(_recorded_single(recorded), status=status.HTTP_201_CREATED)


class ExperienceFailureApi(TenantAPIView):
    @extend_schema(
        request=FailureRecordSerializer,
        responses={201: RECORDED, 404: REFERENCE_MISSING},
        summary="Record a dead end and why, so that it is not tried again",
    )
    def post(self, request: Request) -> Response:
        body = FailureRecordSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        recorded = _record(self.tenant, body.validated_data["user_id"], [body.to_input()])
        return Response(_recorded_single(recorded), status=status.HTTP_201_CREATED)


class ExperienceConversationApi(TenantAPIView):
    @extend_schema(
        request=ConversationRecordSerializer,
        responses={
            200: inline_serializer(
                "ExperienceReplaced",
                {
                    "success": BooleanField(),
                    "experience": ExperienceSerializer(),
                    "replaced": BooleanField(),
                    "warnings": serializers.ListField(child=TextField()),
                },
            ),
            201: RECORDED,
        },
        summary="Distill a finished transcript into one experience (sending it again replaces it)",
        description="The task is the user's first request, the action the assistant's last "
        "answer and the tools it called; the outcome is the one given, else what the user's "
        "closing turn says; with neither, 422.",
    )
    def post(self, request: Request) -> Response:
        body = ConversationRecordSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        draft = transcript_distill(data["normalized"])
        outcome = data.get("outcome") or draft.outcome
        if outcome is None:
            raise UnprocessableEntity(
                {"outcome": ["The transcript does not say how it went: give the outcome."]}
            )
        item = experience_input(
            {
                "task": draft.task,
                "action": draft.action,
                "outcome": outcome,
                "score": data.get("score"),
                "context": (data.get("context") or {}) | {"source": "transcript"},
                "filter_tags": data.get("filter_tags"),
                "recommendation_id": data.get("recommendation_id"),
            },
            origin=Origin.CONVERSATION,
            transcript_digest=transcript_digest(data["messages"]),
        )
        row, replaced = experience_record_transcript(
            tenant=self.tenant, user_id=data["user_id"], item=item
        )
        return Response(
            {
                "success": True,
                "experience": ExperienceSerializer(row).data,
                "replaced": replaced,
                "warnings": [],
            },
            status=status.HTTP_200_OK if replaced else status.HTTP_201_CREATED,
        )


def _context_filters(request: Request) -> dict[str, str]:
    filters: dict[str, str] = {}
    for name, value in request.query_params.items():
        if not name.startswith("context."):
            continue
        match = CONTEXT_PARAM.match(name)
        if match is None:
            raise UnprocessableEntity(
                {name: ["A context key: letters, digits, _ and -, dotted for nested keys."]}
            )
        filters[match.group(1)] = value
    if len(filters) > MAX_CONTEXT_FILTERS:
        raise UnprocessableEntity({"context": [f"At most {MAX_CONTEXT_FILTERS} context filters."]})
    return filters


class ExperienceRecallApi(RetrievalApiView):
    @extend_schema(
        parameters=[RecallParamsSerializer],
        responses=inline_serializer(
            "ExperiencesRecalled",
            {
                "success": BooleanField(),
                "query": TextField(),
                "results": RecalledSerializer(many=True),
                "count": IntegerField(),
            },
        ),
        summary="Past attempts relevant to a query: BM25 and embeddings over task and action",
        description="context.<key>=<value> (any number of them, up to 10) keeps the "
        "experiences whose context holds that value at that key (a dotted path for nested "
        "objects; the value matches as the JSON it spells or as text).",
    )
    def get(self, request: Request) -> Response:
        params = RecallParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        if data["search_method"] != "bm25":
            retrieval_start(data["query"])
        self.outcome = experiences_recall(
            tenant=self.tenant,
            end_user=end_user_get(tenant=self.tenant, user_id=data["user_id"]),
            query=data["query"],
            k=data["k"],
            outcome=data.get("outcome"),
            context=_context_filters(request),
            include_superseded=data["include_superseded"],
            half_life_days=half_life_for(tenant=self.tenant, asked=data.get("half_life_days")),
            method=data["search_method"],
        )
        results = RecalledSerializer(self.outcome.hits, many=True).data
        return Response(
            {"success": True, "query": data["query"], "results": results, "count": len(results)}
        )


class ExperienceRecommendApi(RetrievalApiView):
    @extend_schema(
        parameters=[RecommendParamsSerializer],
        responses=OpenApiTypes.OBJECT,
        summary="The best-supported action for a task, with an honest confidence",
        description="confidence: the 5% lower bound of the action's success rate, "
        "Beta(0.5 + s, 0.5 + f) with a partial counted half each way, from its raw counts among "
        "the relevant experiences. Relevance (and a half-life's recency) choose the winner, never "
        "the confidence. An action that has only failed is never recommended. Nothing relevant: "
        "found false. Record the outcome of following it with its recommendation_id.",
    )
    def get(self, request: Request) -> Response:
        params = RecommendParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        retrieval_start(data["task"])
        recommended = experience_recommend(
            tenant=self.tenant,
            end_user=end_user_get(tenant=self.tenant, user_id=data["user_id"]),
            task=data["task"],
            explore=data["explore"],
            seed=data.get("seed"),
            weight_by_relevance=data["weight_by_relevance"],
            include_superseded=data["include_superseded"],
            half_life_days=half_life_for(tenant=self.tenant, asked=data.get("half_life_days")),
        )
        self.outcome = recommended.outcome
        body: dict[str, Any] = {
            "success": True,
            "found": recommended.winner is not None,
            "task": recommended.task,
            "mode": recommended.mode,
            "why": recommended.why,
        }
        if recommended.winner is not None:
            winner = dict(recommended.winner)
            body |= {
                "recommendation_id": str(recommended.recommendation.pk),
                "action": winner.pop("action"),
                **winner,
                "runners_up": recommended.runners_up,
            }
        return Response(body)


class ExperienceRecentApi(TenantAPIView):
    @extend_schema(
        parameters=[RecentParamsSerializer],
        responses=ExperienceSerializer(many=True),
        summary="The user's experiences, newest first (superseded ones too)",
    )
    def get(self, request: Request) -> Response:
        params = RecentParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        rows = experiences_recent(
            tenant=self.tenant,
            end_user=end_user_get(tenant=self.tenant, user_id=data["user_id"]),
            outcome=data.get("outcome"),
        )
        return self.paginate(rows, ExperienceSerializer)


class ExperienceStatsApi(TenantAPIView):
    @extend_schema(
        parameters=[UserQuerySerializer],
        responses=OpenApiTypes.OBJECT,
        summary="Counts of the user's experiences, and how followed recommendations did per "
        "confidence band",
    )
    def get(self, request: Request) -> Response:
        end_user = self.query_end_user()
        return Response(
            {"success": True, **experience_stats(tenant=self.tenant, end_user=end_user)}
        )


class ActionGroupPage(KeysetPage):
    """Action groups, newest activity first (their oldest phrasing's id breaks ties)."""

    ordering = ("-last_at", "-id")


class ExperienceActionsApi(TenantAPIView):
    pagination_class = ActionGroupPage

    @extend_schema(
        parameters=[UserQuerySerializer],
        responses=ActionGroupSerializer(many=True),
        summary="The user's action groups: the phrasings recommend pools as one action",
        description="Each group with its phrasings (how many current experiences each) and "
        "its outcome counts, newest activity first. Phrasings join groups when the worker has "
        "embedded them; an operator merges groups or splits a phrasing out in the admin.",
    )
    def get(self, request: Request) -> Response:
        end_user = self.query_end_user()
        return self.paginate(
            lambda after, count: action_groups_list(
                tenant=self.tenant, end_user=end_user, after=after, count=count
            ),
            ActionGroupSerializer,
        )


class ExperienceSettingsApi(TenantAPIView):
    """The calling client's defaults for recall and recommend."""

    @extend_schema(responses=ExperienceSettingsSerializer, summary="The client's defaults")
    def get(self, request: Request) -> Response:
        return Response(
            ExperienceSettingsSerializer(experience_settings_get(tenant=self.tenant)).data
        )

    @extend_schema(
        request=ExperienceSettingsSerializer,
        responses=ExperienceSettingsSerializer,
        summary="Set the client's defaults (the half-life a request that names none uses)",
    )
    def put(self, request: Request) -> Response:
        body = ExperienceSettingsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        half_life = body.validated_data.get("half_life_days") or None
        row = experience_settings_set(tenant=self.tenant, half_life_days=half_life)
        return Response(ExperienceSettingsSerializer(row).data)


class _ExperienceApi(TenantAPIView):
    """An experience addressed by its id alone: ids are the tenant's, whichever user's."""

    def experience(self, experience_id: str) -> Experience:
        return experience_get(tenant=self.tenant, experience_id=experience_id)


class ExperienceDetailApi(_ExperienceApi):
    @extend_schema(responses=ExperienceSerializer, summary="One experience (superseded or not)")
    def get(self, request: Request, experience_id: str) -> Response:
        return Response(ExperienceSerializer(self.experience(experience_id)).data)

    @extend_schema(
        responses={
            200: inline_serializer(
                "ExperienceDeleted", {"success": BooleanField(), "id": TextField()}
            ),
        },
        summary="Delete an experience (what it superseded becomes current again)",
    )
    def delete(self, request: Request, experience_id: str) -> Response:
        row = self.experience(experience_id)
        experience_delete(tenant=self.tenant, experience=row)
        return Response({"success": True, "id": experience_id})


class ExperienceHistoryApi(_ExperienceApi):
    @extend_schema(
        responses={200: history_serializer("ExperienceHistory", id=TextField())},
        summary="An experience's history: every change, before and after, by whom",
    )
    def get(self, request: Request, experience_id: str) -> Response:
        row = self.experience(experience_id)
        return Response(history_response(self.tenant, row, id=str(row.pk)))


class ExperienceSupersedeApi(_ExperienceApi):
    @extend_schema(
        request=SupersedeSerializer,
        responses={
            200: ExperienceSerializer,
            404: error_response(
                "No such experience, or `by` names none of this user that this client owns "
                "(missing, another user's or another client's alike)."
            ),
            409: error_response("It would supersede itself, directly or through a cycle."),
        },
        summary="Mark an experience replaced by another of the same user",
    )
    def post(self, request: Request, experience_id: str) -> Response:
        # The path's experience first: a missing one is 404 whatever the body says.
        row = self.experience(experience_id)
        body = SupersedeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # A body's reference to what the caller cannot see answers as a path's does (404).
        by = experience_get(tenant=self.tenant, experience_id=body.validated_data["by"])
        row = experience_supersede(tenant=self.tenant, experience=row, by=by)
        return Response(ExperienceSerializer(row).data)
