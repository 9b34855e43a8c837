"""Images in conversation turns: inline ones stored with the turn, named ones checked against
the organization's store, remote ones fetched by the worker through the SSRF guard (a failure
recorded on the turn, which is kept), and every image released when the last turn showing it
goes, files included."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.storage import storages
from django.db import connection, transaction

from accounts.services import organization_delete
from images.models import ImageFetch, ImageObject
from images.services import image_fetch_run
from sessions.models import Message, MessageImage
from tests.factories import TenantFixture, data_url, image_create, png_bytes, tenant_fixture
from tests.loopback import LoopbackServer, Reply


def _add(api, *contents: object, user_id: str = "u1", session_id: str = "s1"):
    return api.post(
        "/memory/add",
        {
            "user_id": user_id,
            "session_id": session_id,
            "messages": [{"role": "user", "content": content} for content in contents],
        },
        format="json",
    )


def _listed(api, user_id: str = "u1", session_id: str = "s1") -> list[dict]:
    response = api.get(f"/sessions/{session_id}/messages", {"user_id": user_id})
    assert response.status_code == 200, response.content
    return response.json()["results"]


def _image_part(url: str) -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": url}}


def test_an_inline_image_is_stored_with_the_turn_and_named_in_it(org: TenantFixture) -> None:
    data = png_bytes(color=(0, 128, 0))
    response = _add(org.api, [{"type": "text", "text": "my garden"}, _image_part(data_url(data))])
    assert response.status_code == 202, response.content
    image = ImageObject.objects.get(organization=org.organization)
    [message] = _listed(org.api)
    # The turn keeps a reference to the stored bytes, not the base64.
    assert message["content"] == [
        {"type": "text", "text": "my garden"},
        {"type": "image", "image_id": image.sha256},
    ]
    assert message["images"] == [
        {"part": 1, "image_id": image.sha256, "status": "stored", "reason": ""}
    ]
    assert org.api.get(f"/images/{image.sha256}").status_code == 200


def test_the_same_image_in_two_turns_is_stored_once(org: TenantFixture) -> None:
    url = data_url(png_bytes(color=(3, 3, 3)))
    assert _add(org.api, [_image_part(url)], [_image_part(url)]).status_code == 202
    assert ImageObject.objects.count() == 1
    assert MessageImage.objects.count() == 2


def test_a_turn_may_name_an_uploaded_image(org: TenantFixture) -> None:
    image = image_create(org)
    response = _add(org.api, [{"type": "image", "image_id": image.sha256}])
    assert response.status_code == 202, response.content
    [message] = _listed(org.api)
    assert message["images"][0]["image_id"] == image.sha256


def test_naming_an_unknown_or_another_organizations_image_stores_nothing(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    theirs = image_create(other_org)
    for sha256 in (theirs.sha256, "f" * 64):
        response = _add(org.api, "first turn", [{"type": "image", "image_id": sha256}])
        assert response.status_code == 404, response.content
        assert response.json() == {"detail": "Not found.", "code": "not_found"}
    assert not Message.objects.filter(client=org.client).exists()


@pytest.fixture
def opened_paths() -> Iterator[list[str]]:
    """Every path this process opens while the test runs (an audit hook: it sees opens that
    patching ``open`` would miss, from C code included)."""
    opened: list[str] = []
    recording = [True]

    def hook(event: str, args: tuple) -> None:
        if recording[0] and event == "open" and isinstance(args[0], str | bytes | Path):
            opened.append(str(args[0]))

    sys.addaudithook(hook)  # hooks cannot be removed: this one stops recording instead
    yield opened
    recording[0] = False


def test_file_urls_and_parts_are_refused_and_the_file_is_never_opened(
    org: TenantFixture, tmp_path: Path, opened_paths: list[str]
) -> None:
    planted = tmp_path / "secret.png"
    planted.write_bytes(png_bytes(color=(255, 0, 0)))
    opened_paths.clear()  # planting it opened it: what counts is from here
    contents = [
        [_image_part(f"file://{planted}")],
        [_image_part(f"FILE://localhost{planted}")],
        [{"type": "file_uri", "file_uri": str(planted)}],
        [{"type": "file_uri", "file_uri": f"file://{planted}"}],
    ]
    for content in contents:
        response = _add(org.api, content)
        assert response.status_code == 422, response.content
        upload = org.api.post("/images", {"url": f"file://{planted}"}, format="json")
        assert upload.status_code == 422
    assert not [path for path in opened_paths if "secret.png" in path]
    assert not Message.objects.exists() and not ImageObject.objects.exists()


# --- Remote images: the worker fetches them --------------------------------------------------


@pytest.fixture
def image_server(loopback: LoopbackServer, settings) -> LoopbackServer:
    """The loopback server, reachable by name through the fetch allow-list."""
    settings.IMAGE_FETCH_ALLOW_HOSTS = ["localhost"]
    return loopback


def _local_url(server: LoopbackServer, path: str) -> str:
    return server.url.replace("127.0.0.1", "localhost") + path


def _fetch_all(django_capture_on_commit_callbacks) -> list[ImageFetch | None]:
    """What the ingest worker does with every pending fetch, commit callbacks included."""
    with django_capture_on_commit_callbacks(execute=True):
        return [
            image_fetch_run(fetch_id=pk)
            for pk in ImageFetch.objects.filter(status="pending").values_list("pk", flat=True)
        ]


def test_a_remote_image_is_fetched_by_the_worker_and_linked(
    org: TenantFixture, image_server: LoopbackServer, django_capture_on_commit_callbacks
) -> None:
    image_server.respond(lambda _request: Reply(200, png_bytes(), {"Content-Type": "image/png"}))
    url = _local_url(image_server, "/cat.png")
    assert _add(org.api, ["my cat", _image_part(url)][1:]).status_code == 202
    assert not image_server.requests  # nothing is fetched inside the request
    [before] = _listed(org.api)
    assert before["images"] == [{"part": 0, "image_id": None, "status": "pending", "reason": ""}]

    [fetch] = _fetch_all(django_capture_on_commit_callbacks)
    assert fetch is not None and fetch.status == "stored"
    assert image_server.requests[0].path == "/cat.png"
    [after] = _listed(org.api)
    assert after["content"] == [_image_part(url)]
    assert after["images"][0]["status"] == "stored"
    assert after["images"][0]["image_id"] == fetch.image.sha256


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(404, b"gone", {"Content-Type": "text/plain"}), "404"),
        (Reply(200, b"<html></html>", {"Content-Type": "text/html"}), "image"),
        (Reply(200, b"not really a png", {"Content-Type": "image/png"}), "PNG, JPEG"),
    ],
    ids=["not-found", "html", "not-an-image"],
)
def test_a_failed_fetch_is_recorded_on_the_turn_which_is_kept(
    org: TenantFixture,
    image_server: LoopbackServer,
    django_capture_on_commit_callbacks,
    reply: Reply,
    reason: str,
) -> None:
    image_server.respond(lambda _request: reply)
    content = [{"type": "text", "text": "the chart"}, _image_part(_local_url(image_server, "/x"))]
    assert _add(org.api, content).status_code == 202
    [fetch] = _fetch_all(django_capture_on_commit_callbacks)
    assert fetch is not None and fetch.status == "failed" and fetch.finished_at is not None
    assert reason in fetch.reason
    [message] = _listed(org.api)
    assert message["content"][0] == {"type": "text", "text": "the chart"}
    assert message["images"][0]["status"] == "failed"
    assert message["images"][0]["reason"] == fetch.reason
    assert not ImageObject.objects.exists()


def test_a_loopback_url_off_the_allow_list_is_refused_by_the_worker(
    org: TenantFixture, loopback: LoopbackServer, django_capture_on_commit_callbacks
) -> None:
    loopback.respond(lambda _request: Reply(200, png_bytes(), {"Content-Type": "image/png"}))
    # "localhost" passes the request's check (a name), but leads to loopback: refused.
    assert _add(org.api, [_image_part(_local_url(loopback, "/cat.png"))]).status_code == 202
    [fetch] = _fetch_all(django_capture_on_commit_callbacks)
    assert fetch is not None and fetch.status == "failed"
    assert not loopback.requests


# --- Release -----------------------------------------------------------------------------------


def _file_exists(image: ImageObject) -> bool:
    return storages["default"].exists(image.storage_key)


def test_deleting_a_turn_releases_its_unshared_image_and_keeps_a_shared_one(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    shared, alone = png_bytes(color=(10, 20, 30)), png_bytes(color=(40, 50, 60))
    _add(
        org.api,
        [_image_part(data_url(shared)), _image_part(data_url(alone))],
        [_image_part(data_url(shared))],
    )
    first, _second = Message.objects.order_by("position")
    shared_image = ImageObject.objects.get(pk=MessageImage.objects.get(message=_second).image_id)
    alone_image = ImageObject.objects.exclude(pk=shared_image.pk).get()

    with django_capture_on_commit_callbacks(execute=True):
        first.delete()

    assert list(ImageObject.objects.all()) == [shared_image]
    assert _file_exists(shared_image) and not _file_exists(alone_image)
    assert org.api.get(f"/images/{alone_image.sha256}").status_code == 404


def test_deleting_a_user_releases_their_images(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    _add(org.api, [_image_part(data_url(png_bytes(color=(7, 7, 7))))], user_id="leaving")
    _add(org.api, [_image_part(data_url(png_bytes(color=(8, 8, 8))))], user_id="staying")
    leaving = ImageObject.objects.get(
        pk=MessageImage.objects.get(end_user__user_id="leaving").image_id
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert org.api.delete("/users/leaving").status_code in (200, 204)
    assert not ImageObject.objects.filter(pk=leaving.pk).exists()
    assert not _file_exists(leaving)
    assert ImageObject.objects.count() == 1


def test_an_uploaded_image_no_turn_named_yet_is_kept(
    org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    kept = image_create(org, data=png_bytes(color=(90, 90, 90)))
    _add(org.api, [_image_part(data_url(png_bytes(color=(91, 91, 91))))])
    with django_capture_on_commit_callbacks(execute=True):
        Message.objects.all().delete()
    assert list(ImageObject.objects.all()) == [kept]


def test_deleting_an_organization_deletes_its_images_and_files(
    org: TenantFixture, other_org: TenantFixture, django_capture_on_commit_callbacks
) -> None:
    data = png_bytes(color=(33, 33, 33))
    _add(org.api, [_image_part(data_url(data))])
    _add(other_org.api, [_image_part(data_url(data))])
    ours = ImageObject.objects.get(organization=org.organization)
    theirs = ImageObject.objects.get(organization=other_org.organization)
    with django_capture_on_commit_callbacks(execute=True):
        organization_delete(organization=org.organization)
    assert not ImageObject.objects.filter(pk=ours.pk).exists() and not _file_exists(ours)
    assert _file_exists(theirs)


@pytest.mark.parametrize(
    "key",
    [
        "../planted.png",
        "{planted}",
        "images/org_other/{sha[0]}{sha[1]}/{sha}.png",
        "images/{org}/../../planted.png",
    ],
    ids=["parent-path", "absolute", "another-organizations-key", "dot-dot-inside"],
)
def test_a_key_this_app_did_not_make_is_never_deleted(
    org: TenantFixture, django_capture_on_commit_callbacks, settings, tmp_path: Path, key: str
) -> None:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    planted = tmp_path / "planted.png"
    planted.write_bytes(b"keep me")
    _add(org.api, [_image_part(data_url(png_bytes(color=(66, 0, 66))))])
    image = ImageObject.objects.get()
    tampered = key.format(planted=planted, org=org.organization.pk, sha=image.sha256)
    ImageObject.objects.filter(pk=image.pk).update(storage_key=tampered)
    with django_capture_on_commit_callbacks(execute=True):
        Message.objects.all().delete()
    assert not ImageObject.objects.exists()
    assert planted.read_bytes() == b"keep me"


def test_a_turn_sending_an_image_while_it_is_released_stores_it_again(
    transactional_db: None,
) -> None:
    """A release deleting an image and a new turn sending the same bytes, at once: the turn
    waits for the release, stores the image again, and it is there, file and all."""
    owner = tenant_fixture("alice")
    url = data_url(png_bytes(color=(120, 0, 120)))
    assert _add(owner.api, [_image_part(url)], session_id="first").status_code == 202
    deleted, go = threading.Event(), threading.Event()
    answers: list[int] = []

    def release() -> None:
        try:
            with transaction.atomic():
                Message.objects.filter(session__session_id="first").delete()
                deleted.set()
                go.wait(10)
        finally:
            connection.close()

    def send() -> None:
        try:
            answers.append(_add(owner.api, [_image_part(url)], session_id="second").status_code)
        finally:
            connection.close()

    releasing = threading.Thread(target=release)
    releasing.start()
    assert deleted.wait(10)
    sending = threading.Thread(target=send)
    sending.start()
    time.sleep(0.5)  # the turn is waiting on the image row the release deletes
    assert not answers
    go.set()
    releasing.join(10)
    sending.join(10)

    assert answers == [202]
    image = ImageObject.objects.get()
    assert MessageImage.objects.get().image_id == image.pk
    assert _file_exists(image)
