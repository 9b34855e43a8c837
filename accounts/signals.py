"""Every change to an API key row, however it happens (service, admin, cascade), drops the
key's cached record; see accounts.keycache for why this keeps revocation immediate."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from accounts.keycache import key_cache_invalidate
from accounts.models import ApiKey


@receiver(post_save, sender=ApiKey, dispatch_uid="apikey-cache-saved")
@receiver(post_delete, sender=ApiKey, dispatch_uid="apikey-cache-deleted")
def api_key_changed(sender: type[ApiKey], instance: ApiKey, **kwargs: Any) -> None:
    if kwargs.get("created"):
        return  # nothing can be cached yet for a key that did not exist
    # Before the commit: from now on requests ignore the cache and ask the database.
    # After the commit: again, in case a request re-cached the old row in between.
    key_cache_invalidate(instance.key_id)
    transaction.on_commit(lambda: key_cache_invalidate(instance.key_id))
