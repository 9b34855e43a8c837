"""Writes of the image store: store validated bytes once per organization, fetch remote images
in the worker, and release the images nothing names any more.

Storing and releasing one image (an organization's SHA-256) are serialized by a transaction
advisory lock on it, and the release of a row takes it FOR UPDATE where a new reference takes
it FOR KEY SHARE (``images_hold``): so a message linking an image and the release of that image
never both succeed, and a file is deleted only when no row names it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Client, Organization
from images.fetch import ImageFetchError, image_fetch
from images.models import ImageFetch, ImageObject
from images.references import images_referenced
from images.signals import image_fetch_finished
from images.storage import storage_delete, storage_key, storage_write
from images.validation import ImageInvalidError, ValidImage, image_validate
from mirix_site.common.publish import task_labels, task_publish

logger = logging.getLogger(__name__)

# The first key of this app's two-key advisory locks (other locks of the project use one key).
_LOCK_CLASS = 0x494D47  # "IMG"
# Attempts at a fetch whose failures may pass (timeouts, 5xx) before it is recorded as failed.
FETCH_ATTEMPTS = 3
# The fetch task (``images.tasks``), queued by its name.
IMAGE_FETCH_TASK = "images.tasks.image_fetch_task"


def _image_lock(*, organization_id: str, sha256: str) -> None:
    digest = hashlib.sha256(f"{organization_id}:{sha256}".encode()).digest()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            [_LOCK_CLASS, int.from_bytes(digest[:4], "big", signed=True)],
        )


@transaction.atomic(savepoint=False)
def image_store(*, organization: Organization, client: Client, image: ValidImage) -> ImageObject:
    """The organization's image with these (validated, stripped) bytes, stored if new."""
    sha256 = hashlib.sha256(image.data).hexdigest()
    # Held like any image a turn names: a release deleting it meanwhile is waited for, and
    # then the image is stored again rather than linked to a row about to disappear. Looked
    # for before the lock, which is held to the caller's commit: adds of an image stored
    # already do not wait for each other (bench/images.py, the same image from 4 threads).
    existing = images_hold(organization=organization, sha256s=[sha256]).get(sha256)
    if existing is not None:
        return existing
    _image_lock(organization_id=organization.pk, sha256=sha256)
    existing = images_hold(organization=organization, sha256s=[sha256]).get(sha256)
    if existing is not None:
        return existing  # stored by the writer the lock waited for
    key = storage_key(organization_id=organization.pk, sha256=sha256, extension=image.extension)
    # The file first: a row never names a missing file. Should this transaction roll back, the
    # file stays unnamed until the same bytes come again (and are found in place).
    storage_write(key=key, data=image.data)
    return ImageObject.objects.create(
        organization=organization,
        sha256=sha256,
        mime=image.mime,
        width=image.width,
        height=image.height,
        byte_size=len(image.data),
        storage_key=key,
        created_by=client,
    )


def image_store_bytes(*, organization: Organization, client: Client, data: bytes) -> ImageObject:
    """Validate (Pillow: format, size, pixels, metadata stripped) and store. Raises
    ``ImageInvalidError``, having stored nothing."""
    valid = image_validate(data=data, max_bytes=settings.IMAGE_MAX_BYTES)
    return image_store(organization=organization, client=client, image=valid)


def images_hold(*, organization: Organization, sha256s: Iterable[str]) -> dict[str, ImageObject]:
    """The organization's images with these hashes, held against release until the caller's
    transaction ends (FOR KEY SHARE); hashes it does not have are missing from the answer."""
    wanted = sorted(set(sha256s))
    if not wanted:
        return {}
    # FOR KEY SHARE, which a foreign key check takes too, conflicts with deletion only.
    rows = ImageObject.objects.raw(
        "SELECT * FROM images_imageobject WHERE organization_id = %s AND sha256 = ANY(%s::text[])"
        " FOR KEY SHARE",
        [organization.pk, wanted],
    )
    return {image.sha256: image for image in rows}


@transaction.atomic
def image_fetch_request(*, organization: Organization, client: Client, url: str) -> ImageFetch:
    """Record a remote image to fetch and queue its fetch once this transaction commits. The
    URL has passed ``images.fetch.url_check``; the worker vets where it really leads."""
    fetch = ImageFetch.objects.create(organization=organization, client=client, url=url)
    transaction.on_commit(
        lambda: image_fetch_publish(fetch_id=fetch.pk, organization_id=organization.pk)
    )
    return fetch


