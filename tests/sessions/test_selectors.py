"""The extraction worker's reads of the conversation store, where the end-to-end extraction tests
cannot show them: two workers at once, and what the recovery job is handed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from sessions.models import Message
from sessions.selectors import PendingOwner, messages_pending_lock, messages_pending_owners_list
from tests.factories import TenantFixture, chat_turns, tenant_fixture


def _lock_in_another_worker(*, client_id: str, end_user_id: int) -> list[int]:
    """What a second worker's lock takes while the first holds its batch: its own connection,
    its own transaction. Waiting on the first worker's rows fails after a second instead of
    hanging the test."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '1s'")
            batch = messages_pending_lock(client_id=client_id, end_user_id=end_user_id, limit=10)
            return [message.pk for message in batch]
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_second_worker_skips_the_turns_the_first_holds() -> None:
    alice = tenant_fixture("alice")
    response = alice.api.post(
        "/memory/add",
        {"user_id": "sam", "messages": chat_turns("one", "two", "three")},
        format="json",
    )
    assert response.status_code == 202
    first, second, third = Message.objects.order_by("id")
    with transaction.atomic():
        held = messages_pending_lock(
            client_id=first.client_id, end_user_id=first.end_user_id, limit=2
        )
        assert [message.pk for message in held] == [first.pk, second.pk]
        with ThreadPoolExecutor(max_workers=1) as executor:
            taken = executor.submit(
                _lock_in_another_worker, client_id=first.client_id, end_user_id=first.end_user_id
            ).result()
    assert taken == [third.pk]


def test_the_recovery_job_sees_each_owner_of_forgotten_turns_once(org: TenantFixture) -> None:
    for session_id in ("s1", "s2"):
        response = org.api.post(
            "/memory/add",
            {"user_id": "sam", "session_id": session_id, "messages": chat_turns("hi", "hello")},
            format="json",
        )
        assert response.status_code == 202
    sam = Message.objects.first().end_user
    owners = messages_pending_owners_list(created_before=timezone.now() + timedelta(seconds=1))
    assert owners == [PendingOwner(org.organization.pk, org.client.pk, sam.pk)]
    assert messages_pending_owners_list(created_before=timezone.now() - timedelta(hours=1)) == []
