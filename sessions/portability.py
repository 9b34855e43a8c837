"""The conversation store's rows in an end user's export (``accounts.portability``): sessions,
their messages with their image links, and the images those show, bytes and all (an image is
its organization's, so the import stores it again in the target organization)."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Prefetch

from accounts.models import Client, Organization
from accounts.portability import (
    ImportRun,
    PortableKind,
    model_columns,
    portable_kind_register,
    portable_skip,
)
from accounts.tenancy import Scope
from images.models import ImageObject
from images.selectors import image_bytes
from images.services import image_store_bytes
from images.validation import ImageInvalidError
from sessions.models import Message, MessageImage, Session
from sessions.sensitive import MASK, sensitive_redacted, sensitive_redacted_json

# The new hash of each image of the file, by its hash there (cleaning the bytes again in the
# target may change them).
_IMAGE_HASHES = "image_hashes"


def _images_shown(scope: Scope) -> Iterable[ImageObject]:
    shown = MessageImage.objects.in_scope(scope).filter(image__isnull=False).values("image_id")
    # A few at a time: each line holds an image's bytes.
    return (
        ImageObject.objects.filter(organization_id=scope.organization_id, pk__in=shown)
        .order_by("pk")
        .iterator(chunk_size=20)
    )


def _image_line(image: ImageObject) -> dict[str, Any]:
    return {
        "ref": image.sha256,
        "sha256": image.sha256,
        "mime": image.mime,
        "data": base64.b64encode(image_bytes(image=image)).decode(),
    }


def _image_create(record: dict[str, Any], run: ImportRun) -> ImageObject:
    data = record.get("data")
    try:
        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None:
        raise ValidationError({"data": ["The image's bytes, in base64."]})
    if hashlib.sha256(raw).hexdigest() != record.get("sha256") or record.get("ref") != record.get(
        "sha256"
    ):
        raise ValidationError({"sha256": ["The bytes do not hash to the line's sha256 and ref."]})
    try:
        image = image_store_bytes(
            organization=Organization(pk=run.organization_id),
            client=Client(pk=run.client_id),
            data=raw,
        )
    except ImageInvalidError as exc:
        raise ValidationError({"data": [str(exc)]}) from None
    run.notes.setdefault(_IMAGE_HASHES, {})[record["sha256"]] = image.sha256
    return image


IMAGE = PortableKind(
    name="image",
    position=10,
    model=ImageObject,
    extra_keys=("sha256", "mime", "data"),
    rows=_images_shown,
    line_extra=_image_line,
    create=_image_create,
)


def _session_masked(record: dict[str, Any]) -> dict[str, Any]:
    """As GET /sessions/{id} shows the closer's note to a key that may not see its secrets."""
    note = record["note"]
    return record | {"note": sensitive_redacted(note, mask=MASK) if note else note}


SESSION = PortableKind(
    name="session",
    position=20,
    model=Session,
    fields=model_columns(Session),
    masked=_session_masked,
)


def _messages(scope: Scope) -> Iterable[Message]:
    links = MessageImage.objects.filter(image__isnull=False).select_related("image")
    return (
        Message.objects.in_scope(scope)
        .order_by("pk")
        .prefetch_related(Prefetch("images", queryset=links, to_attr="stored_images"))
        .iterator(chunk_size=500)
    )


def _message_images(message: Message) -> dict[str, Any]:
    return {
        "images": [
            {"part": link.part, "image": link.image.sha256}
            for link in getattr(message, "stored_images", [])
        ]
    }


def _message_prepare(message: Message, record: dict[str, Any], run: ImportRun) -> None:
    """Image parts name the images as the target stored them."""
    hashes = run.notes.get(_IMAGE_HASHES, {})
    if not isinstance(message.content, list):
        return
    for part in message.content:
        if isinstance(part, dict) and part.get("type") == "image":
            part["image_id"] = hashes.get(part.get("image_id"), part.get("image_id"))


def _message_images_link(message: Message, record: dict[str, Any], run: ImportRun) -> None:
    links = record.get("images", [])
    wrong = ValidationError({"images": ["A list of {part, image} with an image line's ref."]})
    if not isinstance(links, list):
        raise wrong
    rows = []
    for link in links:
        if not isinstance(link, dict) or not isinstance(link.get("part"), int):
            raise wrong
        image_id = run.refs["image"].get(link.get("image"))
        if image_id is None:
            raise ValidationError(
                {"images": [f"Image {link.get('image')!r} is in no earlier line of the file."]}
            )
        rows.append(
            MessageImage(**run.owner_ids, message=message, part=link["part"], image_id=image_id)
        )
    MessageImage.objects.bulk_create(rows)


def _message_masked(record: dict[str, Any]) -> dict[str, Any]:
    """As GET /sessions/{id}/messages shows a turn to a key that may not see its secrets."""
    return record | {
        "content": sensitive_redacted_json(record["content"], mask=MASK),
        "tool_calls": sensitive_redacted_json(record["tool_calls"], mask=MASK),
        "text": sensitive_redacted(record["text"], mask=MASK),
    }


MESSAGE = PortableKind(
    name="message",
    position=30,
    model=Message,
    fields=model_columns(Message),
    links={"session": "session"},
    extra_keys=("images",),
    rows=_messages,
    line_extra=_message_images,
    masked=_message_masked,
    prepare=_message_prepare,
    after=_message_images_link,
)


def sessions_portable_register() -> None:
    for kind in (IMAGE, SESSION, MESSAGE):
        portable_kind_register(kind)
    portable_skip(MessageImage, "Carried in its message's line (images), to the image's line.")
