"""What keeps an image alive: rows of higher apps that name it (a message's image link).

Apps above this one register their reference rows here in ``AppConfig.ready()``, as the
retrieval engine's kinds are registered; ``images_release`` then asks each, by foreign key and
index, whether an image is still named, instead of scanning text for its id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import models


@dataclass(frozen=True)
class ImageReference:
    """A model whose rows name an image through the foreign key ``field``; ``holder``, the
    relation to the row a person would look at (a link's message), if not the row itself."""

    model: type[models.Model]
    field: str
    holder: str | None = None


_references: list[ImageReference] = []


def image_reference_register(
    *, model: type[models.Model], field: str, holder: str | None = None
) -> None:
    reference = ImageReference(model=model, field=field, holder=holder)
    if reference not in _references:
        _references.append(reference)


def images_referenced(*, image_ids: Iterable[int]) -> set[int]:
    """Those of the images that some registered row still names."""
    image_ids = list(image_ids)
    named: set[int] = set()
    for reference in _references:
        lookup = {f"{reference.field}_id__in": image_ids}
        named.update(
            reference.model._default_manager.filter(**lookup).values_list(
                f"{reference.field}_id", flat=True
            )
        )
    return named


def image_referrers(*, image_id: int, limit: int = 50) -> list[models.Model]:
    """Up to ``limit`` rows naming the image (their holders), of every registered kind, for
    the admin."""
    found: list[models.Model] = []
    for reference in _references:
        rows = reference.model._default_manager.filter(**{f"{reference.field}_id": image_id})
        if reference.holder is not None:
            rows = rows.select_related(reference.holder)
        for row in rows[: limit - len(found)]:
            found.append(getattr(row, reference.holder) if reference.holder else row)
        if len(found) >= limit:
            break
    return found
