from __future__ import annotations

from django.urls import path

from sessions.api import views

urlpatterns = [
    path("sessions", views.SessionListApi.as_view(), name="session-list"),
    path("sessions/<str:session_id>", views.SessionDetailApi.as_view(), name="session-detail"),
    path(
        "sessions/<str:session_id>/messages",
        views.SessionMessagesApi.as_view(),
        name="session-messages",
    ),
    path("sessions/<str:session_id>/close", views.SessionCloseApi.as_view(), name="session-close"),
]
