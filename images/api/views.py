"""The image endpoints: upload (a file, a ``data:`` URL, or an ``http(s)`` URL the worker
fetches), download by hash, and a remote fetch's state."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from images.api.serializers import ImageFetchSerializer, ImageSerializer, ImageUrlInputSerializer
from images.models import ImageObject
from images.selectors import image_bytes, image_fetch_get, image_get
from images.services import image_fetch_request, image_store, image_store_bytes
from mirix_site.api.base import TenantAPIView
from mirix_site.api.errors import UnprocessableEntity
from mirix_site.api.parsers import JsonBodyParser
from mirix_site.api.schema import error_response

# A multipart body may carry the form's boundaries and headers beside the file.
_MULTIPART_OVERHEAD = 64 * 1024

UPLOAD_INPUT = {
    "application/json": ImageUrlInputSerializer,
    "multipart/form-data": inline_serializer("ImageFileUpload", {"file": serializers.FileField()}),
}


class ImageUploadApi(TenantAPIView):
    parser_classes = [JsonBodyParser, MultiPartParser]

    def _readable(self) -> dict[str, object]:
        return {"readable_client_ids": set(self.tenant.readable_client_ids)}

    @extend_schema(
        request=UPLOAD_INPUT,
        responses={
            201: ImageSerializer,
            202: OpenApiResponse(
                ImageFetchSerializer, description="An http(s) URL: the worker fetches it."
            ),
            413: error_response("The upload is over IMAGE_MAX_BYTES."),
        },
        summary="Store an image (a file or a data: URL), or queue the fetch of an http(s) one",
    )
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("multipart/form-data"):
            image = self._upload(request)
        else:
            body = ImageUrlInputSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            source = body.validated_data["source"]
            if source.url is not None:
                fetch = image_fetch_request(
                    organization=self.tenant.organization, client=self.tenant.client, url=source.url
                )
                return Response(
                    ImageFetchSerializer(fetch, context=self._readable()).data,
                    status=status.HTTP_202_ACCEPTED,
                )
            image = image_store(
                organization=self.tenant.organization, client=self.tenant.client, image=source.image
            )
        return Response(
            ImageSerializer(image, context=self._readable()).data, status=status.HTTP_201_CREATED
        )

    def _upload(self, request: Request) -> ImageObject:
        limit = settings.IMAGE_MAX_BYTES
        announced = request.META.get("CONTENT_LENGTH") or "0"
        if announced.isdigit() and int(announced) > limit + _MULTIPART_OVERHEAD:
            raise UploadTooLarge()
        upload = request.FILES.get("file")
        if upload is None:
            raise UnprocessableEntity({"file": ["A multipart upload needs a `file` field."]})
        if upload.size is not None and upload.size > limit:
            raise UploadTooLarge()
        return image_store_bytes(
            organization=self.tenant.organization,
            client=self.tenant.client,
            data=upload.read(limit + 1),
        )


class UploadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self) -> None:
        super().__init__(f"An image is at most {settings.IMAGE_MAX_BYTES:,} bytes.")


class ImageDetailApi(TenantAPIView):
    @extend_schema(
        responses={(200, "image/*"): OpenApiTypes.BINARY},
        summary="Download one of the organization's images by its SHA-256",
    )
    def get(self, request: Request, sha256: str) -> HttpResponse:
        image = image_get(tenant=self.tenant, sha256=sha256)
        response = HttpResponse(image_bytes(image=image), content_type=image.mime)
        extension = image.storage_key.rsplit(".", 1)[-1]
        response["Content-Disposition"] = f'inline; filename="{image.sha256}.{extension}"'
        response["X-Content-Type-Options"] = "nosniff"
        # The bytes of a hash never change: a client may keep them as long as it likes.
        response["Cache-Control"] = "private, max-age=31536000, immutable"
        response["ETag"] = f'"{image.sha256}"'
        return response


class ImageFetchDetailApi(TenantAPIView):
    @extend_schema(responses=ImageFetchSerializer, summary="A remote image's fetch")
    def get(self, request: Request, fetch_id: int) -> Response:
        fetch = image_fetch_get(tenant=self.tenant, fetch_id=fetch_id)
        return Response(
            ImageFetchSerializer(
                fetch, context={"readable_client_ids": set(self.tenant.readable_client_ids)}
            ).data
        )
