"""The skill endpoints: list, read, change (a new version), versions and their diffs, rollback,
retrieval for a task, and export as Agent Skills (a zip, a discovery index, one SKILL.md).
Each validates with a serializer, makes one service or selector call and renders the result."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import end_user_get
from mirix_site.api.base import TenantAPIView, UserQuerySerializer
from mirix_site.api.fields import (
    BooleanField,
    IntegerField,
    TextChoiceField,
    TextField,
    UserIdField,
)
from mirix_site.api.schema import error_response
from sessions.selectors import session_get_own
from skills.content import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from skills.export import discovery_index, skill_md, skills_zip
from skills.lifecycle import OPERATOR_STATUSES
from skills.models import Skill, SkillVersion
from skills.selectors import (
    skill_experience_ids,
    skill_get,
    skill_versions_list,
    skills_list,
    skills_served,
)
from skills.services.retrieval import skills_retrieve
from skills.services.skills import Written, skill_confidence, skill_patch, skill_rollback

SKILL_ID = OpenApiParameter("skill_id", str, OpenApiParameter.PATH, description="the skill's id")
MAX_RETRIEVE = 50
# Naming a session_id links the skills found to the session, whose outcome then counts as
# their evidence: a write (mirix_site.api.permissions.KeyMayWrite refuses it to a read-only key).
LINK_NEEDS_WRITE = (
    "A read-only key may retrieve skills but not link them to a task session (session_id): "
    "the session's outcome would count for them."
)


class SkillSerializer(serializers.Serializer):
    """A skill: its current text, status, evidence and confidence, and what it rests on."""

    def to_representation(self, instance: Skill) -> dict[str, Any]:
        return {
            "id": str(instance.pk),
            "memory_type": "skill",
            "user_id": instance.end_user.user_id,
            "client_id": instance.client_id,
            "name": instance.name,
            "description": instance.description,
            "triggers": instance.triggers,
            "instructions": instance.instructions,
            "pitfalls": instance.pitfalls,
            "tools": instance.tools,
            "tool_descriptions": instance.tool_descriptions,
            "status": instance.status,
            "version": instance.version,
            "confidence": skill_confidence(instance),
            "evidence": {
                "successes": instance.successes,
                "failures": instance.failures,
                "partials": instance.partials,
                "learned_successes": instance.learned_successes,
                "learned_failures": instance.learned_failures,
                "learned_partials": instance.learned_partials,
            },
            "needs_review": instance.needs_review,
            "review_reason": instance.review_reason,
            "filter_tags": {},
            "created_at": instance.created_at.isoformat(),
            "updated_at": instance.updated_at.isoformat(),
        }


class SkillDetailSerializer(SkillSerializer):
    """A skill with its provenance: the versions and experiences behind it."""

    def to_representation(self, instance: Skill) -> dict[str, Any]:
        versions = list(skill_versions_list(skill=instance).values("number", "author", "run_id"))
        return super().to_representation(instance) | {
            "versions": [
                {
                    "number": row["number"],
                    "author": row["author"],
                    "run_id": str(row["run_id"]) if row["run_id"] else None,
                }
                for row in versions
            ],
            "source_experience_ids": [str(pk) for pk in skill_experience_ids(skill=instance)],
        }


class SkillVersionSerializer(serializers.Serializer):
    def to_representation(self, instance: SkillVersion) -> dict[str, Any]:
        return {
            "number": instance.number,
            "author": instance.author,
            "operation": instance.operation,
            "snapshot": instance.snapshot,
            "run_id": str(instance.run_id) if instance.run_id else None,
            "experience_ids": [str(pk) for pk in instance.experience_ids],
            "needs_review": instance.needs_review,
            "note": instance.note,
            "created_at": instance.created_at.isoformat(),
        }


class RetrievedSkillSerializer(SkillSerializer):
    """A skill found for a task, with how it was found and why it passed the gate."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        hit = instance
        candidate = hit.candidate
        return super().to_representation(hit.row) | {
            "score": candidate.score,
            "similarity": candidate.similarity,
            "ranks": {"bm25": candidate.bm25_rank, "embedding": candidate.vector_rank},
            "gate": candidate.gate,
            "why": _why(candidate.gate, candidate.similarity, hit.row.status),
        }


def _why(gate: str, similarity: float | None, status: str) -> str:
    shown = f"{similarity:.3f}" if similarity is not None else "none"
    reasons = {
        "strong": f"similarity {shown} is at or above the gate's strong threshold",
        "kept": f"similarity {shown} is at or above the gate's minimum",
        "kept_bm25_top3": f"among the top 3 keyword matches (similarity {shown})",
        "kept_unembedded": "not embedded yet: judged by its keyword match alone",
        "off": "no gate calibration for this model: ranked by fusion alone",
    }
    reason = reasons.get(gate, gate)
    return reason + ("; a candidate, not yet proven" if status == Skill.Status.CANDIDATE else "")


