from __future__ import annotations

from django.apps import AppConfig


class ImagesConfig(AppConfig):
    name = "images"
    verbose_name = "Images"
