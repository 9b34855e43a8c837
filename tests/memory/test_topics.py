"""Keyword topics from the last user turns, the query used for search when no LLM is configured."""

from __future__ import annotations

import pytest

from memory.query.topics import topics_extract, topics_query


@pytest.mark.parametrize(
    ("texts", "topics"),
    [
        # chatty question words and temporal phrases go; the name stays whole
        (["What did we discuss yesterday about Project Apollo?"], ["Project Apollo"]),
        (
            ["What did we say last week about the Berlin trip? In March we went to Lisbon."],
            ["Berlin", "Lisbon", "trip"],
        ),
        (["Please tell me about ticket 4521"], ["4521", "ticket"]),
        (["Let's talk about Windows 11 pricing"], ["Windows 11", "pricing"]),
        (["O'Brien's report on 2025-11-18 at 3pm"], ["O'Brien", "report"]),
        # names inside sentences, with lower-case connectors; "and" joins two names, not one
        (
            ["I met Sarah and Tom at the Bank of America office."],
            ["Sarah", "Tom", "Bank of America", "met", "office"],
        ),
        (["Trips to Berlin, Paris and Rome"], ["Berlin", "Paris", "Rome", "trips"]),
        (["Yesterday Sarah phoned about Lisbon"], ["Sarah", "Lisbon", "phoned"]),
        # identifiers keep their spelling
        (
            ["We shipped the memory_search endpoint and the getUser API in v2.1"],
            ["memory_search", "getUser", "API", "v2.1", "shipped", "endpoint"],
        ),
        # a lone capitalized word opening a sentence is a common word...
        (["Apollo launch was delayed."], ["apollo", "launch", "delayed"]),
        # ...unless it shows up capitalized mid-sentence too
        (["I love Python. Python is great. What about Rust?"], ["Python", "Rust", "love"]),
        # a word of a longer name counts for the name
        (["Project Apollo is late.", "Why is apollo late again?"], ["Project Apollo"]),
        # newest turn first, then names, then frequency
        (
            [
                "I'm flying to New York next week for the Q3 review.",
                "Can you remind me what we said about the budget for v2.1?",
            ],
            ["v2.1", "budget", "New York", "Q3", "flying", "review"],
        ),
        (
            ["Deploy the database migration", "database backups", "Which database did we pick?"],
            ["database", "pick", "backups", "deploy", "migration"],
        ),
        (
            ["the kubernetes cluster and the kubernetes dashboard and the cluster"],
            ["kubernetes", "cluster", "dashboard"],
        ),
        # nothing but chat
        (["hey what did we talk about recently? please remind me"], []),
        ([], []),
        (["", "   "], []),
    ],
)
def test_topics_extract(texts: list[str], topics: list[str]):
    assert topics_extract(texts) == topics


def test_duplicates_differing_in_case_count_once():
    topics = topics_extract(["Redis is slow", "why is redis slow", "REDIS again"])

    assert [topic.lower() for topic in topics].count("redis") == 1


def test_the_newest_turn_comes_first_even_against_frequency():
    older = "invoices invoices invoices invoices"

    assert topics_extract([older, "what about the payroll?"]) == ["payroll", "invoices"]


def test_max_topics_keeps_the_most_important():
    texts = ["alpha beta gamma delta", "epsilon zeta Kappa"]

    assert topics_extract(texts, max_topics=3) == ["Kappa", "epsilon", "zeta"]
    assert topics_extract(texts, max_topics=0) == []


def test_ties_keep_the_order_of_mention():
    assert topics_extract(["zebra mango apple"]) == ["zebra", "mango", "apple"]


def test_topics_query_joins_with_spaces():
    assert topics_query(["Project Apollo", "budget", " ", "Q3"]) == "Project Apollo budget Q3"
    assert topics_query([]) == ""
