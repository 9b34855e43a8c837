from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from rest_framework import serializers
from rest_framework.test import APIClient

from accounts.models import EndUser, owned_models, tenant_models
from mirix_site.api.fields import datetime_text
from tests.factories import TenantFixture, memories_create


def test_create_or_get_creates_then_returns_the_same_user(org: TenantFixture) -> None:
    first = org.api.post("/users/create_or_get", {"user_id": "demo-user", "name": "Demo"})
    again = org.api.post("/users/create_or_get", {"user_id": "demo-user", "name": "Other name"})
    assert first.status_code == 201
    assert again.status_code == 200
    assert first.json()["id"] == again.json()["id"] == "demo-user"
    assert again.json()["name"] == "Demo"
    assert first.json()["organization_id"] == org.organization.pk
    assert EndUser.objects.filter(organization=org.organization).count() == 1


def test_create_without_user_id_generates_one(org: TenantFixture) -> None:
    response = org.api.post("/users/create_or_get", {"name": "Alice"})
    assert response.status_code == 201
    user_id = response.json()["id"]
    assert user_id.startswith("user-")
    assert response.json()["name"] == "Alice"
    assert org.api.get(f"/users/{user_id}").json()["id"] == user_id


def test_name_defaults_to_user_id(org: TenantFixture) -> None:
    response = org.api.post("/users/create_or_get", {"user_id": "u1", "name": None})
    assert response.json()["name"] == "u1"


def test_invalid_user_id_is_422_and_stores_nothing(org: TenantFixture) -> None:
    # A final newline passes Python's "$", a surrounding space DRF's trimming: the schema's
    # pattern, which clients check, refuses both (a space inside is a user id, as in MIRIX).
    for bad in ["bob ", "a/b", "x" * 256, "", "bob\n", " bob", "tab\tbed"]:
        response = org.api.post("/users/create_or_get", {"user_id": bad})
        assert response.status_code == 422, bad
        body = response.json()
        assert body["code"] == "invalid"
        assert "user_id" in body["fields"]
    assert not EndUser.objects.exists()


def test_malformed_json_is_400(org: TenantFixture) -> None:
    response = org.api.post(
        "/users/create_or_get", data="{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "Malformed JSON body.", "code": "parse_error"}


def test_non_object_body_is_422(org: TenantFixture) -> None:
    response = org.api.post("/users/create_or_get", ["user_id"], format="json")
    assert response.status_code == 422
    assert response.json()["code"] == "invalid"


def test_user_id_namespaces_are_per_organization(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    mine = org.api.post("/users/create_or_get", {"user_id": "sam", "name": "Alice's Sam"})
    theirs = other_org.api.post("/users/create_or_get", {"user_id": "sam", "name": "Bob's Sam"})
    assert mine.status_code == theirs.status_code == 201
    assert org.api.get("/users/sam").json()["name"] == "Alice's Sam"
    assert other_org.api.get("/users/sam").json()["name"] == "Bob's Sam"
    assert org.api.delete("/users/sam").status_code == 200
    assert org.api.get("/users/sam").status_code == 404
    assert other_org.api.get("/users/sam").json()["name"] == "Bob's Sam"


def test_list_is_paginated_ordered_and_scoped(
    org: TenantFixture, other_org: TenantFixture, django_assert_max_num_queries
) -> None:
    for index in range(5):
        org.api.post("/users/create_or_get", {"user_id": f"user{index}"})
    other_org.api.post("/users/create_or_get", {"user_id": "bobs-user"})
    with django_assert_max_num_queries(3):
        first_page = org.api.get("/users", {"limit": 3}).json()
    assert [user["id"] for user in first_page["results"]] == ["user4", "user3", "user2"]
    second_page = org.api.get(first_page["next"]).json()
    assert [user["id"] for user in second_page["results"]] == ["user1", "user0"]
    assert second_page["next"] is None
    same_by_cursor = org.api.get("/users", {"limit": 3, "cursor": first_page["next_cursor"]})
    assert same_by_cursor.json()["results"] == second_page["results"]
    # Only the cursor as written: base64 would skip the "!", the schema's pattern refuses it.
    cursor = first_page["next_cursor"]
    garbled = org.api.get("/users", {"limit": 3, "cursor": f"{cursor[:4]}!{cursor[4:]}"})
    assert garbled.status_code == 422


def test_bad_paging_parameters_are_422(org: TenantFixture) -> None:
    for params in [{"limit": 0}, {"limit": "many"}, {"limit": 100000}, {"cursor": "not-a-cursor"}]:
        response = org.api.get("/users", params)
        assert response.status_code == 422, params
        assert set(response.json()["fields"]) <= {"limit", "cursor"}


def test_other_clients_of_the_same_org_share_end_users(org: TenantFixture) -> None:
    sibling = org.another_client("second-app")
    org.api.post("/users/create_or_get", {"user_id": "shared"})
    assert sibling.api.get("/users/shared").status_code == 200


def test_delete_user(org: TenantFixture) -> None:
    org.api.post("/users/create_or_get", {"user_id": "gone"})
    response = org.api.delete("/users/gone")
    assert response.status_code == 200
    assert response.json()["success"] is True
    assert not EndUser.objects.filter(user_id="gone").exists()
    assert org.api.delete("/users/gone").status_code == 404


def test_unknown_path_is_json_404(org: TenantFixture) -> None:
    response = org.api.get("/no/such/path")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}


def test_wrong_method_is_405_in_the_error_shape(org: TenantFixture) -> None:
    response = org.api.put("/users", {})
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 3, 18, 15, 0, 7, 123456, tzinfo=UTC),
        datetime(2026, 3, 18, 15, 0, tzinfo=UTC),
        datetime(2026, 3, 18, 11, 0, tzinfo=ZoneInfo("America/New_York")),
    ],
)
def test_user_times_read_as_drf_writes_them(moment: datetime) -> None:
    assert datetime_text(moment) == serializers.DateTimeField().to_representation(moment)


