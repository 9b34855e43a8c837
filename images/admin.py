"""The image store in the admin: images with their thumbnails and what names them, and the
remote fetches (the failed ones with their reason). Both are records: browsed, not edited."""

from __future__ import annotations

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import format_html, format_html_join

from images.models import ImageFetch, ImageObject
from images.references import image_referrers
from images.selectors import image_bytes
from images.validation import image_thumbnail
from mirix_site.common.admin import BoundedCountAdmin, ReadOnlyAdmin

THUMBNAIL_PIXELS = 96


@admin.register(ImageObject)
class ImageObjectAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    list_display = [
        "thumbnail",
        "sha256",
        "mime",
        "width",
        "height",
        "byte_size",
        "organization",
        "created_by",
        "created_at",
    ]
    list_filter = ["mime", "organization"]
    search_fields = ["sha256"]
    list_select_related = ["organization", "created_by"]
    readonly_fields = [
        "thumbnail",
        "organization",
        "sha256",
        "mime",
        "width",
        "height",
        "byte_size",
        "storage_key",
        "created_by",
        "created_at",
        "references",
    ]

    def get_urls(self) -> list:
        thumbnail = self.admin_site.admin_view(self.thumbnail_view)
        return [
            path("<int:pk>/thumbnail", thumbnail, name="images_imageobject_thumbnail"),
            *super().get_urls(),
        ]

    def thumbnail_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        image = ImageObject.objects.filter(pk=pk).first()
        if image is None or not self.has_view_permission(request, image):
            raise Http404
        data = image_thumbnail(data=image_bytes(image=image), size=THUMBNAIL_PIXELS * 2)
        kind = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
        response = HttpResponse(data, content_type=kind)
        response["X-Content-Type-Options"] = "nosniff"
        response["Cache-Control"] = "private, max-age=86400"
        return response

    @admin.display(description="image")
    def thumbnail(self, image: ImageObject) -> str:
        url = reverse("admin:images_imageobject_thumbnail", args=[image.pk])
        return format_html(
            '<img src="{}" alt="" style="max-width:{}px;max-height:{}px">',
            url,
            THUMBNAIL_PIXELS,
            THUMBNAIL_PIXELS,
        )

    @admin.display(description="named by")
    def references(self, image: ImageObject) -> str:
        rows = image_referrers(image_id=image.pk)
        if not rows:
            return "nothing (an upload not sent in a message yet)"
        return format_html_join(
            ", ", '<a href="{}">{}</a>', ((_change_url(row), row) for row in rows)
        )


def _change_url(row: object) -> str:
    meta = row._meta  # type: ignore[attr-defined]
    try:
        return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk])  # type: ignore[attr-defined]
    except NoReverseMatch:
        return ""


@admin.register(ImageFetch)
class ImageFetchAdmin(BoundedCountAdmin, ReadOnlyAdmin):
    list_display = [
        "__str__",
        "status",
        "url",
        "reason",
        "attempts",
        "organization",
        "client",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "organization", "client"]
    search_fields = ["url", "reason"]
    list_select_related = ["organization", "client", "image"]
    readonly_fields = [
        "organization",
        "client",
        "url",
        "status",
        "image",
        "reason",
        "attempts",
        "created_at",
        "finished_at",
    ]
