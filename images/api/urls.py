from __future__ import annotations

from django.urls import path, register_converter

from images.api import views


class Sha256Converter:
    regex = "[0-9a-f]{64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(Sha256Converter, "sha256")

urlpatterns = [
    path("images", views.ImageUploadApi.as_view(), name="image-upload"),
    path("images/fetches/<id:fetch_id>", views.ImageFetchDetailApi.as_view(), name="image-fetch"),
    path("images/<sha256:sha256>", views.ImageDetailApi.as_view(), name="image-detail"),
]
