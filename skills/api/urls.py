from __future__ import annotations

from django.urls import path

from skills.api import experiences, learning, skills

urlpatterns = [
    path("experiences", experiences.ExperienceRecordApi.as_view(), name="experience-record"),
    path(
        "experiences/failure",
        experiences.ExperienceFailureApi.as_view(),
        name="experience-failure",
    ),
    path(
        "experiences/conversation",
        experiences.ExperienceConversationApi.as_view(),
        name="experience-conversation",
    ),
    path("experiences/recall", experiences.ExperienceRecallApi.as_view(), name="experience-recall"),
    path(
        "experiences/recommend",
        experiences.ExperienceRecommendApi.as_view(),
        name="experience-recommend",
    ),
    path("experiences/recent", experiences.ExperienceRecentApi.as_view(), name="experience-recent"),
    path("experiences/stats", experiences.ExperienceStatsApi.as_view(), name="experience-stats"),
    path(
        "experiences/actions", experiences.ExperienceActionsApi.as_view(), name="experience-actions"
    ),
    path(
        "experiences/settings",
        experiences.ExperienceSettingsApi.as_view(),
        name="experience-settings",
    ),
    path(
        "experiences/<str:experience_id>",
        experiences.ExperienceDetailApi.as_view(),
        name="experience-detail",
    ),
    path(
        "experiences/<str:experience_id>/history",
        experiences.ExperienceHistoryApi.as_view(),
        name="experience-history",
    ),
    path(
        "experiences/<str:experience_id>/supersede",
        experiences.ExperienceSupersedeApi.as_view(),
        name="experience-supersede",
    ),
    path("learning-runs", learning.LearningRunListApi.as_view(), name="learning-run-list"),
    path(
        "learning-runs/<str:run_id>",
        learning.LearningRunDetailApi.as_view(),
        name="learning-run-detail",
    ),
    path(
        "learning-runs/<str:run_id>/retry",
        learning.LearningRunRetryApi.as_view(),
        name="learning-run-retry",
    ),
    path("skills", skills.SkillListApi.as_view(), name="skill-list"),
    path("skills/retrieve", skills.SkillRetrieveApi.as_view(), name="skill-retrieve"),
    path("skills/export", skills.SkillExportApi.as_view(), name="skill-export"),
    path("skills/index.json", skills.SkillIndexApi.as_view(), name="skill-index"),
    path(
        ".well-known/agent-skills/index.json",
        skills.SkillIndexWellKnownApi.as_view(),
        name="skill-index-well-known",
    ),
    path("skills/<str:skill_id>", skills.SkillDetailApi.as_view(), name="skill-detail"),
    path(
        "skills/<str:skill_id>/SKILL.md", skills.SkillMarkdownApi.as_view(), name="skill-markdown"
    ),
    path(
        "skills/<str:skill_id>/versions",
        skills.SkillVersionListApi.as_view(),
        name="skill-versions",
    ),
    path(
        "skills/<str:skill_id>/versions/<id:number>/diff",
        skills.SkillVersionDiffApi.as_view(),
        name="skill-version-diff",
    ),
    path(
        "skills/<str:skill_id>/rollback", skills.SkillRollbackApi.as_view(), name="skill-rollback"
    ),
]
