"""Bad text reaches no endpoint as a 500: every string a request of the endpoint registry
carries (path ids, query values, body leaves) is sent again holding a NUL, a lone surrogate
and more characters than any field takes, and every body is sent nested too deep. Each answer
is below 500, and a refusal is in the one error shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest

from mirix_site.api.parsers import MAX_JSON_DEPTH
from sessions.models import Message
from tests.endpoints import ENDPOINTS, Endpoint, owned_ids, placeholders_filled
from tests.factories import TenantFixture, memories_create

BAD_TEXT = {"nul": "a\x00b", "surrogate": "a\ud800b", "too-long": "x" * 300_000}


def _leaves(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """The positions of the strings in a JSON value."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))


def _replaced(value: Any, path: tuple, new: str) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


def _requests(endpoint: Endpoint, ids: dict[str, str], bad: str) -> Iterator[tuple[str, Any]]:
    """(path, params or body) with ``bad`` in one place at a time."""
    data = placeholders_filled(endpoint.body if endpoint.body is not None else endpoint.params, ids)
    for name in ids:
        if "{" + name + "}" in endpoint.path:
            bad_id = quote(bad, errors="surrogatepass")
            yield placeholders_filled(endpoint.path, {**ids, name: bad_id}), data
    path = placeholders_filled(endpoint.path, ids)
    for leaf in _leaves(data):
        yield path, _replaced(data, leaf, bad)


def _send(org: TenantFixture, method: str, path: str, data: Any):
    """As a client on the wire sends it: JSON with ``\\u`` escapes (a lone surrogate
    included), a URL of percent-encoded UTF-8 (a surrogate as its three bytes)."""
    if method in {"POST", "PATCH", "PUT"} or (method == "DELETE" and data):
        return org.api.generic(method, path, json.dumps(data), content_type="application/json")
    query = urlencode(data, doseq=True, errors="surrogatepass")
    return org.api.generic(method, f"{path}?{query}" if query else path)


def _assert_answered(response, what: str) -> None:
    assert response.status_code < 500, (what, response.content[:300])
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body["detail"], str) and isinstance(body["code"], str), what


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
@pytest.mark.parametrize("kind", BAD_TEXT)
def test_bad_text_anywhere_is_never_a_500(
    endpoint: Endpoint, kind: str, org: TenantFixture
) -> None:
    ids = owned_ids(org)
    for path, data in _requests(endpoint, ids, BAD_TEXT[kind]):
        response = _send(org, endpoint.method, path, data)
        _assert_answered(response, f"{kind}: {path:.200} {data!r:.200}")


@pytest.mark.parametrize(
    "endpoint", [e for e in ENDPOINTS if e.body is not None], ids=lambda e: f"{e.method} {e.path}"
)
def test_a_body_nested_too_deep_is_400(endpoint: Endpoint, org: TenantFixture) -> None:
    path = placeholders_filled(endpoint.path, owned_ids(org))
    body = {
        **endpoint.body,
        "deep": json.loads("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)),
    }
    response = getattr(org.api, endpoint.method.lower())(path, body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "too_deep"


def test_a_pasted_binary_snippet_is_stored_as_a_chat_turn(org: TenantFixture) -> None:
    body = {
        "user_id": "sam",
        "messages": [{"role": "user", "content": "log:\x00\x01 and \ud800 end"}],
        "filter_tags": {"k\x00": "v\x00"},
    }
    response = _send(org, "POST", "/memory/add", body)
    assert response.status_code == 202, response.json()
    message = Message.objects.get()
    assert message.text == "log:\ufffd\x01 and \ufffd end"


def test_a_nul_in_a_user_id_is_refused(org: TenantFixture) -> None:
    response = org.api.post("/users/create_or_get", {"user_id": "a\x00b"}, format="json")
    assert response.status_code == 422
    assert "user_id" in response.json()["fields"]
    query = org.api.get("/memory/components", {"user_id": "\x00abc"})
    assert query.status_code == 422
    assert query.json()["fields"] == {"user_id": ["NUL characters are not allowed."]}
    assert org.api.get("/users/%00abc").status_code == 404
    assert org.api.get("/sessions/a%00b", {"user_id": "u"}).status_code == 404


def test_a_nul_in_json_tags_of_a_query_string_is_not_a_500(org: TenantFixture) -> None:
    memories_create(org, user_id="sam")
    response = org.api.get(
        "/memory/search",
        {"user_id": "sam", "query": "x", "filter_tags": json.dumps({"a": "\x00"})},
    )
    assert response.status_code == 200, response.content[:300]
    assert response.json()["results"] == []  # no memory has that tag


def test_a_memory_id_of_unicode_digits_is_not_found(org: TenantFixture) -> None:
    # str.isdigit() takes "²" and "٣", int() refuses the first: an id is ASCII digits.
    for memory_id in ("²", "٣", "\uff11"):  # superscript two, Arabic-Indic three, fullwidth one
        path = f"/memory/episodic/{quote(memory_id)}"
        assert org.api.delete(path).status_code == 404, memory_id
        assert org.api.patch(path, {"summary": "x"}, format="json").status_code == 404
