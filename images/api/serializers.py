"""Shapes of the image endpoints: an upload (a file, or a URL: ``data:`` or ``http(s)``), an
image's description and a remote fetch's state."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse
from rest_framework import serializers

from accounts.api.fields import IntegerField, TextField
from images.models import ImageObject
from images.sources import image_source_read


class ImageUrlInputSerializer(serializers.Serializer):
    """``POST /images`` as JSON: a ``data:image/...;base64,`` URL (stored now) or an
    ``http(s)`` URL (fetched by the worker)."""

    url = TextField(max_length=None)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            return attrs | {"source": image_source_read(attrs["url"], where="url")}
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None


class ImageSerializer(serializers.Serializer):
    """A stored image. ``id`` is its SHA-256, ``url`` where to download it."""

    id = TextField(source="sha256")
    sha256 = TextField()
    mime = TextField()
    width = IntegerField()
    height = IntegerField()
    bytes = IntegerField(source="byte_size")
    url = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    def get_url(self, image: ImageObject) -> str:
        return reverse("image-detail", kwargs={"sha256": image.sha256})


class ImageFetchSerializer(serializers.Serializer):
    """A remote image's fetch: ``pending``, then ``stored`` (with its image) or ``failed``
    (with the reason)."""

    id = IntegerField()
    url = TextField()
    status = TextField()
    image = ImageSerializer(allow_null=True)
    reason = TextField(allow_blank=True)
    attempts = IntegerField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
