"""A process's memo of what a function reads from rows that change rarely and are read by
every request of a kind (the embedding spaces and the gate's calibrations, read by every
search): kept for at most ``ROWS_MEMO_SECONDS``, so a search does not spend two of its round
trips on them (bench/RESULTS.md, bench/experiences.py).

Why it stays correct: a save or delete of a row of a memo's models clears the memo in this
process at once and again when it commits (a value read before the change is not kept after
it); the other processes see the change within ``ROWS_MEMO_SECONDS``. A value read inside a
transaction is not kept: the transaction may still roll back what it read. Bulk ``update()``
sends no signal: the lifetime bounds it too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from time import monotonic
from typing import Any, Generic, ParamSpec, TypeVar

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection, models, transaction
from django.db.models.signals import post_delete, post_save

P = ParamSpec("P")
T = TypeVar("T")

_memos: list[RowsMemo[Any, Any]] = []


class RowsMemo(Generic[P, T]):
    """``function``'s value per arguments, forgotten when a row of ``watched`` changes."""

    def __init__(self, function: Callable[P, T], watched: tuple[type[models.Model], ...]) -> None:
        self._function = function
        self._values: dict[Hashable, tuple[float, T]] = {}
        # Bumped by every change: a value read while a change was made is not kept.
        self._generation = 0
        self._lock = threading.Lock()
        for model in watched:
            post_save.connect(self._changed, sender=model, weak=False)
            post_delete.connect(self._changed, sender=model, weak=False)
        _memos.append(self)

    def _changed(self, **_: Any) -> None:
        # Now, and again once the change commits: a read between the two (on another
        # connection, of the rows as they were) is not kept past it.
        self.clear()
        transaction.on_commit(self.clear)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._values.clear()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T:
        key = (args, tuple(sorted(kwargs.items())))
        now = monotonic()
        found = self._values.get(key)
        if found is not None and found[0] > now:
            return found[1]
        generation = self._generation
        value = self._function(*args, **kwargs)
        if not connection.in_atomic_block:
            with self._lock:
                if generation == self._generation:
                    self._values[key] = (now + settings.ROWS_MEMO_SECONDS, value)
        return value


def rows_memo(
    *watched: type[models.Model],
) -> Callable[[Callable[P, T]], RowsMemo[P, T]]:
    """Decorate a function of hashable arguments that reads rows of the ``watched`` models."""

    def decorate(function: Callable[P, T]) -> RowsMemo[P, T]:
        return RowsMemo(function, watched)

    return decorate


def rows_memos_clear(**_: Any) -> None:
    """Forget every memo in this process (a test's database is emptied without signals)."""
    for memo in _memos:
        memo.clear()


# What a memo read may depend on settings too (the configured embedding model).
setting_changed.connect(rows_memos_clear)
