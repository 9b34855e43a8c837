from __future__ import annotations

from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    """The conversation store. Labelled ``conversations``: ``sessions`` is django.contrib's."""

    name = "sessions"
    label = "conversations"
    verbose_name = "Conversations and task sessions"
