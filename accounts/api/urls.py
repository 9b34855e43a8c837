from __future__ import annotations

from django.urls import path

from accounts.api import views

urlpatterns = [
    path("users/create_or_get", views.UserCreateOrGetApi.as_view(), name="user-create-or-get"),
    path("users", views.UserListApi.as_view(), name="user-list"),
    path("users/<str:user_id>", views.UserDetailApi.as_view(), name="user-detail"),
    path("users/<str:user_id>/export", views.UserExportApi.as_view(), name="user-export"),
]