def image_fetch_publish(*, fetch_id: int, organization_id: str) -> bool:
    """Hand the fetch to the broker, labelled with its organization (task_labels; a fetch is
    the organization's, shared by every turn that shows its URL); with the broker down it
    stays pending for the recovery job (``images.tasks.recover_image_fetches``). Never
    raises."""
    labels = task_labels(organization_id=organization_id)
    try:
        task_publish(IMAGE_FETCH_TASK, fetch_id, labels=labels, quick=True)
    except Exception:  # kombu/redis raise many types for "broker unreachable"
        logger.warning("broker unreachable: image fetch %s stays pending", fetch_id)
        return False
    return True


def image_fetch_run(*, fetch_id: int) -> ImageFetch | None:
    """Run one pending fetch: download through the SSRF guard, validate, store. Returns the
    finished fetch (``stored`` or ``failed``), or None when it is not pending (done, or its
    message deleted). A failure that may pass is raised for the task to retry until the
    ``FETCH_ATTEMPTS``-th attempt, which records it as failed."""
    claimed = ImageFetch.objects.filter(pk=fetch_id, status=ImageFetch.Status.PENDING).update(
        attempts=F("attempts") + 1
    )
    if not claimed:
        return None
    fetch = ImageFetch.objects.select_related("organization", "client").get(pk=fetch_id)
    try:
        fetched = image_fetch(
            url=fetch.url,
            max_bytes=settings.IMAGE_MAX_BYTES,
            timeout=settings.IMAGE_FETCH_TIMEOUT,
            allow_hosts=settings.IMAGE_FETCH_ALLOW_HOSTS,
        )
        valid = image_validate(data=fetched.data, max_bytes=settings.IMAGE_MAX_BYTES)
    except ImageFetchError as error:
        if error.transient and fetch.attempts < FETCH_ATTEMPTS:
            raise
        return _fetch_finish(fetch, image=None, reason=error.reason)
    except ImageInvalidError as error:
        return _fetch_finish(fetch, image=None, reason=error.reason)
    image = image_store(organization=fetch.organization, client=fetch.client, image=valid)
    return _fetch_finish(fetch, image=image, reason="")


@transaction.atomic
def _fetch_finish(
    fetch: ImageFetch, *, image: ImageObject | None, reason: str
) -> ImageFetch | None:
    fetch.status = ImageFetch.Status.STORED if image is not None else ImageFetch.Status.FAILED
    fetch.image = image
    fetch.reason = reason
    fetch.finished_at = timezone.now()
    finished = ImageFetch.objects.filter(pk=fetch.pk, status=ImageFetch.Status.PENDING).update(
        status=fetch.status, image=image, reason=reason, finished_at=fetch.finished_at
    )
    if not finished:
        return None  # deleted meanwhile, or finished by a redelivered task
    if image is None:
        logger.info("image fetch %s failed: %s", fetch.pk, reason)
    # Inside the transaction: the turns' links name the image in the commit that stores it, so
    # no crash between the two can leave a stored fetch whose turns show no image.
    image_fetch_finished.send(sender=ImageFetch, fetch=fetch)
    return fetch


@transaction.atomic
def images_release(*, image_ids: Iterable[int]) -> int:
    """Delete those of the images that no reference row names any more (their files go after
    the commit); returns how many went. Images nothing ever named (uploaded, not yet sent)
    are not asked about: callers pass the images whose references they just deleted."""
    candidates = sorted(set(image_ids))
    if not candidates:
        return 0
    locked = list(
        ImageObject.objects.select_for_update()
        .filter(pk__in=candidates)
        .values_list("pk", flat=True)
    )
    unnamed = set(locked) - images_referenced(image_ids=locked)
    if not unnamed:
        return 0
    deleted, _ = ImageObject.objects.filter(pk__in=unnamed).delete()
    return deleted


def image_file_release(*, image: ImageObject) -> None:
    """After the commit that deleted ``image``'s row: delete its file, unless the same bytes
    were stored again meanwhile (a new row names the file)."""

    def release() -> None:
        with transaction.atomic():
            _image_lock(organization_id=image.organization_id, sha256=image.sha256)
            if ImageObject.objects.filter(
                organization_id=image.organization_id, sha256=image.sha256
            ).exists():
                return
            try:
                storage_delete(key=image.storage_key, organization_id=image.organization_id)
            except ValueError:
                # A key this app did not make (an edited row): the file is left alone.
                logger.error("image %s: not deleting %r", image.pk, image.storage_key)

    transaction.on_commit(release)
