"""``InputSerializer``: a request body's serializer whose fields are built once per thread.

DRF deep-copies a serializer's declared fields for every instance: each field is constructed
again from its arguments. For ``/memory/add``'s body that was a tenth of the request's web CPU
(bench/RESULTS.md, 2026-12-07). An input serializer reads only the request's data: no
instance, no context, never partial. Its fields then depend on nothing of the instance they
are bound to (a field reads its parent only for the context and ``partial``), so one set per
thread serves every instance the thread makes, each instance taking them over in turn.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.utils.functional import cached_property
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.utils.serializer_helpers import BindingDict


class InputSerializer(serializers.Serializer):
    """Validates a request's data (``InputSerializer(data=...)``), with nothing else given."""

    _fields_of_thread: ClassVar[threading.local]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields_of_thread = threading.local()  # each class its own

    def __init__(self, *, data: Any = empty, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{type(self).__name__} takes only data, not {', '.join(kwargs)}")
        super().__init__(data=data)

    @cached_property
    def fields(self) -> BindingDict:
        fields = getattr(self._fields_of_thread, "fields", None)
        if fields is None:
            fields = BindingDict(self)
            for name, field in self.get_fields().items():
                fields[name] = field
            self._fields_of_thread.fields = fields
            return fields
        fields.serializer = self
        for field in fields.values():
            field.parent = self
        return fields
