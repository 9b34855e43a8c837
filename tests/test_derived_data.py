"""What the server derives from turns keeps their secrets out, and what a client reads through a
read scope stays read-only in every sense ([11/18]).

- The derived-data secrets check: task sessions whose tool calls carry one value of each kind
  the detector knows (and whose tool results echo them) are learned from; then every route of
  the endpoint registry that reads is asked with a plain key, a read-only key and another
  client's key with a read scope (and the secrets permission): no answer holds any of the
  values, the export's files and ``SKILL.md`` included.
- The write-boundary check: every write of the registry that names an object of another
  client (in its path or its body) answers a client with only a read scope on it exactly as it
  answers for a missing object, and changes none of the owner's rows.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest
from django.test import override_settings

from accounts.services import api_key_create, client_read_scopes_set
from sessions.sensitive import KINDS
from skills.models import Experience, LearningRun, Skill
from skills.tasks import learning_run_task
from tests.accounts.test_authentication import _rows_of
from tests.endpoints import ENDPOINTS, REFERENCE_WRITES, Endpoint, body, call, owned_ids
from tests.factories import TenantFixture, api_client_with
from tests.skills.sessions import session_send, tool_turns

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBqJ3x9kQ2pV7sLmN4oR8tY6uW1zA5bC3dE9fG0hI2jKgAAAJgVq1ZrFatW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
# One value of each kind the detector knows, as a tool call's argument would carry it.
SAMPLES: dict[str, tuple[str, str]] = {
    "password": ("db_password", "Hunter2-Secret!"),
    "secret": ("client_secret", "cs-9fK2mQ7xL4pR8vT1"),
    "api-key": ("api_key", "a8f5f167f44f4964e6c998dee827110c"),
    "access-token": ("refresh_token", "rt-8s7d6f5g4h3j2k1l0z"),
    "private-key": ("ssh_key", PEM),
    "github-token": ("repo_token", "ghp_" + "R4nd0mT0k3nV4lu3" * 2 + "Xy12"),
    "gitlab-token": ("gitlab", "glpat-" + "Zq8Wm2Lp5Nx7Rv3Tk9Hs"),
    "stripe-key": ("billing", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
    "aws-access-key": ("aws_id", "AKIA" + "IOSFODNN7QZ4XK2M"),
    "aws-secret-key": ("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8x2Lk3Mn"),
    "azure-storage-key": ("storage", "AccountKey=" + "Zm9vYmFy" * 11),
    "jwt": ("session", JWT),
    "slack-token": ("slack", "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    "openai-key": ("llm", "sk-proj-" + "Qw3rTy7uIo9pAs2dFg5hJk8lZx4cVb6n"),
    "anthropic-key": ("claude", "sk-ant-api03-" + "Mn8bVc6xZl4kJh2gFd0sAp9oIu7yTr5e"),
    "huggingface-token": ("hub", "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"),
    "google-api-key": ("maps", "AIza" + "SyD4x9Kq2Lm7Np3Rs8Tv1Wx6Yz0Ab5Cd3Ef"),
    "npm-token": ("registry", "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    "pypi-token": ("upload", "pypi-AgEIcHlwaS5vcmc" + "Xq7Lm2Np9Rs4Tv8Wy3Zb6Cd1Ef5Gh0" * 3),
    "sendgrid-key": (
        "mail",
        "SG." + "aB3dE6gH9jK2mN5pQ8sT1v" + "." + "W4yZ7bC0eF3hI6kL9nO2qR5tU8wX1zA4cD7fG0iJ3lM",
    ),
    "twilio-key": ("sms", "SK" + "0123456789abcdef0123456789abcdef"),
    "discord-token": (
        "bot",
        "M" + "TAxMjM0NTY3ODkwMTIzNDU2" + ".G1a2B3" + ".abcdefghijklmnopqrstuvwxyz0",
    ),
    "telegram-token": ("telegram", "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"),
    "mailchimp-key": ("newsletter", "0123456789abcdef0123456789abcdef-us12"),
    "square-token": ("payments", "sq0csp-" + "0123456789abcdefghijABCDEFGHIJ_-klmnopqrstu"),
    "mirix-key": ("memory", "mxk_0123456789abcdef_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"),
    "iban": ("payout", "DE89 3704 0044 0532 0130 00"),
    "card-number": ("card", "4111 1111 1111 1111"),
    "card-code": ("cvv", "7371"),
    "email": ("notify", "ops.lead@example.com"),
    "phone": ("pager", "+44 20 7946 0958"),
}
# What must not be seen: each value whole, and for the long ones their distinctive middle (a
# value cut short by a clip would still leak it).
# (A card's 4-digit code is too short to look for in every answer: ids and times hold such
# runs. tests/sessions/test_sensitive.py checks it is redacted.)
FORBIDDEN = sorted(
    {value for _, value in SAMPLES.values() if len(value) >= 6}
    | {value[4:-4] for _, value in SAMPLES.values() if len(value) >= 24 and "\n" not in value}
)


def test_the_samples_cover_every_kind_the_detector_knows() -> None:
    assert set(SAMPLES) == set(KINDS)


def _session(task: str) -> list[dict[str, Any]]:
    """A task whose first call carries every sample and fails echoing the password; the call
    that works carries them again."""
    arguments = {name: value for name, value in SAMPLES.values()}
    password = SAMPLES["password"][1]
    return [
        {"role": "user", "content": f"{task} The password is {password}."},
        *tool_turns(
            "deploy_service",
            {"target": "prod", **arguments},
            f"Error: auth used password={password} and token {SAMPLES['github-token'][1]}: denied",
            "call-1",
        ),
        *tool_turns(
            "deploy_service_v2",
            {"target": "prod", **arguments},
            f"Deployed; notified {SAMPLES['email'][1]}.",
            "call-2",
        ),
        {"role": "assistant", "content": "Deployed with the v2 tool."},
        {"role": "user", "content": "Thanks, that works now."},
    ]


TASKS = (
    "Deploy the billing service to production.",
    "Deploy the search service to production.",
    "Deploy the auth service to production.",
    "Deploy the mail service to production.",
    "Deploy the reports service to production.",
)


@pytest.fixture
def derived(org: TenantFixture, django_capture_on_commit_callbacks) -> dict[str, str]:
    """The owner's ids, pointing at what was learned from the sessions above, and lessons and
    experiences of every other way in (a transcript, a recorded experience, a recommendation)."""
    ids = owned_ids(org)
    with override_settings(LLM_PROVIDER="none"):
        with django_capture_on_commit_callbacks(execute=True):
            for index, task in enumerate(TASKS):
                session_send(org.api, f"deploy-{index}", _session(task), user_id=ids["user_id"])
        run = LearningRun.objects.filter(client=org.client).latest("pk")
        assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    password = SAMPLES["password"][1]
    conversation = org.api.post(
        "/experiences/conversation",
        {
            "user_id": ids["user_id"],
            "messages": [
                {"role": "user", "content": f"Log in to the vault; the password is {password}"},
                {"role": "assistant", "content": f"Logged in with {password}."},
            ],
            "outcome": "success",
        },
        format="json",
    )
    assert conversation.status_code == 201, conversation.content
    recorded = org.api.post(
        "/experiences",
        {
            "user_id": ids["user_id"],
            "task": f"rotate the key {SAMPLES['openai-key'][1]}",
            "action": f"called rotate with token {SAMPLES['github-token'][1]}",
            "outcome": "success",
            "context": {"db_password": password, "card": SAMPLES["card-number"][1]},
        },
        format="json",
    )
    assert recorded.status_code == 201, recorded.content
    recommended = org.api.get(
        "/experiences/recommend",
        {"user_id": ids["user_id"], "task": f"log in to the vault with {password}"},
    )
    assert recommended.status_code == 200
    skill = Skill.objects.filter(client=org.client, end_user__user_id=ids["user_id"]).latest("pk")
    lesson = Experience.objects.filter(client=org.client, origin="distilled").latest("pk")
    return {
        **ids,
        "skill_id": str(skill.pk),
        "experience_id": str(lesson.pk),
        "run_id": str(run.pk),
        "session_id": "deploy-0",
    }


def _text(response: Any) -> str:
    if response.get("Content-Type", "").startswith("application/zip"):
        with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
            return "\n".join(archive.read(name).decode() for name in archive.namelist())
    return body(response).decode(errors="replace")


READS = [endpoint for endpoint in ENDPOINTS if not endpoint.writes]
# Retrievals that name what the seeded sessions were about, besides the registry's queries.
DERIVED_QUERIES = [
    Endpoint(
        "POST", "/skills/retrieve", {"user_id": "{user_id}", "task": TASKS[0]}, reads_only=True
    ),
    Endpoint("GET", "/experiences/recall", params={"user_id": "{user_id}", "query": "vault"}),
    Endpoint("GET", "/experiences/recall", params={"user_id": "{user_id}", "query": "deploy"}),
    Endpoint(
        "GET",
        "/experiences/recommend",
        params={"user_id": "{user_id}", "task": "deploy the service"},
    ),
    Endpoint("GET", "/experiences/recent", params={"user_id": "{user_id}", "limit": 100}),
]


@pytest.mark.django_db
def test_no_key_reads_a_secret_out_of_anything_derived_from_turns(
    org: TenantFixture, derived: dict[str, str]
) -> None:
    reader = org.another_client("reader")
    client_read_scopes_set(client=reader.client, scopes=[org.client])
    keys = {
        "plain": org.api,
        "read-only": api_client_with(org.new_key(read_only=True)[1]),
        "scoped": api_client_with(
            api_key_create(client=reader.client, reveals_secrets=True).plaintext
        ),
    }
    assert Skill.objects.filter(pk=derived["skill_id"]).exists()
    for name, api in keys.items():
        for endpoint in [*READS, *DERIVED_QUERIES]:
            response = call(api, endpoint, **derived)
            assert response.status_code < 500, (name, endpoint.path, response.content[:300])
            text = _text(response)
            leaked = [value for value in FORBIDDEN if value in text]
            assert not leaked, (name, endpoint.method, endpoint.path, leaked)
    # What the checks read is there: the learned skill, its lessons and the sessions' turns.
    skill = keys["plain"].get(f"/skills/{derived['skill_id']}/SKILL.md").content.decode()
    assert "deploy_service_v2" in skill and "<password>" in skill
    assert keys["scoped"].get(f"/skills/{derived['skill_id']}").status_code == 200


# --- The write boundary --------------------------------------------------------------------------

# Well-formed ids that name nothing: what a missing object's answer is taken from.
MISSING = {
    "user_id": "owned-user",  # the user is the organization's: the same for both
    "agent_id": "999999999",
    "session_id": "no-such-session",
    "memory_id": "999999999",
    "experience_id": "999999999",
    "recommendation_id": "999999999",
    "image_id": "0" * 64,
    "fetch_id": "999999999",
    "run_id": "999999999",
    "skill_id": "999999999",
}


def _references(endpoint: Endpoint) -> set[str]:
    named = json.dumps([endpoint.path, endpoint.body, endpoint.params])
    return {name for name in MISSING if f"{{{name}}}" in named} - {"user_id", "image_id"}


BOUNDARY_WRITES = [
    endpoint
    for endpoint in [*ENDPOINTS, *REFERENCE_WRITES]
    if endpoint.writes and _references(endpoint)
]


@pytest.mark.parametrize("endpoint", BOUNDARY_WRITES, ids=lambda e: f"{e.method} {e.path}")
def test_a_write_naming_a_scoped_clients_object_answers_as_for_a_missing_one(
    endpoint: Endpoint, org: TenantFixture
) -> None:
    ids = owned_ids(org)
    reader = org.another_client("reader")
    client_read_scopes_set(client=reader.client, scopes=[org.client])
    own = {
        f"own_{name}": value
        for name, value in owned_ids(reader, session_id="reader-session").items()
    }
    before = _rows_of(org.client)
    named = _references(endpoint)
    theirs = call(reader.api, endpoint, **ids, **own)
    missing = call(reader.api, endpoint, **{**ids, **{k: MISSING[k] for k in named}}, **own)
    assert theirs.status_code in (404, 409), theirs.content
    assert (theirs.status_code, theirs.json()) == (missing.status_code, missing.json())
    assert _rows_of(org.client) == before


def test_a_scoped_client_using_anothers_skill_adds_no_evidence_to_it(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    """The audit's reproduction: a client with a read scope retrieves the owner's skill for its
    own task session, closes it as a failure three times over, then forgets the user: the
    owner's skill, its uses and its figures are as they were, and the answer counts only the
    caller's rows."""
    from tests.factories import skill_create

    skill = skill_create(org, user_id="alice")
    reader = org.another_client("reader")
    client_read_scopes_set(client=reader.client, scopes=[org.client])
    before = _rows_of(org.client)
    confidence = org.api.get(f"/skills/{skill.pk}").json()["confidence"]
    with django_capture_on_commit_callbacks(execute=True):
        for attempt in range(3):
            session_id = f"reader-task-{attempt}"
            session_send(
                reader.api,
                session_id,
                [
                    {"role": "user", "content": "load a csv file"},
                    {"role": "assistant", "content": "Tried."},
                    {"role": "user", "content": "That is wrong, it failed."},
                ],
                user_id="alice",
                close=False,
            )
            found = reader.api.post(
                "/skills/retrieve",
                {"user_id": "alice", "task": "load a csv file", "session_id": session_id},
                format="json",
            )
            assert found.status_code == 200, found.content
            assert str(skill.pk) in [item["id"] for item in found.json()["skills"]]
            closed = reader.api.post(
                f"/sessions/{session_id}/close", {"user_id": "alice"}, format="json"
            )
            assert closed.status_code == 200
    assert _rows_of(org.client) == before
    assert org.api.get(f"/skills/{skill.pk}").json()["confidence"] == confidence
    forgotten = reader.api.delete("/users/alice")
    assert forgotten.status_code == 200, forgotten.content
    assert "skills.SkillUse" not in forgotten.json()["deleted"]
    assert _rows_of(org.client) == before


def test_an_outcome_citing_a_scoped_clients_recommendation_changes_none_of_its_figures(
    org: TenantFixture,
) -> None:
    ids = owned_ids(org)
    reader = org.another_client("reader")
    client_read_scopes_set(client=reader.client, scopes=[org.client])
    stats = org.api.get("/experiences/stats", {"user_id": ids["user_id"]}).json()
    cited = reader.api.post(
        "/experiences",
        {
            "user_id": ids["user_id"],
            "task": "fix the slow login",
            "action": "add a cache",
            "outcome": "failure",
            "recommendation_id": ids["recommendation_id"],
        },
        format="json",
    )
    assert cited.status_code == 404
    assert org.api.get("/experiences/stats", {"user_id": ids["user_id"]}).json() == stats
