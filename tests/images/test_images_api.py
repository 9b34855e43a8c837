"""POST /images and GET /images/{sha256}: what a caller uploads is validated, stripped of its
metadata, stored once per organization, and readable by that organization alone."""

from __future__ import annotations

import hashlib
import io
import random
import struct
import zlib

import pytest
from django.core.files.storage import storages
from PIL import Image

from accounts.services import client_read_scopes_set
from images.models import ImageFetch, ImageObject
from tests.factories import TenantFixture, data_url, png_bytes

NOT_FOUND = {"detail": "Not found.", "code": "not_found"}


def _upload(api, data: bytes, name: str = "picture.png", mime: str = "image/png"):
    upload = io.BytesIO(data)
    upload.name = name
    return api.post("/images", {"file": upload}, format="multipart")


def _jpeg_with_gps() -> bytes:
    exif = Image.Exif()
    exif[0x010F] = "CameraMaker"  # Make
    exif[0x8825] = {2: (48.0, 51.0, 24.0), 1: "N"}  # GPS IFD: latitude
    buffer = io.BytesIO()
    Image.new("RGB", (16, 12), (10, 120, 200)).save(
        buffer, format="JPEG", exif=exif, comment=b"taken at home"
    )
    return buffer.getvalue()


def _png_bomb(width: int = 30_000, height: int = 30_000) -> bytes:
    """A real, small PNG whose header claims 900 megapixels of zeros."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grey
    row = b"\x00" * (1 + width // 8)
    compressor = zlib.compressobj(9)
    pixels = b"".join(compressor.compress(row) for _ in range(200)) + compressor.flush()
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def test_an_upload_is_stored_and_downloaded(org: TenantFixture) -> None:
    response = _upload(org.api, png_bytes(size=(20, 10)))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["mime"] == "image/png" and (body["width"], body["height"]) == (20, 10)
    assert body["id"] == body["sha256"] and body["url"] == f"/images/{body['sha256']}"

    download = org.api.get(body["url"])
    assert download.status_code == 200
    assert download["Content-Type"] == "image/png"
    assert download["X-Content-Type-Options"] == "nosniff"
    assert hashlib.sha256(download.content).hexdigest() == body["sha256"]
    assert Image.open(io.BytesIO(download.content)).size == (20, 10)
    image = ImageObject.objects.get(sha256=body["sha256"])
    assert image.organization == org.organization and image.created_by == org.client
    assert image.storage_key == (
        f"images/{org.organization.pk}/{body['sha256'][:2]}/{body['sha256']}.png"
    )
    assert storages["default"].exists(image.storage_key)


def test_a_data_url_is_stored_like_an_upload(org: TenantFixture) -> None:
    data = png_bytes(color=(9, 9, 9))
    by_url = org.api.post("/images", {"url": data_url(data)}, format="json")
    by_file = _upload(org.api, data)
    assert by_url.status_code == by_file.status_code == 201
    assert by_url.json()["sha256"] == by_file.json()["sha256"]
    assert ImageObject.objects.filter(organization=org.organization).count() == 1


def test_a_repeated_upload_tells_no_time_of_another_clients(org: TenantFixture) -> None:
    """An image is its organization's; when another client, whose rows this one does not read,
    stored the same bytes first, the answer does not say when."""
    data = png_bytes(color=(12, 34, 56))
    first = _upload(org.api, data).json()
    assert first["created_at"] is not None
    second = org.another_client("second")
    again = _upload(second.api, data)
    assert again.status_code == 201
    assert again.json()["sha256"] == first["sha256"] and again.json()["created_at"] is None
    client_read_scopes_set(client=second.client, scopes=[org.client])
    assert _upload(second.api, data).json()["created_at"] == first["created_at"]


def test_the_same_bytes_in_two_organizations_are_two_objects(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    data = png_bytes(color=(50, 60, 70))
    ours = _upload(org.api, data).json()
    theirs = _upload(other_org.api, data).json()
    assert ours["sha256"] == theirs["sha256"]
    images = ImageObject.objects.filter(sha256=ours["sha256"])
    assert {image.organization_id for image in images} == {
        org.organization.pk,
        other_org.organization.pk,
    }
    assert len({image.storage_key for image in images}) == 2


def test_another_organizations_image_answers_as_a_missing_one(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    theirs = _upload(other_org.api, png_bytes(color=(1, 1, 1))).json()
    response = org.api.get(f"/images/{theirs['sha256']}")
    missing = org.api.get(f"/images/{'0' * 64}")
    assert response.status_code == missing.status_code == 404
    assert response.json() == missing.json() == NOT_FOUND


def test_metadata_is_stripped(org: TenantFixture) -> None:
    sent = _jpeg_with_gps()
    assert b"Exif" in sent and b"taken at home" in sent
    body = _upload(org.api, sent, name="photo.jpg", mime="image/jpeg").json()
    stored = org.api.get(body["url"]).content
    assert b"Exif" not in stored and b"CameraMaker" not in stored
    assert b"taken at home" not in stored
    image = Image.open(io.BytesIO(stored))
    assert not image.getexif() and image.size == (16, 12)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_png_bomb(), "pixels"),
        (b"<html><body>not an image</body></html>", "PNG, JPEG, WebP and GIF"),
        (png_bytes(size=(64, 64))[:-40], "truncated"),
        (b"BM" + b"\x00" * 64, "PNG, JPEG, WebP and GIF"),
    ],
    ids=["decompression-bomb", "html", "truncated", "bmp"],
)
def test_bad_images_are_refused_and_nothing_is_stored(
    org: TenantFixture, data: bytes, reason: str
) -> None:
    response = _upload(org.api, data)
    assert response.status_code == 422, response.content
    assert reason in response.json()["fields"]["file"][0]
    assert not ImageObject.objects.exists()
    as_url = org.api.post("/images", {"url": data_url(data)}, format="json")
    assert as_url.status_code == 422
    assert not ImageObject.objects.exists()


def test_an_oversize_upload_is_refused(org: TenantFixture, settings) -> None:
    settings.IMAGE_MAX_BYTES = 4096
    noise = Image.frombytes("RGB", (64, 64), random.Random(7).randbytes(64 * 64 * 3))
    buffer = io.BytesIO()
    noise.save(buffer, format="PNG")
    assert len(buffer.getvalue()) > 4096
    assert _upload(org.api, buffer.getvalue()).status_code == 413
    as_url = org.api.post("/images", {"url": data_url(buffer.getvalue())}, format="json")
    assert as_url.status_code == 422
    assert not ImageObject.objects.exists()


def test_an_upload_without_a_file_is_refused(org: TenantFixture) -> None:
    response = org.api.post("/images", {"other": "x"}, format="multipart")
    assert response.status_code == 422
    assert "file" in response.json()["fields"]


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "FILE:///etc/hostname",
        "ftp://example.com/cat.png",
        "gopher://example.com/",
        "http://127.0.0.1/cat.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/cat.png",
        "http://2130706433/cat.png",
        "data:text/html;base64,PGgxPmhpPC9oMT4=",
    ],
)
def test_urls_that_cannot_be_fetched_safely_are_refused_in_the_request(
    org: TenantFixture, url: str
) -> None:
    response = org.api.post("/images", {"url": url}, format="json")
    assert response.status_code == 422, response.content
    assert not ImageFetch.objects.exists() and not ImageObject.objects.exists()


def test_a_remote_url_is_fetched_later_not_in_the_request(org: TenantFixture) -> None:
    response = org.api.post("/images", {"url": "https://images.example/cat.png"}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "pending" and body["image"] is None
    fetch = org.api.get(f"/images/fetches/{body['id']}")
    assert fetch.status_code == 200 and fetch.json()["url"] == "https://images.example/cat.png"


def test_another_clients_fetch_is_not_found(org: TenantFixture) -> None:
    fetch_id = org.api.post(
        "/images", {"url": "https://images.example/cat.png"}, format="json"
    ).json()["id"]
    second = org.another_client("second")
    assert second.api.get(f"/images/fetches/{fetch_id}").json() == NOT_FOUND
