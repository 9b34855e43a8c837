"""Rows read with SQL come back as the instances the ORM would have loaded."""

from __future__ import annotations

import pytest
from django.db import connection

from mirix_site.rows import instance_build, model_columns
from sessions.models import Message
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
