from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete


class ConversationsConfig(AppConfig):
    """The conversation store. Labelled ``conversations``: ``sessions`` is django.contrib's."""

    name = "sessions"
    label = "conversations"
    verbose_name = "Conversations and task sessions"

    def ready(self) -> None:
        from images.references import image_reference_register
        from images.signals import image_fetch_finished
        from sessions.models import MessageImage
        from sessions.portability import sessions_portable_register

        # A message's image links keep its images alive (images.references).
        image_reference_register(model=MessageImage, field="image", holder="message")
        sessions_portable_register()
        image_fetch_finished.connect(_image_fetched, dispatch_uid="sessions.image_fetched")
        post_delete.connect(
            _image_unlinked, sender=MessageImage, dispatch_uid="sessions.image_unlinked"
        )


def _image_fetched(sender: type, fetch: object, **kwargs: object) -> None:
    from sessions.services import message_images_fetched

    message_images_fetched(fetch=fetch)  # type: ignore[arg-type]


def _image_unlinked(sender: type, instance: object, **kwargs: object) -> None:
    from sessions.services import message_image_unlinked

    message_image_unlinked(link=instance)  # type: ignore[arg-type]
