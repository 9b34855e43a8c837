"""Reads of the image store. An image is its organization's: any client of it may read an
image by its hash (which only someone holding the bytes can name); another organization's
answers as a missing one. A fetch is read by the clients that may read its client's rows."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from accounts.tenancy import Tenant
from images.models import ImageFetch, ImageObject
from images.storage import storage_read

# Pending fetches the recovery job queues again at most per run; the next run takes the rest.
RECOVERY_BATCH = 500


def image_get(*, tenant: Tenant, sha256: str) -> ImageObject:
    """Raises ``ImageObject.DoesNotExist`` for a hash the organization has no image of."""
    return ImageObject.objects.get(organization=tenant.organization, sha256=sha256)


def image_bytes(*, image: ImageObject) -> bytes:
    return storage_read(key=image.storage_key)


def image_fetch_get(*, tenant: Tenant, fetch_id: int) -> ImageFetch:
    """Raises ``ImageFetch.DoesNotExist`` for a fetch the tenant may not read."""
    return ImageFetch.objects.select_related("image").get(
        pk=fetch_id,
        organization=tenant.organization,
        client_id__in=tenant.readable_client_ids,
    )


def image_fetches_pending(*, older_than: timedelta) -> list[tuple[int, str]]:
    """Fetches pending for longer than ``older_than``, oldest first (the recovery job's): each
    one's id and organization's."""
    cutoff = timezone.now() - older_than
    return list(
        ImageFetch.objects.filter(status=ImageFetch.Status.PENDING, created_at__lt=cutoff)
        .order_by("created_at")
        .values_list("pk", "organization_id")[:RECOVERY_BATCH]
    )


def images_fetched_from(*, tenant: Tenant, urls: list[str]) -> list[str]:
    """The hashes of the organization's images stored from these URLs before (a remote image
    sent again is known by its URL without fetching it again)."""
    if not urls:
        return []
    return list(
        ImageFetch.objects.filter(
            organization=tenant.organization,
            url__in=urls,
            status=ImageFetch.Status.STORED,
            image__isnull=False,
        )
        .values_list("image__sha256", flat=True)
        .distinct()
    )


def images_get(*, tenant: Tenant, sha256s: list[str]) -> dict[str, ImageObject]:
    """The organization's images with these hashes, by hash (missing ones absent)."""
    if not sha256s:
        return {}
    found = ImageObject.objects.filter(organization=tenant.organization, sha256__in=sha256s)
    return {image.sha256: image for image in found}
