"""Where image bytes live: the default Django storage (``MIRIX_DATA_DIR/media`` on the file
system, or S3 with ``STORAGE_BACKEND=s3``), under keys this module alone makes.

A key is ``images/<organization id>/<sha[:2]>/<sha>.<extension>``. Deleting takes a key only in
that shape, for the organization named, so no stored value can make the server delete (or read)
a path of its choosing; the file system storage refuses paths outside its root besides.
"""

from __future__ import annotations

import re

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

EXTENSIONS = ("png", "jpg", "webp", "gif")
_KEY = re.compile(
    r"^images/(?P<organization>[A-Za-z0-9_-]{1,64})/(?P<prefix>[0-9a-f]{2})/"
    r"(?P<sha>[0-9a-f]{64})\.(?:" + "|".join(EXTENSIONS) + r")$"
)


def _storage() -> Storage:
    return storages["default"]


def storage_key(*, organization_id: str, sha256: str, extension: str) -> str:
    key = f"images/{organization_id}/{sha256[:2]}/{sha256}.{extension}"
    if not _key_valid(key, organization_id=organization_id):
        raise ValueError(f"not an image key: {key!r}")
    return key


def _key_valid(key: str, *, organization_id: str) -> bool:
    match = _KEY.fullmatch(key)
    return (
        match is not None
        and match["organization"] == organization_id
        and match["sha"].startswith(match["prefix"])
    )


def storage_write(*, key: str, data: bytes) -> None:
    """Store the bytes at ``key`` unless they are there already (a key names its content, so
    bytes found there are these bytes). Callers serialize writers of one key."""
    storage = _storage()
    if storage.exists(key):
        return
    saved = storage.save(key, ContentFile(data))
    if saved != key:  # a storage that renames rather than collide: keep ours, drop its copy
        storage.delete(saved)
        raise RuntimeError(f"storage stored {key!r} as {saved!r}")


def storage_read(*, key: str) -> bytes:
    with _storage().open(key, "rb") as stored:
        return stored.read()


def storage_delete(*, key: str, organization_id: str) -> None:
    """Delete the image at ``key``, which must be one of the organization's image keys."""
    if not _key_valid(key, organization_id=organization_id):
        raise ValueError(f"refusing to delete {key!r}: not an image key of {organization_id}")
    _storage().delete(key)
