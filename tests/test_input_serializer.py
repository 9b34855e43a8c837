"""Input serializers build their fields once per thread and validate each instance's data alone."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memory.api.serializers.memories import MemoryAddInputSerializer

# Validating a body reads the server's settings rows once (the gate's calibration).
pytestmark = pytest.mark.django_db(transaction=True)


def _body(user_id: str, text: str = "hello") -> dict[str, object]:
    return {"user_id": user_id, "messages": [{"role": "user", "content": text}]}


def test_instances_of_a_thread_share_their_fields_and_keep_their_own_results() -> None:
    first = MemoryAddInputSerializer(data=_body("sam"))
    assert first.is_valid()
    second = MemoryAddInputSerializer(data={"user_id": "a/b", "messages": []})
    assert not second.is_valid()
    third = MemoryAddInputSerializer(data=_body("alex", "bye"))
    assert third.is_valid()

    # Built once: DRF's own serializers deep-copy every field for every instance.
    assert first.fields["user_id"] is second.fields["user_id"] is third.fields["user_id"]
    assert third.fields["user_id"].parent is third
    assert first.validated_data["user_id"] == "sam"
    assert first.validated_data["messages"][0].text == "hello"
    assert set(second.errors) == {"user_id", "messages"}
    assert third.validated_data["user_id"] == "alex"
    assert third.validated_data["messages"][0].text == "bye"


def test_each_thread_has_its_own_fields() -> None:
    here = MemoryAddInputSerializer(data=_body("sam"))
    there: list[MemoryAddInputSerializer] = []

    def build() -> None:
        there.append(MemoryAddInputSerializer(data=_body("alex")))
        assert there[0].is_valid()
        connection.close()

    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    assert here.is_valid()
    assert here.fields["messages"] is not there[0].fields["messages"]
    assert there[0].validated_data["user_id"] == "alex"


def test_an_input_serializer_takes_nothing_but_data() -> None:
    # A context or an instance would be read through fields shared with other instances.
    with pytest.raises(TypeError):
        MemoryAddInputSerializer(data=_body("sam"), context={"tenant": None})
    with pytest.raises(TypeError):
        MemoryAddInputSerializer(data=_body("sam"), partial=True)
