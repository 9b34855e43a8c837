"""Each memory type is declared once (``memory.types``); what else reads a type is derived from
that declaration, and the declaration agrees with the type's model."""

from __future__ import annotations

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import models

from memory.agent_config import AGENT_COMPONENTS, COMPONENT_AGENT_TYPES
from memory.extractors.llm import proposed_fields
from memory.extractors.prompt import EXTRACTION_SYSTEM
from memory.extractors.schema import EXTRACTION_SCHEMA
from memory.models.agents import MEMORY_COMPONENTS
from memory.types import MEMORY_TYPES, Field, MemoryType

FIELDS = [
    pytest.param(memory_type, field, id=f"{name}.{field.name}")
    for name, memory_type in MEMORY_TYPES.items()
    for field in memory_type.fields
]


@pytest.mark.parametrize(("memory_type", "field"), FIELDS)
def test_a_stored_fields_limit_is_its_models(memory_type: MemoryType, field: Field) -> None:
    if not field.stored:
        with pytest.raises(FieldDoesNotExist):
            memory_type.model._meta.get_field(field.name)
        return
    column = memory_type.model._meta.get_field(field.name)
    if isinstance(column, models.CharField) and not isinstance(column, models.TextField):
        if field.kind == "choice":
            assert max(map(len, field.choices)) <= column.max_length
        else:
            assert field.max_chars == column.max_length
    if column.choices and field.kind == "choice":
        assert set(field.choices) <= {value for value, _label in column.choices}


@pytest.mark.parametrize(("memory_type", "field"), FIELDS)
def test_extraction_keeps_a_field_as_declared(memory_type: MemoryType, field: Field) -> None:
    """An item with every field's value too long (or outside its choices) is stored cut to
    the declared limit (or with the declared default)."""
    if not field.extracted:
        assert (
            field.name
            not in EXTRACTION_SCHEMA["properties"][memory_type.name]["items"]["properties"]
        )
        return
    item = {
        other.name: (other.choices[0] if other.kind == "choice" else "x")
        for other in memory_type.extracted_fields
    }
    item[field.name] = {"choice": "not one of them", "steps": ["y" * 3000] * 150}.get(
        field.kind, "z" * ((field.max_chars or 0) + 10)
    )
    read = proposed_fields(memory_type.name, item)
    if field.kind == "choice":
        if field.required and not field.default:
            assert read is None  # no valid value, no default: the item is dropped
        else:
            assert read is not None and read[field.name] == field.default
    elif field.kind == "steps":
        assert read is not None
        assert len(read[field.name]) == 100 and {len(step) for step in read[field.name]} == {2000}
    else:
        assert read is not None and len(read[field.name]) == field.max_chars


@pytest.mark.parametrize("name", list(MEMORY_TYPES))
def test_a_required_field_left_blank_drops_the_item(name: str) -> None:
    memory_type = MEMORY_TYPES[name]
    full = {
        field.name: (field.choices[0] if field.kind == "choice" else "x")
        for field in memory_type.extracted_fields
    }
    assert proposed_fields(name, full) is not None
    for field in memory_type.extracted_fields:
        if field.required:
            assert proposed_fields(name, full | {field.name: ""}) is None, field.name


def test_the_types_are_the_components_the_schema_and_the_prompt() -> None:
    assert tuple(MEMORY_TYPES) == MEMORY_COMPONENTS
    assert EXTRACTION_SCHEMA["required"] == list(MEMORY_TYPES)
    for name, memory_type in MEMORY_TYPES.items():
        assert f"- {name}: {memory_type.description}\n" in EXTRACTION_SYSTEM


def test_each_type_names_its_mirix_agent() -> None:
    for name, memory_type in MEMORY_TYPES.items():
        assert COMPONENT_AGENT_TYPES[name] == memory_type.mirix_agent
        for agent in (memory_type.mirix_agent, *memory_type.mirix_agent_aliases):
            assert AGENT_COMPONENTS[agent] == name


def test_a_list_or_an_object_where_a_word_was_asked_is_not_a_crash() -> None:
    """A model that answers ``["high"]`` for a sensitivity: the default, as for any other
    value outside the choices (it raised TypeError, failing the whole extraction job)."""
    vault = {"caption": "the door code", "secret_value": "4711"}
    assert proposed_fields("knowledge_vault", vault | {"sensitivity": ["low"]}) == (
        vault | {"entry_type": "credential", "sensitivity": "high", "source": ""}
    )
    assert proposed_fields("core", {"label": {"human": 1}, "value": "likes tea"}) is None