class SkillListParamsSerializer(serializers.Serializer):
    user_id = UserIdField(required=False)
    status = TextChoiceField(choices=Skill.Status.choices, required=False)


class SkillPatchSerializer(serializers.Serializer):
    name = TextField(required=False, max_length=MAX_NAME_CHARS)
    description = TextField(required=False, max_length=MAX_DESCRIPTION_CHARS)
    triggers = serializers.ListField(child=TextField(max_length=1000), required=False)
    instructions = TextField(required=False, allow_blank=True, max_length=40_000)
    pitfalls = serializers.ListField(child=TextField(max_length=2000), required=False)
    status = TextChoiceField(choices=[(s, s) for s in OPERATOR_STATUSES], required=False)
    needs_review = BooleanField(required=False)
    note = TextField(required=False, allow_blank=True, max_length=2000)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not set(attrs) - {"note"}:
            raise serializers.ValidationError("Name at least one field to change.")
        return attrs


class RollbackSerializer(serializers.Serializer):
    version = IntegerField(min_value=1)


class RetrieveSerializer(serializers.Serializer):
    user_id = UserIdField()
    task = TextField(max_length=10_000)
    limit = IntegerField(min_value=1, max_value=MAX_RETRIEVE, default=5)
    session_id = TextField(required=False, max_length=255)
    search_method = TextChoiceField(
        choices=["hybrid", "bm25", "embedding"], required=False, default="hybrid"
    )


class _SkillApi(TenantAPIView):
    def skill(self, skill_id: str) -> Skill:
        return skill_get(tenant=self.tenant, skill_id=skill_id)


def _changed(written: Written | Skill) -> Skill:
    return written.skill if isinstance(written, Written) else written


class SkillListApi(TenantAPIView):
    @extend_schema(
        parameters=[SkillListParamsSerializer],
        responses={200: SkillSerializer(many=True), 404: error_response("No such user.")},
        summary="Skills by name (of one user with user_id; deleted ones only by status)",
    )
    def get(self, request: Request) -> Response:
        params = SkillListParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        user_id = params.validated_data.get("user_id")
        end_user = end_user_get(tenant=self.tenant, user_id=user_id) if user_id else None
        rows = skills_list(
            tenant=self.tenant, end_user=end_user, status=params.validated_data.get("status")
        )
        return self.paginate(rows, SkillSerializer)


class SkillDetailApi(_SkillApi):
    @extend_schema(parameters=[SKILL_ID], responses=SkillDetailSerializer, summary="A skill")
    def get(self, request: Request, skill_id: str) -> Response:
        return Response(SkillDetailSerializer(self.skill(skill_id)).data)

    @extend_schema(
        parameters=[SKILL_ID],
        request=SkillPatchSerializer,
        responses={
            200: SkillDetailSerializer,
            409: error_response("The name is another skill's of the user, or it is deleted."),
        },
        summary="Change a skill: new text is a new version (author operator)",
    )
    def patch(self, request: Request, skill_id: str) -> Response:
        skill = self.skill(skill_id)
        body = SkillPatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changes = dict(body.validated_data)
        note = changes.pop("note", "")
        written = skill_patch(tenant=self.tenant, skill=skill, changes=changes, note=note)
        return Response(SkillDetailSerializer(self.skill(str(_changed(written).pk))).data)


class SkillVersionListApi(_SkillApi):
    @extend_schema(
        parameters=[SKILL_ID],
        responses=SkillVersionSerializer(many=True),
        summary="A skill's versions, newest first",
    )
    def get(self, request: Request, skill_id: str) -> Response:
        return self.paginate(
            skill_versions_list(skill=self.skill(skill_id)), SkillVersionSerializer
        )


class SkillVersionDiffApi(_SkillApi):
    @extend_schema(
        parameters=[
            SKILL_ID,
            OpenApiParameter("number", int, OpenApiParameter.PATH, description="version"),
        ],
        responses={
            200: inline_serializer(
                "SkillVersionDiff",
                {
                    "skill_id": TextField(),
                    "number": IntegerField(),
                    "previous": IntegerField(allow_null=True),
                    "diff": TextField(),
                },
            )
        },
        summary="What a version changed from the one before (a unified diff)",
    )
    def get(self, request: Request, skill_id: str, number: int) -> Response:
        skill = self.skill(skill_id)
        version = skill_versions_list(skill=skill).filter(number=number).first()
        if version is None:
            raise NotFound()
        return Response(
            {
                "skill_id": str(skill.pk),
                "number": version.number,
                "previous": version.number - 1 if version.number > 1 else None,
                "diff": version.diff,
            }
        )


class SkillRollbackApi(_SkillApi):
    @extend_schema(
        parameters=[SKILL_ID],
        request=RollbackSerializer,
        responses={
            200: SkillDetailSerializer,
            409: error_response("No such version, or the skill is deleted."),
        },
        summary="Write a new version equal to an old one",
    )
    def post(self, request: Request, skill_id: str) -> Response:
        skill = self.skill(skill_id)
        body = RollbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        written = skill_rollback(
            tenant=self.tenant, skill=skill, number=body.validated_data["version"]
        )
        return Response(SkillDetailSerializer(self.skill(str(written.skill.pk))).data)


