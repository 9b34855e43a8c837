"""Rows read with SQL come back as the instances the ORM would have loaded."""

from __future__ import annotations

import math

import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import EndUser
from mirix_site.common.rows import instance_build, model_columns, rows_insert
from sessions.models import Message
from skills.models import Experience, Recommendation
from tests.factories import TenantFixture


def _fields(instance: Message) -> dict[str, object]:
    return {field.attname: getattr(instance, field.attname) for field in Message._meta.fields}


def test_a_row_read_with_sql_builds_the_instance_the_orm_loads(org: TenantFixture) -> None:
    tool_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": "Calling f", "tool_calls": [tool_call]}
    response = org.api.post(
        "/memory/add",
        {"user_id": "sam", "messages": [message], "filter_tags": {"project": "apollo"}},
        format="json",
    )
    assert response.status_code == 202
    loaded = Message.objects.get()
    with connection.cursor() as cursor:
        columns = ", ".join(model_columns(model=Message, alias="m"))
        cursor.execute(f"SELECT {columns} FROM {Message._meta.db_table} m")  # noqa: S608
        [row] = cursor.fetchall()

    built = instance_build(model=Message, values=row, from_cursor=True)
    # JSON columns arrive from the cursor as text; the converters make them what they were.
    assert built.filter_tags == {"project": "apollo"}
    assert _fields(built) == _fields(loaded)
    assert not built._state.adding  # a save() updates the row rather than inserting one

    with pytest.raises(ValueError, match="fields"):
        instance_build(model=Message, values=row[:-1], from_cursor=True)


def test_a_row_read_with_some_columns_defers_the_others(org: TenantFixture) -> None:
    response = org.api.post(
        "/memory/add",
        {"user_id": "sam", "messages": [{"role": "user", "content": "hello"}]},
        format="json",
    )
    assert response.status_code == 202
    loaded = Message.objects.get()
    only = ("role", "filter_tags")
    with connection.cursor() as cursor:
        columns = ", ".join(model_columns(model=Message, alias="m", only=only))
        cursor.execute(f"SELECT {columns} FROM {Message._meta.db_table} m")  # noqa: S608
        [row] = cursor.fetchall()
    assert len(row) == 3  # and the primary key

    built = instance_build(model=Message, values=row, from_cursor=True, only=only)
    assert (built.pk, built.role, built.filter_tags) == (loaded.pk, "user", {})
    assert built.get_deferred_fields() >= {"content", "session_id"}
    assert built.content == loaded.content  # a deferred field is read when touched

    with pytest.raises(ValueError, match="no field"):
        model_columns(model=Message, only=("no_such_field",))


def test_rows_inserted_in_one_statement_are_the_rows_bulk_create_writes(
    org: TenantFixture,
) -> None:
    end_user = EndUser.objects.create(
        organization=org.organization, user_id="ada", created_by=org.client
    )
    now = timezone.now()

    def experiences() -> list[Experience]:
        return [
            Experience(
                organization=org.organization,
                client=org.client,
                end_user=end_user,
                task=task,
                action='add a "redis" cache \\ now',
                action_key="cache redis",
                outcome="success",
                score=0.9,
                context=context,
                filter_tags={},
                source_message_ids=message_ids,
                occurred_at=now,
                importance=importance,
            )
            for task, context, message_ids, importance in [
                ("login times out", {"env": {"region": "eu"}, "n": 3}, [1, 2, 3], None),
                ("le délai d'attente", [], [], 0.1 + 0.2),
                ("{braces} and, commas", {"quote": '"', "escape": "a\\u0000"}, [7], 1.0),
            ]
        ]

    expected = Experience.objects.bulk_create(experiences())
    written = rows_insert(model=Experience, instances=experiences())
    assert [row.pk for row in written] == sorted(row.pk for row in written)
    assert all(not row._state.adding for row in written)

    def stored(rows: list[Experience]) -> list[dict[str, object]]:
        ignored = {"id", "created_at", "updated_at"}
        loaded = Experience.objects.filter(pk__in=[row.pk for row in rows]).order_by("pk")
        return [
            {f.attname: getattr(row, f.attname) for f in Experience._meta.concrete_fields}
            | {name: None for name in ignored}
            for row in loaded
        ]

    assert stored(written) == stored(expected)
    assert Experience.objects.get(pk=written[0].pk).created_at is not None
    assert rows_insert(model=Experience, instances=[]) == []


def test_a_float_json_cannot_spell_is_inserted_as_the_database_reads_it(
    org: TenantFixture,
) -> None:
    end_user = EndUser.objects.create(
        organization=org.organization, user_id="ada", created_by=org.client
    )
    recommendation = Recommendation(
        organization=org.organization,
        client=org.client,
        end_user=end_user,
        task="t",
        action="a",
        action_key="a",
        confidence=-math.inf,
        successes=0,
        failures=0,
        partials=0,
    )
    [written] = rows_insert(model=Recommendation, instances=[recommendation])
    assert Recommendation.objects.get(pk=written.pk).confidence == -math.inf
