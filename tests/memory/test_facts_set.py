"""The labelled set of first-person facts (memory/calibration/facts.json; issue 39 item 1) has
the shape a fact extractor is measured on: enough utterances, two halves drawn by the recorded
seed, both sources in each, a closed vocabulary of predicates and a fair share of negatives.
The second dev set (memory/calibration/facts_dev2.json, half "dev2"; issue 15/18 item 1) has the
same vocabulary, more negatives, every predicate often enough to choose a rule on, and no text
that repeats one of facts.json's."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from memory.extractors.facts_set import (
    facts_header,
    facts_labelled,
    facts_predicates,
    facts_split,
)

REQUIRED_PREDICATES = frozenset(
    (  # noqa: SIM905 (a word list reads best as words)
        "name age lives_in moved_to from works_as works_at studies likes dislikes prefers "
        "allergic_to health_condition diet has_pet family partner owns uses switched_to "
        "no_longer plans birthday speaks hobby"
    ).split()
)


def test_the_set_has_at_least_320_utterances_with_unique_ids_and_texts() -> None:
    items = facts_labelled()
    assert len(items) >= 320
    assert len({item.id for item in items}) == len(items)
    texts = Counter(item.text.strip().lower() for item in items)
    assert [text for text, n in texts.items() if n > 1] == []


def test_both_halves_hold_both_sources_positives_and_negatives() -> None:
    for half in ("dev", "test"):
        items = facts_labelled(half=half)
        assert {item.half for item in items} == {half}
        kinds = Counter((item.source, bool(item.facts)) for item in items)
        assert set(kinds) == {("chat", True), ("chat", False), ("agent", True), ("agent", False)}
    assert len(facts_labelled(half="dev")) + len(facts_labelled(half="test")) == len(
        facts_labelled()
    )


def test_the_halves_are_the_recorded_seeded_draw_about_half_each() -> None:
    items = facts_labelled()
    drawn = facts_split(
        items=({"id": i.id, "source": i.source, "facts": i.facts} for i in items),
        seed=facts_header()["split"]["seed"],
    )
    assert {item.id: item.half for item in items} == drawn
    strata = Counter((item.source, bool(item.facts), item.half) for item in items)
    for source in ("chat", "agent"):
        for positive in (True, False):
            dev, test = strata[(source, positive, "dev")], strata[(source, positive, "test")]
            assert dev - test in (0, 1)


def test_the_recorded_counts_are_the_files_counts() -> None:
    counts = Counter(
        (item.half, item.source, "positive" if item.facts else "negative")
        for item in facts_labelled()
    )
    recorded = facts_header()["split"]["counts"]
    assert {
        (half, source, kind): n
        for half, sources in recorded.items()
        for source, kinds in sources.items()
        for kind, n in kinds.items()
    } == dict(counts)


def test_every_predicate_is_in_the_closed_vocabulary_with_a_meaning() -> None:
    vocabulary = facts_predicates()
    assert set(vocabulary) >= REQUIRED_PREDICATES
    assert all(meaning.strip() for meaning in vocabulary.values())
    used = {fact.predicate for item in facts_labelled() for fact in item.facts}
    assert used <= set(vocabulary)
    assert used == set(vocabulary)  # a predicate no item uses could not be measured


def test_at_least_35_percent_are_negatives_in_the_set_and_in_each_half() -> None:
    for half in (None, "dev", "test"):
        items = facts_labelled(half=half)
        negatives = sum(1 for item in items if not item.facts)
        assert negatives / len(items) >= 0.35


def test_facts_are_whole_and_assistant_turns_state_none() -> None:
    for item in facts_labelled():
        assert item.source in {"chat", "agent"}
        assert item.speaker in {"user", "assistant"}
        assert item.text.strip()
        if item.speaker == "assistant":
            assert item.facts == (), item.id
        for fact in item.facts:
            assert fact.subject.strip() and fact.value.strip(), item.id
            assert fact.value == fact.value.strip(), item.id


def test_facts_about_the_users_people_are_labelled_with_them() -> None:
    subjects = {fact.subject for item in facts_labelled() for fact in item.facts}
    assert "user" in subjects
    assert "Ana (sister)" in subjects and "Maya (daughter)" in subjects


def test_an_unknown_half_is_refused() -> None:
    with pytest.raises(ValueError, match="half must be one of"):
        facts_labelled(half="train")


def _normalised(text: str) -> str:
    """A text compared without case, punctuation, emoji or spacing."""
    return " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split())


def test_the_second_dev_set_has_at_least_400_utterances_with_unique_ids_and_texts() -> None:
    items = facts_labelled(half="dev2")
    assert len(items) >= 400
    assert [item.id for item in items] == [f"g{n:03d}" for n in range(1, len(items) + 1)]
    assert {item.half for item in items} == {"dev2"}
    texts = Counter(_normalised(item.text) for item in items)
    assert [text for text, n in texts.items() if n > 1] == []


def test_the_second_dev_set_shares_no_text_with_the_first_set() -> None:
    first = {_normalised(item.text) for item in facts_labelled()}
    shared = [item.id for item in facts_labelled(half="dev2") if _normalised(item.text) in first]
    assert shared == []


def test_the_second_dev_set_says_what_it_is_and_keeps_the_first_sets_rules() -> None:
    header = facts_header(half="dev2")
    assert "second dev set" in header["about"] and "never reported" in header["about"]
    assert header["predicates"] == facts_predicates()
    assert header["labels"] == facts_header()["labels"]
    used = {fact.predicate for item in facts_labelled(half="dev2") for fact in item.facts}
    assert used == set(facts_predicates())


def test_the_second_dev_set_holds_every_predicate_at_least_8_times() -> None:
    counts = Counter(fact.predicate for item in facts_labelled(half="dev2") for fact in item.facts)
    assert {predicate: n for predicate, n in counts.items() if n < 8} == {}
    assert set(counts) == set(facts_predicates())


def test_the_second_dev_set_is_at_least_40_percent_negatives_in_both_sources() -> None:
    items = facts_labelled(half="dev2")
    assert sum(1 for item in items if not item.facts) / len(items) >= 0.40
    kinds = Counter((item.source, bool(item.facts)) for item in items)
    assert set(kinds) == {("chat", True), ("chat", False), ("agent", True), ("agent", False)}
    recorded = facts_header(half="dev2")["counts"]
    assert {
        (source, kind == "positive"): n
        for source, by_kind in recorded.items()
        for kind, n in by_kind.items()
    } == dict(kinds)


def test_the_second_dev_sets_facts_are_whole_and_assistant_turns_state_none() -> None:
    items = facts_labelled(half="dev2")
    assert any(item.speaker == "assistant" for item in items)
    for item in items:
        assert item.source in {"chat", "agent"}
        assert item.speaker in {"user", "assistant"}
        assert item.text.strip()
        if item.speaker == "assistant":
            assert item.facts == (), item.id
        for fact in item.facts:
            assert fact.subject.strip() and fact.value.strip(), item.id
            assert fact.value == fact.value.strip(), item.id
            assert fact.subject == "user" or fact.subject.islower() or "(" in fact.subject, item.id