class SkillRetrieveApi(TenantAPIView):
    # A search: a read-only key may retrieve; naming a session_id writes (the link).
    writes = False
    read_only_message = LINK_NEEDS_WRITE

    def writes_for(self, request: Request) -> bool:
        return isinstance(request.data, dict) and bool(request.data.get("session_id"))

    @extend_schema(
        request=RetrieveSerializer,
        responses={
            200: inline_serializer(
                "SkillsRetrieved",
                {
                    "success": BooleanField(),
                    "task": TextField(),
                    "embedding_model": TextField(allow_null=True),
                    "gate": serializers.DictField(allow_null=True),
                    "skills": RetrievedSkillSerializer(many=True),
                    "count": IntegerField(),
                },
            ),
            403: error_response(LINK_NEEDS_WRITE),
            404: error_response(
                "No such user, or session_id names no session of the user that this client owns."
            ),
        },
        summary="The skills for a task, ranked, each with its confidence and why it passed",
    )
    def post(self, request: Request) -> Response:
        body = RetrieveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        end_user = end_user_get(tenant=self.tenant, user_id=data["user_id"])
        session = None
        if data.get("session_id"):
            # Linking writes: the session must be the caller's own (another's: 404).
            session = session_get_own(
                tenant=self.tenant, end_user=end_user, session_id=data["session_id"]
            )
        found = skills_retrieve(
            tenant=self.tenant,
            end_user=end_user,
            task=data["task"],
            limit=data["limit"],
            session_id=session.pk if session is not None else None,
            method=data["search_method"],
        )
        thresholds = found.gate_thresholds.get("skill")
        return Response(
            {
                "success": True,
                "task": data["task"],
                "embedding_model": found.embedding_model,
                "gate": (
                    {
                        "min_similarity": thresholds.min_similarity,
                        "strong_similarity": thresholds.strong_similarity,
                    }
                    if thresholds is not None
                    else None
                ),
                "skills": RetrievedSkillSerializer(found.hits, many=True).data,
                "count": len(found.hits),
            }
        )


def _served(view: TenantAPIView) -> list[Skill]:
    return skills_served(tenant=view.tenant, end_user=view.query_end_user())


class SkillExportApi(TenantAPIView):
    @extend_schema(
        parameters=[UserQuerySerializer],
        responses={(200, "application/zip"): OpenApiResponse(description="the zip")},
        summary="The user's served skills as a zip of <name>/SKILL.md (Agent Skills)",
    )
    def get(self, request: Request) -> HttpResponse:
        body = skills_zip(_served(self), confidence=skill_confidence)
        response = HttpResponse(body, content_type="application/zip")
        response["Content-Disposition"] = 'attachment; filename="skills.zip"'
        return response


class SkillIndexApi(TenantAPIView):
    @extend_schema(
        parameters=[UserQuerySerializer],
        responses={200: OpenApiResponse(description="an Agent Skills discovery index")},
        summary="The user's served skills as an Agent Skills discovery index",
    )
    def get(self, request: Request) -> Response:
        response = Response(
            discovery_index(
                _served(self),
                confidence=skill_confidence,
                url=lambda skill: request.build_absolute_uri(
                    reverse("skill-markdown", args=[str(skill.pk)])
                ),
            )
        )
        # One key's view of one user, changed by every learning run: never shared, always
        # revalidated (the discovery RFC asks for fitting Cache-Control).
        response["Cache-Control"] = "private, no-cache"
        return response


class SkillIndexWellKnownApi(SkillIndexApi):
    """The user's served skills as an Agent Skills discovery index, at the path the discovery
    RFC (0.2.0) has clients look for it: ``/.well-known/agent-skills/index.json``, the same
    answer as ``/skills/index.json`` (an API key, ``user_id``)."""

    @extend_schema(
        operation_id="skills_index_well_known",
        tags=["skills"],
        parameters=[UserQuerySerializer],
        responses={200: OpenApiResponse(description="an Agent Skills discovery index")},
        summary="The user's served skills as an Agent Skills discovery index (well-known path)",
    )
    def get(self, request: Request) -> Response:
        return super().get(request)


class SkillMarkdownApi(_SkillApi):
    @extend_schema(
        parameters=[SKILL_ID],
        responses={(200, "text/markdown"): OpenApiResponse(description="the SKILL.md")},
        summary="A skill's SKILL.md",
    )
    def get(self, request: Request, skill_id: str) -> HttpResponse:
        skill = self.skill(skill_id)
        text = skill_md(skill, confidence=skill_confidence(skill))
        return HttpResponse(text.encode(), content_type="text/markdown; charset=utf-8")
