"""The image store: images by the SHA-256 of their bytes, one copy per organization, and the
remote fetches that bring images in from URLs.

An image belongs to an organization, not to one client or end user: the same bytes sent by two
clients of one organization are one object (its id is its hash, which only someone holding the
bytes can name). What keeps an image alive is a reference to it (a message's link, in the
sessions app); ``images.services.images_release`` removes the images that lost their last one.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.models import Client, Organization


class ImageObject(models.Model):
    """One image of an organization: validated (format, size, pixels), stripped of metadata,
    and stored once at ``storage_key`` in the default storage."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    sha256 = models.CharField(max_length=64, help_text="SHA-256 of the stored bytes, hex.")
    mime = models.CharField(max_length=32)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    byte_size = models.PositiveIntegerField()
    storage_key = models.CharField(max_length=255, editable=False)
    created_by = models.ForeignKey(
        Client, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "sha256"], name="image_sha256_unique_per_org"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sha256[:12]}… ({self.mime}, {self.width}x{self.height})"


class ImageFetch(models.Model):
    """One remote image URL to fetch, and how that went: ``pending`` until the worker stores
    the image (``stored``, with ``image``) or gives up (``failed``, with ``reason``).

    Fetches run in the ingest worker, never in a request: a message naming an ``http(s)`` image
    and ``POST /images {url}`` both leave a pending row here and a queued task."""

    class Status(models.TextChoices):
        PENDING = "pending"
        STORED = "stored"
        FAILED = "failed"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    url = models.TextField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    image = models.ForeignKey(
        ImageObject, on_delete=models.SET_NULL, null=True, blank=True, related_name="fetches"
    )
    reason = models.TextField(blank=True, help_text="Why the fetch failed, as the caller sees it.")
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "image fetches"
        ordering = ["-created_at", "-id"]
        indexes = [
            # The recovery sweep: pending fetches whose task the broker lost.
            models.Index(
                fields=["created_at"], condition=Q(status="pending"), name="image_fetch_pending"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.status} fetch #{self.pk}"
