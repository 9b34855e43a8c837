"""Embedding and LLM calls sort a remote API's failures by the same rules: which ones the task
retries, how long the server asked it to wait, and what never reaches an error message."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate

import pytest

from mirix_site.providers.embeddings import (
    EmbeddingPermanentError,
    EmbeddingSettings,
    EmbeddingTransientError,
    embedding_provider,
)
from mirix_site.providers.llm import LLMPermanentError, LLMSettings, LLMTransientError, llm_provider
from tests.loopback import LoopbackServer, Reply

API_KEY = "sk-test-5c81d07e93"


@dataclass(frozen=True)
class Family:
    """One provider family: how to make one call to a server, and the errors it raises."""

    call: Callable[[str, str], Callable[[], object]]  # (server url, api key) -> the call
    transient: type[Exception]
    permanent: type[Exception]


def _embedding_call(url: str, api_key: str) -> Callable[[], object]:
    provider = embedding_provider(
        EmbeddingSettings(
            provider="openai",
            model="text-embedding-3-small",
            api_base=f"{url}/v1",
            api_key=api_key,
            timeout=5.0,
        )
    )
    return lambda: provider.embed(["text 0"])


def _llm_call(url: str, api_key: str) -> Callable[[], object]:
    provider = llm_provider(
        LLMSettings(provider="openai", model="test-model", api_base=url, api_key=api_key)
    )
    return lambda: provider.structured(
        system="Answer in JSON.", prompt="Hello.", schema={"type": "object"}, schema_name="answer"
    )


FAMILIES = {
    "embeddings": Family(_embedding_call, EmbeddingTransientError, EmbeddingPermanentError),
    "llm": Family(_llm_call, LLMTransientError, LLMPermanentError),
}


@pytest.fixture(params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> Family:
    return FAMILIES[request.param]


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 529])
def test_statuses_that_may_pass_are_transient(
    loopback: LoopbackServer, family: Family, status: int
) -> None:
    loopback.respond(lambda _request: Reply(status, {"error": {"message": "try again"}}))

    with pytest.raises(family.transient) as raised:
        family.call(loopback.url, API_KEY)()

    assert f"HTTP {status}" in str(raised.value)
    assert "try again" in str(raised.value)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_client_errors_are_permanent_and_show_the_server_message_without_the_key(
    loopback: LoopbackServer, family: Family, status: int
) -> None:
    loopback.respond(
        lambda _request: Reply(status, {"error": {"message": f"no such model for {API_KEY}"}})
    )

    with pytest.raises(family.permanent) as raised:
        family.call(loopback.url, API_KEY)()

    message = str(raised.value)
    assert f"HTTP {status}" in message
    assert "no such model" in message
    assert API_KEY not in message


@pytest.mark.parametrize("status", [401, 403])
def test_rejected_key_is_permanent_and_the_answer_that_may_quote_it_is_left_out(
    loopback: LoopbackServer, family: Family, status: int
) -> None:
    # OpenAI quotes the rejected key's ends, which no redaction of the whole key would catch.
    partly_quoted = f"Incorrect API key provided: {API_KEY[:6]}********{API_KEY[-4:]}"
    loopback.respond(lambda _request: Reply(status, {"error": {"message": partly_quoted}}))

    with pytest.raises(family.permanent) as raised:
        family.call(loopback.url, API_KEY)()

    message = str(raised.value)
    assert f"HTTP {status}" in message
    assert "Incorrect API key provided" not in message
    assert API_KEY[-4:] not in message


def http_date(seconds_from_now: float) -> Callable[[], str]:
    # Made when the test runs, not when it is collected, which may be minutes earlier.
    return lambda: formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(
    ("header", "earliest", "latest"),
    [
        (lambda: "20", 20.0, 20.0),
        (lambda: "0", 0.0, 0.0),
        (http_date(30), 25.0, 30.0),
        # A date already past, or a negative count: the server has nothing left to wait for.
        (http_date(-600), 0.0, 0.0),
        (lambda: "-5", 0.0, 0.0),
    ],
    ids=["seconds", "zero", "http-date", "past-date", "negative"],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(
    loopback: LoopbackServer,
    family: Family,
    header: Callable[[], str],
    earliest: float,
    latest: float,
) -> None:
    value = header()
    loopback.respond(lambda _request: Reply(503, "busy", {"Retry-After": value}))

    with pytest.raises(family.transient) as raised:
        family.call(loopback.url, API_KEY)()

    retry_after = raised.value.retry_after
    assert retry_after is not None
    assert earliest <= retry_after <= latest


@pytest.mark.parametrize("header", ["soon", "Tomorrow at noon", "inf", "nan"])
def test_retry_after_that_cannot_be_read_is_left_to_the_task_backoff(
    loopback: LoopbackServer, family: Family, header: str
) -> None:
    loopback.respond(lambda _request: Reply(429, "slow down", {"Retry-After": header}))

    with pytest.raises(family.transient) as raised:
        family.call(loopback.url, API_KEY)()

    assert raised.value.retry_after is None


@pytest.mark.parametrize("body", ["<html>captive portal</html>", ["a", "list"]])
def test_success_status_without_a_json_object_is_permanent(
    loopback: LoopbackServer, family: Family, body: object
) -> None:
    loopback.respond(lambda _request: Reply(200, body))

    with pytest.raises(family.permanent, match=r"not JSON|not an object"):
        family.call(loopback.url, API_KEY)()


def test_key_that_cannot_be_sent_is_permanent_and_never_quoted(
    loopback: LoopbackServer, family: Family
) -> None:
    # A key read from a file with its trailing newline is not a valid header value; requests
    # refuses it and quotes the value in its own error.
    key_with_newline = f"{API_KEY}\n"

    with pytest.raises(family.permanent) as raised:
        family.call(loopback.url, key_with_newline)()

    logged = "".join(traceback.format_exception(raised.value))
    assert API_KEY not in logged
    assert loopback.requests == []
