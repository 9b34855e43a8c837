"""A question without topic words ("what happened recently?", "what did we talk about
yesterday?", "anything new?") answers the newest memories, within the time a phrase pins, on
every retrieval endpoint; a question with one searches as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from accounts.services import client_read_scopes_set
from memory.models import ExtractionJob
from memory.query.recency import content_terms
from memory.services import extraction_job_run
from mirix_site.search.models import RetrievalLog
from tests.factories import TenantFixture, chat_turns
from tests.loopback import LoopbackServer, Reply, openai_reply

AS_OF = datetime(2025, 6, 10, 12, 0, tzinfo=UTC)
# What sam said, when (AS_OF's day is "today").
TOLD = (
    ("I drank green tea at the station café", datetime(2025, 6, 7, 9, 0, tzinfo=UTC)),
    ("We repaired the kayak in the garage", datetime(2025, 6, 9, 15, 0, tzinfo=UTC)),
    ("I walked the dog along the river", datetime(2025, 6, 9, 18, 0, tzinfo=UTC)),
    ("The plumber fixed the kitchen sink", datetime(2025, 6, 10, 8, 0, tzinfo=UTC)),
)
NEWEST_FIRST = [
    "user: The plumber fixed the kitchen sink",
    "user: I walked the dog along the river",
    "user: We repaired the kayak in the garage",
    "user: I drank green tea at the station café",
]
YESTERDAY = NEWEST_FIRST[1:3]


def tell(
    owner: TenantFixture, told: tuple[tuple[str, datetime], ...], user_id: str = "sam"
) -> None:
    """Each turn through the real add and extraction path, dated when it was said."""
    for text, when in told:
        response = owner.api.post(
            "/memory/add",
            {
                "user_id": user_id,
                "messages": chat_turns(text, "noted"),
                "occurred_at": when.isoformat(),
            },
            format="json",
        )
        assert response.status_code == 202, response.json()
    for job in ExtractionJob.objects.filter(status="queued").order_by("id"):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)


def searched(owner: TenantFixture, query: str, **params: object) -> list[str]:
    response = owner.api.get(
        "/memory/search",
        {
            "user_id": "sam",
            "query": query,
            "memory_type": "episodic",
            "as_of": AS_OF.isoformat(),
            **params,
        },
    )
    assert response.status_code == 200, response.json()
    return [result["summary"] for result in response.json()["results"]]


def conversed(owner: TenantFixture, text: str, *, as_of: datetime = AS_OF, **body: object) -> dict:
    response = owner.api.post(
        "/memory/retrieve/conversation",
        {"user_id": "sam", "messages": chat_turns(text), "as_of": as_of.isoformat(), **body},
        format="json",
    )
    assert response.status_code == 200, response.json()
    return response.json()


def relevant(body: dict) -> list[str]:
    return [memory["summary"] for memory in body["memories"]["episodic"]["relevant"]]


def last_log(endpoint: str) -> RetrievalLog:
    return RetrievalLog.objects.filter(endpoint=endpoint).latest("id")


def test_what_happened_recently_answers_the_newest_memories_first(org: TenantFixture) -> None:
    tell(org, TOLD)

    assert searched(org, "what happened recently?") == NEWEST_FIRST
    assert searched(org, "anything new?", limit=2) == NEWEST_FIRST[:2]
    assert searched(org, "What's up? Any updates lately?") == NEWEST_FIRST
    # "Recently" names no time to keep to: the newest are the answer however old they are.
    assert searched(org, "what happened recently?", as_of="2025-09-01T00:00:00Z") == NEWEST_FIRST
    log = last_log("memory/search")
    assert log.method == "recency"
    assert log.gate["request"]["recency"] == {"range": None}
    assert [result["gate"] for result in log.results] == ["recent"] * 4

    body = conversed(org, "What happened recently?")
    assert relevant(body) == NEWEST_FIRST
    log = last_log("memory/retrieve/conversation")
    assert log.method == "recency" and log.gate["request"]["recency"] == {"range": None}


def test_every_memory_type_is_listed_newest_first_by_its_own_time(org: TenantFixture) -> None:
    from tests.factories import memories_create

    tell(org, TOLD)
    memories_create(org, user_id="sam")  # semantic, procedural, resource, vault: stored now
    response = org.api.get("/memory/search", {"user_id": "sam", "query": "anything new?"})
    results = response.json()["results"]
    kinds = [result["memory_type"] for result in results]
    assert {"episodic", "semantic", "procedural", "resource", "knowledge_vault"} <= set(kinds)
    # Stored today, the others are newer than the episodes dated in 2025.
    told = [result["summary"] for result in results if result.get("summary") in NEWEST_FIRST]
    assert told == NEWEST_FIRST and kinds[-4:] == ["episodic"] * 4

    body = org.api.get("/memory/retrieve/topic", {"user_id": "sam", "topic": "latest news"}).json()
    assert [m["summary"] for m in body["memories"]["semantic"]["items"]] == ["Sam likes tea."]
    assert relevant(body)[-4:] == NEWEST_FIRST
    assert last_log("memory/retrieve/topic").method == "recency"


def test_what_did_we_talk_about_yesterday_answers_yesterdays_memories(org: TenantFixture) -> None:
    tell(org, TOLD)

    assert searched(org, "what did we talk about yesterday?") == YESTERDAY
    log = last_log("memory/search")
    assert log.method == "recency"
    assert log.gate["request"]["recency"]["range"] == [
        "2025-06-09T00:00:00+00:00",
        "2025-06-09T23:59:59.999999+00:00",
    ]
    assert relevant(conversed(org, "What did we talk about yesterday?")) == YESTERDAY
    assert relevant(conversed(org, "Remind me what we discussed on Saturday")) == [
        "user: I drank green tea at the station café"
    ]
    # Asked a day later, "yesterday" is today's sink.
    later = conversed(org, "what did we talk about yesterday?", as_of=AS_OF + timedelta(days=1))
    assert relevant(later) == NEWEST_FIRST[:1]
    # Explicit dates still filter what the phrase names.
    body = conversed(org, "what did we talk about yesterday?", end_date="2025-06-09T16:00:00+00:00")
    assert relevant(body) == YESTERDAY[1:]


def test_with_a_model_the_time_it_names_is_the_window(
    org: TenantFixture, loopback: LoopbackServer, settings
) -> None:
    tell(org, TOLD)  # extracted without a model
    settings.LLM_PROVIDER = "openai"
    settings.LLM_MODEL = "topics-model"
    settings.LLM_API_BASE = f"{loopback.url}/v1"
    settings.LLM_API_KEY = "sk-loopback"
    loopback.respond(
        lambda _request: Reply(
            200, openai_reply({"topics": ["recent events"], "temporal_expression": "yesterday"})
        )
    )

    body = conversed(org, "Catch me up on yesterday")

    assert len(loopback.requests) == 1
    assert body["topic_list"] == ["recent events"]
    assert relevant(body) == YESTERDAY
    assert last_log("memory/retrieve/conversation").method == "recency"


def test_a_topic_that_is_only_a_time_answers_that_times_memories(org: TenantFixture) -> None:
    now = timezone.now()
    tell(
        org,
        (
            ("We planted tomatoes on the balcony", now - timedelta(days=1)),
            ("We booked the train to Lyon", now - timedelta(days=5)),
        ),
    )
    body = org.api.get("/memory/retrieve/topic", {"user_id": "sam", "topic": "yesterday"}).json()
    assert relevant(body) == ["user: We planted tomatoes on the balcony"]
    # The overview beside it still shows the latest episodes, whatever was asked.
    assert len(body["memories"]["episodic"]["recent"]) == 2


def test_a_time_that_holds_nothing_answers_nothing_and_the_log_says_so(org: TenantFixture) -> None:
    tell(org, TOLD)

    assert searched(org, "what happened last month?", as_of="2025-08-15T09:00:00Z") == []
    log = last_log("memory/search")
    assert log.method == "recency" and log.results == []
    assert log.gate["request"]["recency"]["range"][0] == "2025-07-01T00:00:00+00:00"
    body = conversed(org, "anything new last week?", as_of=datetime(2025, 8, 15, tzinfo=UTC))
    assert relevant(body) == []
    assert [m["summary"] for m in body["memories"]["episodic"]["recent"]] == NEWEST_FIRST


def test_a_question_with_a_topic_word_is_searched_as_before(org: TenantFixture) -> None:
    tell(org, TOLD)

    # "tea" is a topic: searched, and the tea said ten days ago is found though "yesterday"
    # is named (a preference, not a filter).
    found = searched(org, "what did I say about tea yesterday")
    assert found[0] == "user: I drank green tea at the station café"
    log = last_log("memory/search")
    assert log.method == "hybrid" and "recency" not in log.gate.get("request", {})
    assert log.results[0]["bm25_rank"] == 1
    body = conversed(org, "What did I say about tea yesterday?")
    assert relevant(body)[0] == "user: I drank green tea at the station café"
    assert "tea" in body["topic_list"]
    log = last_log("memory/retrieve/conversation")
    assert log.method == "hybrid" and "recency" not in log.gate["request"]
    # temporal=false: the phrase is only words, and "yesterday" is one to search for.
    searched(org, "what happened yesterday", temporal="false")
    assert last_log("memory/search").method == "hybrid"


def test_another_users_newer_memories_never_appear(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    tell(org, TOLD)
    newer = (("Ana's brand new secret plan", AS_OF - timedelta(hours=1)),)
    tell(org, newer, user_id="ana")  # same client, another user
    tell(other_org, newer)  # another organization's "sam"
    sibling = org.another_client("sibling")
    tell(sibling, newer)  # another client of the organization, not in the read scopes

    assert searched(org, "what happened recently?", memory_type="all") == NEWEST_FIRST
    assert relevant(conversed(org, "what happened recently?")) == NEWEST_FIRST
    body = org.api.get("/memory/retrieve/topic", {"user_id": "sam", "topic": "recent"}).json()
    assert relevant(body) == NEWEST_FIRST
    assert searched(org, "what did we talk about yesterday?") == YESTERDAY
    # Across users, the client's own users only: ana, not the other organization's sam.
    across = org.api.get("/memory/search_all_users", {"query": "anything new?"}).json()
    assert [result["summary"] for result in across["results"]] == [
        "user: Ana's brand new secret plan",
        *NEWEST_FIRST,
    ]
    # What a read scope opens, recency shows too.
    client_read_scopes_set(client=org.client, scopes=[sibling.client])
    assert searched(org, "anything new?")[0] == "user: Ana's brand new secret plan"
    assert (
        other_org.api.get("/memory/search", {"user_id": "ana", "query": "anything new?"})
    ).status_code == 404


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("what happened recently?", []),
        ("What did we talk about yesterday?", []),
        ("anything new since Monday?", []),
        ("What's up? Please remind me what we discussed last week", []),
        ("Who said hello?", ["hello"]),
        ("what did I say about tea yesterday", ["tea"]),
        ("news about the kayak", ["kayak"]),
        ("in 2023", []),
        ("2023", ["2023"]),  # a year alone is a number, not a time phrase
    ],
)
def test_content_terms_leave_out_time_phrases_and_conversation_words(
    db: None, query: str, terms: list[str]
) -> None:
    assert content_terms(query) == terms
