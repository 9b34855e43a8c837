"""The sensitive-value detector: its labelled corpus (both halves meet the goals), what a
redaction writes, and that redacting twice changes nothing."""

from __future__ import annotations

import json

import pytest

from bench.secrets import corpus_read, corpus_score
from sessions.sensitive import (
    MASK,
    sensitive_found,
    sensitive_known,
    sensitive_redacted,
    sensitive_redacted_json,
    turns_redacted,
)

CORPUS = corpus_read()


# What each half was measured at (bench/RESULTS.md, "bench/secrets.py"), as floors: a change to
# the detector that loses recall or keeps less readable text fails here. The goal ([11/18]:
# recall >= 0.97, false positives <= 2 % on the held-out half) is NOT met: the test half, a
# fifth writer's forms never tuned on, measured 0.835 / 2.2 %.
FLOORS = {"dev": (0.96, 0.005), "test": (0.83, 0.025)}


@pytest.mark.parametrize("half", ["dev", "test"])
def test_the_corpus_is_found_and_its_negatives_kept(half: str) -> None:
    entries = [entry for entry in CORPUS if entry.half == half]
    assert len([e for e in entries if e.secrets]) >= 150
    assert len([e for e in entries if not e.secrets]) >= 150
    scores = corpus_score(entries, sensitive_redacted)
    recall_floor, false_positive_ceiling = FLOORS[half]
    misses = [(entry.id, value) for entry, value in scores.misses]
    assert scores.recall >= recall_floor, misses
    assert scores.false_positive_rate <= false_positive_ceiling, [
        entry.id for entry, _ in scores.false_positives
    ]


def test_the_corpus_has_the_forms_it_claims() -> None:
    positive_forms = {entry.form for entry in CORPUS if entry.secrets}
    assert len(positive_forms) >= 25
    for entry in CORPUS:
        assert all(value in entry.text for value in entry.secrets), entry.id


def test_redacting_twice_changes_nothing() -> None:
    for entry in CORPUS:
        once = sensitive_redacted(entry.text)
        assert sensitive_redacted(once) == once, entry.id
        masked = sensitive_redacted(entry.text, mask=MASK)
        assert sensitive_redacted(masked, mask=MASK) == masked, entry.id


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("the password is Hunter2-Secret!", "the password is <password>!"),
        ('{"token": "ghp_' + "a1B2" * 9 + '"}', '{"token": "<github-token>"}'),
        ("DB_PASSWORD=s3cr3tV@lue", "DB_PASSWORD=<password>"),
        (
            "card 4111 1111 1111 1111, IBAN DE89 3704 0044 0532 0130 00",
            "card <card-number>, IBAN <iban>",
        ),
        ("mail sam@example.com", "mail <email>"),
        # Not secrets: a reference to one, a rule about one, an id.
        ('password = os.environ["DB_PASSWORD"]', 'password = os.environ["DB_PASSWORD"]'),
        (
            "the password must be at least 8 characters",
            "the password must be at least 8 characters",
        ),
        (
            '{"max_tokens": 100, "password_min_length": 12}',
            '{"max_tokens": 100, "password_min_length": 12}',
        ),
        ("Order ORD-2024-000123 has shipped", "Order ORD-2024-000123 has shipped"),
    ],
)
def test_a_redaction_names_the_kind_it_took_out(text: str, redacted: str) -> None:
    assert sensitive_redacted(text) == redacted


def test_a_secret_names_value_goes_whole_in_json_and_keys_are_kept() -> None:
    value = {
        "db_password": "hunter",
        "user": "sam",
        "nested": [{"api_key": 12345678, "cvv": "7371"}],
    }
    assert sensitive_redacted_json(value) == {
        "db_password": "<password>",
        "user": "sam",
        "nested": [{"api_key": "<api-key>", "cvv": "<card-code>"}],
    }
    assert sensitive_redacted('{"cvv": "737", "count": "737"}') == (
        '{"cvv": "<card-code>", "count": "737"}'
    )
    assert sensitive_redacted_json(value, mask=MASK)["db_password"] == MASK


def test_a_value_given_in_one_turn_is_redacted_where_another_echoes_it() -> None:
    class Turn:
        def __init__(self, text: str, tool_calls: list | None = None) -> None:
            self.text, self.tool_calls = text, tool_calls

    arguments = json.dumps({"user": "etl", "password": "Orchid-77-Lake"})
    turns = [
        Turn("", [{"id": "1", "function": {"name": "login", "arguments": arguments}}]),
        Turn("logged in as etl with Orchid-77-Lake"),
    ]
    known = sensitive_known([turn.text for turn in turns] + [turn.tool_calls for turn in turns])
    assert "Orchid-77-Lake" in {item.value for item in known}
    (_, calls), (echo, _) = turns_redacted(turns)
    assert "Orchid-77-Lake" not in json.dumps(calls)
    assert echo == "logged in as etl with <password>"


def test_found_values_do_not_overlap_and_a_format_wins_over_a_name() -> None:
    found = sensitive_found("export GITHUB_TOKEN=ghp_" + "Zx9" * 12)
    assert [item.kind.name for item in found] == ["github-token"]
