"""Filter tags on memories: which turns may share a memory, and what a memory's tags are.

An add's ``filter_tags`` go on each turn it stores. Most tags scope a turn (a project, a team,
a session): a search filtered by one must never show another's text. Some name the turn itself:
a client that keeps its own message ids as tags sends a new value with every turn
(``{"message_id": "m-17"}``), and a search filtered by one asks for the memory citing that turn.
The settings' ``TURN_TAG_KEYS`` name the latter. Turns whose scope tags (all but those) differ
never share a memory; turns that differ only in their own ids do, as turns with no ids would,
so that such a client's episodes are exchanges with their context, not single turns
(bench/RESULTS.md, "per-turn ids").

A memory keeps ``filter_tags``, the tags every turn it cites carries, and ``turn_tags``, each
distinct tag object among those turns; a search's filter matches a memory when one of its
turns' tag objects contains it (``memory.types``: the kinds' ``tags_listed``). Turns of one
memory share their scope tags, so a scope filter matches a memory exactly when every turn of it
carries the scope.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.conf import settings

Tags = dict[str, Any]


def scope_tags(tags: Tags) -> Tags:
    """``tags`` without those naming one turn (``TURN_TAG_KEYS``)."""
    keys = settings.TURN_TAG_KEYS
    return {key: value for key, value in tags.items() if key not in keys}


def same_scope(left: Tags, right: Tags) -> bool:
    """Whether turns (or memories) so tagged may share a memory."""
    return scope_tags(left) == scope_tags(right)


def tags_distinct(tag_sets: Iterable[Tags]) -> list[Tags]:
    """Each distinct tag object once, in the order first seen."""
    distinct: dict[str, Tags] = {}
    for tags in tag_sets:
        distinct.setdefault(json.dumps(tags, sort_keys=True), tags)
    return list(distinct.values())


def tags_shared(tag_sets: Iterable[Tags]) -> Tags:
    """The tags every one of ``tag_sets`` carries, with the same value ({} for none)."""
    sets = list(tag_sets)
    if not sets:
        return {}
    first, *others = sets
    return {
        key: value
        for key, value in first.items()
        if all(key in other and other[key] == value for other in others)
    }


def turn_tags_of(turn_tags: list[Tags] | None, filter_tags: Tags) -> list[Tags]:
    """A memory's turns' tag objects: ``turn_tags``, or, where none were kept (a proposal that
    set only ``filter_tags``, a row loaded without them), its one tag set."""
    return turn_tags or [filter_tags]