@pytest.mark.parametrize("user_id", [12345, 1.5, True, ["a"], {"a": 1}])
def test_a_user_id_that_is_not_a_string_is_422_and_creates_nothing(
    org: TenantFixture, user_id: object
) -> None:
    response = org.api.post("/users/create_or_get", {"user_id": user_id}, format="json")
    assert response.status_code == 422
    assert "user_id" in response.json()["fields"]
    assert not EndUser.objects.filter(organization=org.organization).exists()


def test_text_fields_everywhere_refuse_numbers(org: TenantFixture) -> None:
    body = {"user_id": "sam", "messages": [{"role": "user", "content": "hi"}], "session_id": 7}
    response = org.api.post("/memory/add", body, format="json")
    assert response.status_code == 422
    assert response.json()["fields"] == {"session_id": ["Not a valid string."]}


def test_a_client_deletes_only_its_own_rows_about_a_user(org: TenantFixture) -> None:
    # A second client of the organization without a read scope on the first: it sees none
    # of the first's rows, and its delete must not remove them either.
    second = org.another_client("second-app")
    for owner in (org, second):
        memories_create(owner, user_id="victim")
        owner.api.get("/memory/search", {"user_id": "victim", "query": "draft"})  # a log row
    user = EndUser.objects.get(organization=org.organization, user_id="victim")

    # Every row a client holds about the user: its own rows, and their history.
    from pghistory.models import Event

    models = [
        *owned_models(),
        *(model for model in tenant_models() if issubclass(model, Event)),
    ]

    def rows(owner: TenantFixture) -> dict[str, int]:
        counts = {
            model._meta.label: model.objects.filter(client=owner.client, end_user=user).count()
            for model in models
        }
        return {label: count for label, count in counts.items() if count}

    first_rows, second_rows = rows(org), rows(second)
    for label in ("conversations.Session", "conversations.Message", "memory.EpisodicMemory",
                  "search.Posting", "memory.ExtractionJob", "search.RetrievalLog"):  # fmt: skip
        assert first_rows.get(label) and second_rows.get(label), label

    response = second.api.delete("/users/victim")

    assert response.status_code == 200
    assert response.json()["deleted"] == second_rows  # its own rows, nothing else
    assert rows(second) == {}
    assert rows(org) == first_rows
    assert org.api.get("/users/victim").status_code == 200
    assert org.api.get("/memory/components", {"user_id": "victim"}).json()["counts"]["episodic"]

    # The last client holding anything about the user takes the user with its rows.
    assert org.api.delete("/users/victim").json()["deleted"] == first_rows
    assert not EndUser.objects.filter(pk=user.pk).exists()
    assert second.api.get("/users/victim").status_code == 404


def test_the_user_list_shows_the_users_this_client_or_its_scopes_hold(org: TenantFixture) -> None:
    """Users only other clients (outside its read scopes) wrote about are not listed; a user
    named by this client, or held by a client it reads, is."""
    from accounts.services import client_read_scopes_set

    second = org.another_client("second")
    second.api.post("/users/create_or_get", {"user_id": "only-second"}, format="json")
    org.api.post("/users/create_or_get", {"user_id": "mine"}, format="json")

    def listed(api: APIClient) -> set[str]:
        return {user["id"] for user in api.get("/users").json()["results"]}

    assert {"mine"} <= listed(org.api) and "only-second" not in listed(org.api)
    assert "only-second" in listed(second.api) and "mine" not in listed(second.api)
    # Naming the other's user makes this client hold them too.
    org.api.post("/users/create_or_get", {"user_id": "only-second"}, format="json")
    assert "only-second" in listed(org.api)
    # A read scope lists what the scoped client holds; forgetting a user takes them off.
    third = org.another_client("third")
    client_read_scopes_set(client=third.client, scopes=[second.client])
    assert listed(third.api) >= {"only-second"} and "mine" not in listed(third.api)
    assert org.api.delete("/users/mine").status_code == 200
    assert "mine" not in listed(org.api)
