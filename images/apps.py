from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete


class ImagesConfig(AppConfig):
    name = "images"
    verbose_name = "Images"

    def ready(self) -> None:
        from images.models import ImageObject

        post_delete.connect(
            _image_deleted, sender=ImageObject, dispatch_uid="images.image_file_release"
        )


def _image_deleted(sender: type, instance: object, **kwargs: object) -> None:
    """Whichever way an image row goes (released, its organization deleted), its file goes
    after the commit."""
    from images.services import image_file_release

    image_file_release(image=instance)  # type: ignore[arg-type]
