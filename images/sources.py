"""Where an image a caller sends comes from: an inline ``data:`` URL, decoded and validated at
once, or a remote ``http(s)`` URL, checked for what can be refused without a lookup (scheme,
credentials, an address spelled in it) and left for the worker to fetch. Any other scheme
(``file:``, ``ftp:``, …) is refused: the server never reads its own files for a caller.

Errors are ``ValidationError``s keyed by the caller's ``where``
(``messages.0.content.1.image_url``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from images.fetch import url_check
from images.validation import ImageInvalidError, ValidImage, data_url_decode, image_validate

# Patterns in the dialect ECMA and Python share: message schemas publish them.
# An image's id: the SHA-256 of its stored bytes, in lowercase hex.
IMAGE_ID_PATTERN = r"^[0-9a-f]{64}$"
# http(s), or an inline base64 image (its media type and parameters bounded, so the check reads
# at most ~200 characters of a data URL). Schemes are case-insensitive.
IMAGE_URL_PATTERN = (
    r"^([Hh][Tt][Tt][Pp][Ss]?://|[Dd][Aa][Tt][Aa]:[Ii][Mm][Aa][Gg][Ee]/[A-Za-z0-9.+-]{1,50}"
    r"(;[A-Za-z0-9=.+-]{1,30}){0,4};[Bb][Aa][Ss][Ee]64,)"
)
_IMAGE_URL = re.compile(IMAGE_URL_PATTERN)


@dataclass(frozen=True)
class ImageSource:
    """An inline image (``sha256`` of its stripped bytes and the ``image``) or a remote
    ``url`` to fetch."""

    url: str | None = None
    sha256: str | None = None
    image: ValidImage | None = None


def image_source_read(url: Any, *, where: str) -> ImageSource:
    if not isinstance(url, str) or not url:
        raise ValidationError({where: ["An image URL is required."]})
    if not _IMAGE_URL.match(url):
        lowered = url[:16].lower()
        if lowered.startswith("file:"):
            reason = "file: URLs are refused: the server never reads its own files."
        elif lowered.startswith("data:"):
            reason = "A data: URL must be a base64 image (data:image/...;base64,...)."
        else:
            reason = "Only https://, http:// and data:image/ URLs are accepted."
        raise ValidationError({where: [reason]})
    if url[:5].lower() == "data:":
        try:
            data = data_url_decode(url=url, max_bytes=settings.IMAGE_MAX_BYTES)
            image = image_validate(data=data, max_bytes=settings.IMAGE_MAX_BYTES)
        except ImageInvalidError as error:
            raise ValidationError({where: [error.reason]}) from None
        return ImageSource(sha256=hashlib.sha256(image.data).hexdigest(), image=image)
    refusal = url_check(url=url)
    if refusal is not None:
        raise ValidationError({where: [refusal]})
    return ImageSource(url=url)
