"""The extraction worker's reads of the conversation store, where the end-to-end extraction tests
cannot show them: two workers at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from sessions.models import Message
from sessions.selectors import messages_pending_lock
from tests.factories import chat_turns, tenant_fixture


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
