"""Shapes of the image endpoints: an upload (a file, or a URL: ``data:`` or ``http(s)``), an
image's description and a remote fetch's state."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from images.models import ImageObject
from images.sources import image_source_read
from mirix_site.api.fields import IntegerField, TextField


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
    """A stored image. ``id`` is its SHA-256, ``url`` where to download it. ``created_at`` is
    when it was first stored, shown only when a client whose rows the caller reads stored it
    (the context's ``readable_client_ids``): an image is its organization's, and another
    client's upload time would tell when it had the same bytes."""

    id = TextField(source="sha256")
    sha256 = TextField()
    mime = TextField()
    width = IntegerField()
    height = IntegerField()
    bytes = IntegerField(source="byte_size")
    url = serializers.SerializerMethodField()
    created_at = serializers.SerializerMethodField()

    def get_url(self, image: ImageObject) -> str:
        return reverse("image-detail", kwargs={"sha256": image.sha256})

    @extend_schema_field(
        serializers.DateTimeField(
            allow_null=True,
            help_text="null when a client this key does not read stored the image first",
        )
    )
    def get_created_at(self, image: ImageObject) -> str | None:
        if image.created_by_id not in self.context.get("readable_client_ids", ()):
            return None
        return serializers.DateTimeField().to_representation(image.created_at)


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
