"""The admin's lists of tables that grow with use count no more than they must: the whole table
by PostgreSQL's estimate once it is big, a filtered list up to a bound and then by the planner's
estimate, and never the unfiltered total beside a filtered list."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mirix_site.common import admin as common_admin
from mirix_site.common import counts
from sessions.models import Message
from tests.factories import TenantFixture

LIST = "/admin/conversations/message/"


@pytest.fixture
def turns(org: TenantFixture) -> None:
    for user in ("ana", "bea"):
        messages = [{"role": "user", "content": f"turn {n}"} for n in range(6)]
        org.api.post("/memory/add", {"user_id": user, "messages": messages}, format="json")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE conversations_message")


def _counts(queries: CaptureQueriesContext) -> list[str]:
    return [
        query["sql"]
        for query in queries.captured_queries
        if "COUNT(" in query["sql"].upper() and "conversations_message" in query["sql"]
    ]


def _shown(page: str) -> int:
    """The count the list's paginator shows ("12 messages")."""
    names = f"{Message._meta.verbose_name}|{Message._meta.verbose_name_plural}"
    return int(re.search(rf"(\d+) (?:{names})\b", page).group(1))


def test_a_big_table_is_counted_by_its_estimate(admin_client, turns, monkeypatch) -> None:
    monkeypatch.setattr(counts, "EXACT_COUNT_MAX", 5)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(LIST)
    assert page.status_code == 200
    assert _counts(queries) == []  # the estimate only: pg_class, no scan
    assert _shown(page.content.decode()) == 12  # ANALYZE's count of a small table is exact


def test_a_small_table_is_counted_exactly(admin_client, turns) -> None:
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(LIST)
    assert _shown(page.content.decode()) == Message.objects.count()
    assert len(_counts(queries)) == 1


def test_a_filtered_list_counts_up_to_a_bound_and_never_the_whole_table_beside(
    admin_client, turns, monkeypatch
) -> None:
    user_pk = Message.objects.filter(end_user__user_id="ana").values_list("end_user", flat=True)[0]
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(LIST, {"end_user__id__exact": user_pk})
    assert _shown(page.content.decode()) == 6
    [count] = _counts(queries)  # the filtered count alone, not the table's total beside it
    assert "LIMIT 10001" in count
    # Past the bound, the planner's estimate (EXPLAIN: nothing counted further).
    monkeypatch.setattr(common_admin, "LIST_COUNT_MAX", 3)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(LIST, {"end_user__id__exact": user_pk})
    assert page.status_code == 200
    assert any(query["sql"].startswith("EXPLAIN") for query in queries.captured_queries)
    assert "LIMIT 4" in _counts(queries)[0]
    assert _shown(page.content.decode()) >= 4
