"""Knowledge-vault values in plain text need a key with the secrets permission, and show only
what the key's own client wrote: read-only keys, ordinary keys and read-scoped clients see
them masked, and asking without the permission is refused."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from accounts.services import api_key_create, client_read_scopes_set
from memory.api.serializers.memories import SECRETS_DENIED
from sessions.models import Message
from sessions.sensitive import MASK
from tests.factories import TenantFixture, api_client_with, memories_create

pytestmark = pytest.mark.django_db

ASKING = [
    ("/memory/components", {"user_id": "sam", "memory_type": "knowledge"}),
    ("/memory/search", {"user_id": "sam", "query": "sam@example.com"}),
    ("/memory/search_all_users", {"query": "sam@example.com"}),
]


def _vault_values(api, path: str, params: dict[str, str], *, asking: bool = True) -> list[str]:
    response = api.get(path, {**params, "include_secrets": "true"} if asking else params)
    assert response.status_code == 200, response.content[:300]
    body = response.json()
    if "memories" in body:
        return [item["secret_value"] for item in body["memories"]["knowledge_vault"]["items"]]
    return [hit["secret_value"] for hit in body["results"] if "secret_value" in hit]


def test_without_the_permission_asking_for_secrets_is_403(org: TenantFixture) -> None:
    memories_create(org, user_id="sam")
    read_only = api_client_with(api_key_create(client=org.client, read_only=True).plaintext)
    for api in (org.api, read_only):
        for path, params in ASKING:
            response = api.get(path, {**params, "include_secrets": "true"})
            assert response.status_code == 403, path
            assert response.json() == {"detail": SECRETS_DENIED, "code": "permission_denied"}
            # Not asking is not refused: the values come masked.
            masked = _vault_values(api, path, params, asking=False)
            assert masked and set(masked) == {MASK}, path


def test_a_key_with_the_permission_shows_its_own_clients_secrets_only(
    org: TenantFixture,
) -> None:
    reader = org.another_client("reader")
    client_read_scopes_set(client=reader.client, scopes=[org.client])
    memories_create(org, user_id="sam")
    out = StringIO()
    call_command("create_api_key", org.client.pk, "--secrets", "--read-only", stdout=out)
    owner_secrets = api_client_with(out.getvalue().strip())
    reader_secrets = api_client_with(
        api_key_create(client=reader.client, reveals_secrets=True).plaintext
    )
    for path, params in ASKING:
        assert "sam@example.com" in _vault_values(owner_secrets, path, params), path
        # The reader may read org's vault items, but their values are not its own to show.
        seen = _vault_values(reader_secrets, path, params)
        assert seen and set(seen) == {MASK}, path


def test_stored_turns_are_served_with_their_secrets_masked(org: TenantFixture) -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"
    turns = [
        {"role": "user", "content": f"my key is {key}, mail sam@example.com, password: hunter22"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Saved."}],
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "store", "arguments": json.dumps({"key": key})},
                }
            ],
        },
    ]
    body = {"user_id": "sam", "session_id": "s1", "messages": turns}
    assert org.api.post("/memory/add", body, format="json").status_code == 202
    reader = org.another_client("reader")
    client_read_scopes_set(client=reader.client, scopes=[org.client])
    owner_secrets = api_client_with(
        api_key_create(client=org.client, reveals_secrets=True).plaintext
    )
    reader_secrets = api_client_with(
        api_key_create(client=reader.client, reveals_secrets=True).plaintext
    )

    def served(api) -> str:
        response = api.get("/sessions/s1/messages", {"user_id": "sam"})
        assert response.status_code == 200
        return json.dumps(response.json()["results"])

    for api in (org.api, reader_secrets):  # no permission; a permission, but not its turns
        text = served(api)
        for value in (key, "sam@example.com", "hunter22"):
            assert value not in text
        assert MASK in text and "Saved." in text
    verbatim = served(owner_secrets)
    assert key in verbatim and "sam@example.com" in verbatim and "hunter22" in verbatim
    # Stored as sent, for re-extraction.
    assert Message.objects.filter(text__contains=key).exists()
