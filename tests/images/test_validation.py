"""Image validation: what is accepted, what is refused (and how early), and what metadata
survives. Every image is drawn here with Pillow; none is checked in."""

from __future__ import annotations

import base64
import io
import random
import resource
import struct
import warnings
import zlib
from typing import Any

import pytest
from PIL import ExifTags, Image, ImageCms, ImageFile, ImageSequence, PngImagePlugin

from images import validation
from images.validation import (
    MAX_FRAMES,
    ImageInvalidError,
    data_url_decode,
    image_thumbnail,
    image_validate,
)

MAX_BYTES = 10 * 1024 * 1024
TOO_MANY_PIXELS = "The image is larger than 40 megapixels."
CORRUPT = "The image is truncated or corrupt."
UNSUPPORTED = "Only PNG, JPEG, WebP and GIF images are accepted."
SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
XMP = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF>where-i-live</rdf:RDF></x:xmpmeta>'


def picture(size: tuple[int, int] = (64, 48), mode: str = "RGB", seed: int = 0) -> Image.Image:
    """Noise, so that any change to the pixels shows."""
    channels = len(mode)
    noise = random.Random(seed).randbytes(size[0] * size[1] * channels)
    return Image.frombytes(mode, size, noise)


def encode(image: Image.Image, image_format: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, **params)
    return buffer.getvalue()


def frames_decode(data: bytes) -> list[bytes]:
    with Image.open(io.BytesIO(data)) as image:
        return [frame.convert("RGBA").tobytes() for frame in ImageSequence.Iterator(image)]


def exif_with_gps(orientation: int = 1) -> Image.Exif:
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "Phone"
    exif[ExifTags.Base.Orientation] = orientation
    exif[ExifTags.Base.DateTime] = "2024:05:01 12:00:00"
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(
        {ExifTags.GPS.GPSLatitudeRef: "N", ExifTags.GPS.GPSLatitude: (48.0, 51.0, 29.0)}
    )
    return exif


def refused(data: bytes, max_bytes: int = MAX_BYTES) -> str:
    with pytest.raises(ImageInvalidError) as caught:
        image_validate(data=data, max_bytes=max_bytes)
    return caught.value.reason


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))
        + kind
        + payload
        + struct.pack(">I", zlib.crc32(kind + payload))
    )


def png_build(width: int, height: int, idat: bytes, color_type: int = 6) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    chunks = [png_chunk(b"IHDR", header), png_chunk(b"IDAT", idat), png_chunk(b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


# The rest of a 1x1 frame after its position and size: flags announcing a two-colour local
# table, the table, and LZW data for one pixel.
GIF_FRAME_DATA = b"\x80\x00\x00\x00\xff\xff\xff\x02\x02\x44\x01\x00"


def gif_build(screen: tuple[int, int], frames: list[tuple[int, int]]) -> bytes:
    """A GIF of 1x1-pixel frames whose descriptors claim ``frames`` sizes."""
    parts = [b"GIF89a", struct.pack("<HHBBB", *screen, 0, 0, 0)]
    for width, height in frames:
        parts.append(b"," + struct.pack("<HHHH", 0, 0, width, height) + GIF_FRAME_DATA)
    return b"".join([*parts, b";"])


# --- accepted ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image_format", "params", "mime", "extension"),
    [
        ("PNG", {}, "image/png", "png"),
        ("JPEG", {"quality": 90}, "image/jpeg", "jpg"),
        ("WEBP", {"lossless": True}, "image/webp", "webp"),
        ("WEBP", {"quality": 80}, "image/webp", "webp"),
        ("GIF", {}, "image/gif", "gif"),
    ],
)
def test_each_format_is_accepted_with_its_pixels(
    image_format: str, params: dict[str, Any], mime: str, extension: str
) -> None:
    data = encode(picture(), image_format, **params)
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    assert (valid.mime, valid.extension, valid.width, valid.height) == (mime, extension, 64, 48)
    assert Image.open(io.BytesIO(valid.data)).format == image_format
    assert frames_decode(valid.data) == frames_decode(data)
    assert image_validate(data=data, max_bytes=MAX_BYTES).data == valid.data  # deterministic


@pytest.mark.parametrize(
    ("image_format", "params"),
    [("GIF", {}), ("WEBP", {"lossless": True}), ("PNG", {})],  # PNG: APNG
)
def test_animations_keep_their_frames_and_loop(image_format: str, params: dict[str, Any]) -> None:
    frames = [picture((40, 30), "RGB", seed) for seed in range(3)]
    data = encode(
        frames[0],
        image_format,
        save_all=True,
        append_images=frames[1:],
        duration=100,
        loop=2,
        **params,
    )
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    with Image.open(io.BytesIO(valid.data)) as image:
        assert (image.format, image.n_frames, image.info["loop"]) == (image_format, 3, 2)
    assert frames_decode(valid.data) == frames_decode(data)


def test_a_multi_picture_jpeg_keeps_only_its_first_picture() -> None:
    first, second = picture(seed=1), picture(seed=2)
    data = encode(first, "MPO", save_all=True, append_images=[second])
    assert Image.open(io.BytesIO(data)).format == "MPO"
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    assert valid.mime == "image/jpeg"
    with Image.open(io.BytesIO(valid.data)) as image:
        assert image.format == "JPEG"
        assert image.tobytes() == Image.open(io.BytesIO(data)).tobytes()
    assert len(valid.data) < len(data) * 0.6


# --- refused ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(encode(picture(), "BMP"), id="bmp"),
        pytest.param(encode(picture(), "TIFF"), id="tiff"),
        pytest.param(encode(picture((32, 32)), "ICO"), id="ico"),
        pytest.param(b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>', id="svg"),
        pytest.param(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n", id="pdf"),
        pytest.param(random.Random(3).randbytes(4096), id="random"),
        pytest.param(b"\x89PNG\r\n\x1a\n", id="png-signature-only"),
    ],
)
def test_other_formats_are_refused(data: bytes) -> None:
    assert refused(data) == UNSUPPORTED


def test_empty_and_oversize_images_are_refused() -> None:
    assert refused(b"") == "The image is empty."
    data = encode(picture(), "PNG")
    assert (
        refused(data, max_bytes=len(data) - 1) == f"The image is larger than {len(data) - 1} bytes."
    )
    assert image_validate(data=data, max_bytes=len(data)).width == 64


@pytest.fixture(scope="module")
def png_bomb() -> bytes:
    """A real 7000x7000 RGBA PNG of zeros: 196 MB decoded, under 1 MB stored, and below the
    size where Pillow itself would warn, so only this module's bound stands in its way."""
    compressor = zlib.compressobj(1)
    row = bytes(1 + 7000 * 4)
    idat = b"".join(compressor.compress(row) for _ in range(7000)) + compressor.flush()
    return png_build(7000, 7000, idat)


def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded(png_bomb: bytes) -> None:
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    assert refused(png_bomb) == TOO_MANY_PIXELS
    # Decoding would take 196 MB: the peak memory of the process must not have moved by half.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 100 * 1024


def test_pillows_own_bomb_checks_are_refused_as_too_large() -> None:
    tiny_idat = zlib.compress(bytes(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)  # -W error
        assert refused(png_build(10_000, 10_000, tiny_idat)) == TOO_MANY_PIXELS
    # Above twice Pillow's warning size it raises DecompressionBombError while opening.
    assert refused(png_build(30_000, 30_000, tiny_idat)) == TOO_MANY_PIXELS
    assert refused(gif_build((65_535, 65_535), [(1, 1)])) == TOO_MANY_PIXELS


def test_gif_frames_are_bounded_before_they_are_decoded() -> None:
    assert image_validate(data=gif_build((1, 1), [(1, 1), (1, 1)]), max_bytes=MAX_BYTES)
    # Pillow widens the canvas to fit a later frame, allocating as it seeks there.
    assert refused(gif_build((1, 1), [(1, 1), (8000, 8000)])) == TOO_MANY_PIXELS
    assert "frames" in refused(gif_build((1, 1), [(1, 1)] * (MAX_FRAMES + 1)))
    assert "megapixels in all its frames" in refused(gif_build((8000, 5000), [(1, 1)] * 6))


@pytest.mark.parametrize(
    ("image_format", "params"),
    [("PNG", {}), ("JPEG", {}), ("JPEG", {"progressive": True}), ("WEBP", {}), ("GIF", {})],
)
def test_truncated_images_are_refused(image_format: str, params: dict[str, Any]) -> None:
    data = encode(picture((128, 96)), image_format, **params)
    assert refused(data[: len(data) // 2]) == CORRUPT
    assert refused(data[:-2]) == CORRUPT


def test_a_png_whose_pixel_data_is_cut_is_refused() -> None:
    # Every chunk is whole (lengths and CRCs agree); only decoding finds the zlib stream cut.
    noise = random.Random(4)
    pixels = zlib.compress(b"".join(b"\x00" + noise.randbytes(64 * 4) for _ in range(48)))
    assert image_validate(data=png_build(64, 48, pixels), max_bytes=MAX_BYTES)
    assert refused(png_build(64, 48, pixels[: len(pixels) // 2])) == CORRUPT


def test_a_jpeg_with_a_bogus_huffman_table_is_refused() -> None:
    data = bytearray(encode(picture((128, 96)), "JPEG"))
    counts = data.index(b"\xff\xc4") + 5  # after marker, length and table class/id
    data[counts : counts + 16] = b"\xff" * 16  # 4080 codes where at most 256 fit
    assert refused(bytes(data)) == CORRUPT


# --- metadata ---------------------------------------------------------------------------------


def test_jpeg_metadata_is_stripped_and_pixels_kept() -> None:
    data = encode(
        picture(),
        "JPEG",
        exif=exif_with_gps(),
        comment=b"secret comment",
        xmp=XMP,
        icc_profile=SRGB,
    )
    iptc = b"Photoshop 3.0\x008BIM\x04\x04\x00\x00\x00\x00\x00\x08\x1c\x02\x78\x00\x04home"
    data = data[:2] + b"\xff\xed" + struct.pack(">H", len(iptc) + 2) + iptc + data[2:]
    data += b"vendor trailer"
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    for secret in (b"Exif", b"Phone", b"secret comment", b"where-i-live", b"8BIM", b"trailer"):
        assert secret not in valid.data
    with Image.open(io.BytesIO(valid.data)) as image:
        assert not image.getexif()
        assert {"exif", "comment", "xmp", "photoshop"}.isdisjoint(image.info)
        assert image.info["icc_profile"] == SRGB
        assert image.tobytes() == Image.open(io.BytesIO(data)).tobytes()


def test_png_text_and_exif_chunks_are_stripped_and_pixels_kept() -> None:
    chunks = PngImagePlugin.PngInfo()
    chunks.add_text("Author", "someone")
    chunks.add_text("Comment", "compressed secret", zip=True)
    chunks.add_itxt("Description", "international secret", lang="en")
    chunks.add(b"tIME", b"\x07\xe8\x05\x01\x0c\x00\x00")
    data = encode(
        picture(mode="RGBA"), "PNG", pnginfo=chunks, exif=exif_with_gps(), icc_profile=SRGB
    )
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    for kind in (b"tEXt", b"zTXt", b"iTXt", b"eXIf", b"tIME"):
        assert kind in data
        assert kind not in valid.data
    with Image.open(io.BytesIO(valid.data)) as image:
        assert not image.getexif()
        assert not {"Author", "Comment", "Description"} & set(image.info)
        assert image.info["icc_profile"] == SRGB
    assert frames_decode(valid.data) == frames_decode(data)


def test_webp_exif_and_xmp_are_stripped_and_pixels_kept() -> None:
    data = encode(picture(), "WEBP", lossless=True, exif=exif_with_gps(), xmp=XMP, icc_profile=SRGB)
    assert b"EXIF" in data
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    assert b"EXIF" not in valid.data and b"XMP " not in valid.data
    assert valid.data[20] & 0x0C == 0  # the VP8X flags no longer announce EXIF or XMP
    assert int.from_bytes(valid.data[4:8], "little") == len(valid.data) - 8
    with Image.open(io.BytesIO(valid.data)) as image:
        assert {"exif", "xmp"}.isdisjoint(image.info)
        assert image.info["icc_profile"] == SRGB
    assert frames_decode(valid.data) == frames_decode(data)


def test_gif_comments_and_xmp_are_stripped_and_the_animation_kept() -> None:
    frames = [picture((40, 30), "RGB", seed).convert("P") for seed in range(3)]
    data = encode(
        frames[0], "GIF", save_all=True, append_images=frames[1:], loop=0, comment=b"secret"
    )
    # XMP's own trick: raw bytes, then a 258-byte "magic trailer" any sub-block walk ends in.
    xmp_block = b"!\xff\x0bXMP DataXMP" + XMP + b"\x01" + bytes(range(255, -1, -1)) + b"\x00"
    data = data[:-1] + xmp_block + b";"
    assert Image.open(io.BytesIO(data)).info.get("comment") == b"secret"
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    assert b"secret" not in valid.data and b"XMP DataXMP" not in valid.data
    with Image.open(io.BytesIO(valid.data)) as image:
        assert (image.n_frames, image.info["loop"]) == (3, 0)
        assert "comment" not in image.info
    assert frames_decode(valid.data) == frames_decode(data)


# --- orientation ------------------------------------------------------------------------------


def test_a_rotated_jpeg_is_turned_upright_without_its_exif() -> None:
    data = encode(
        picture((64, 48)),
        "JPEG",
        quality=95,
        exif=exif_with_gps(orientation=6),  # 6: turn 90 degrees clockwise to display
        comment=b"secret comment",
        xmp=XMP,
        icc_profile=SRGB,
    )
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    assert (valid.width, valid.height) == (48, 64)
    assert image_validate(data=data, max_bytes=MAX_BYTES).data == valid.data
    assert b"secret comment" not in valid.data and b"where-i-live" not in valid.data
    with Image.open(io.BytesIO(valid.data)) as image:
        assert image.size == (48, 64) and not image.getexif()
        assert image.info["icc_profile"] == SRGB
        upright = Image.open(io.BytesIO(data)).transpose(Image.Transpose.ROTATE_270).tobytes()
        difference = sum(abs(a - b) for a, b in zip(image.tobytes(), upright, strict=True))
        assert difference / len(upright) < 8  # re-encoded at quality 95, and turned the right way


def test_an_upright_jpeg_is_not_re_encoded() -> None:
    data = encode(picture(), "JPEG", exif=exif_with_gps(orientation=1))
    valid = image_validate(data=data, max_bytes=MAX_BYTES)
    scan = data[data.index(b"\xff\xda") :]
    assert valid.data.endswith(scan)  # the scans, byte for byte


# --- defences ---------------------------------------------------------------------------------


def test_a_stripping_bug_refuses_the_image_rather_than_storing_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(validation._STRIPPERS, "PNG", lambda data: data.replace(b"IDAT", b"iDAT"))
    assert refused(encode(picture(), "PNG")) == "The image could not be cleaned of its metadata."
    assert "no longer reads like its original" in caplog.text


def test_pillow_set_to_accept_truncated_images_fails_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError):
        image_validate(data=encode(picture(), "PNG"), max_bytes=MAX_BYTES)


# --- data URLs and thumbnails -----------------------------------------------------------------


def test_a_data_url_is_decoded() -> None:
    data = encode(picture(), "PNG")
    url = "DATA:image/png;name=a.png;base64," + base64.b64encode(data).decode()
    assert data_url_decode(url=url, max_bytes=MAX_BYTES) == data


@pytest.mark.parametrize(
    "url",
    [
        "data:text/plain;base64,aGVsbG8=",
        "data:image/png,raw-bytes",
        "data:image/svg+xml;utf8,<svg/>",
        "https://example.com/a.png",
        "data:image/png;base64",
    ],
)
def test_a_data_url_that_is_not_a_base64_image_is_refused(url: str) -> None:
    with pytest.raises(ImageInvalidError, match="data:image/<type>;base64"):
        data_url_decode(url=url, max_bytes=MAX_BYTES)


@pytest.mark.parametrize("payload", ["aGVsbG8", "aGVs bG8=", "aGVs\nbG8=", "aGVs_G8=", "é"])
def test_a_data_url_with_bad_base64_is_refused(payload: str) -> None:
    with pytest.raises(ImageInvalidError, match="not valid base64"):
        data_url_decode(url=f"data:image/png;base64,{payload}", max_bytes=MAX_BYTES)


def test_a_data_url_too_large_is_refused_before_decoding() -> None:
    # Not base64 at all: had it been decoded, the refusal would say so.
    url = "data:image/png;base64," + "!" * (4 * 1024 // 3 + 4)
    with pytest.raises(ImageInvalidError, match="larger than 1024 bytes"):
        data_url_decode(url=url, max_bytes=1024)
    exactly = "data:image/png;base64," + base64.b64encode(bytes(1025)).decode()
    with pytest.raises(ImageInvalidError, match="larger than 1024 bytes"):
        data_url_decode(url=exactly, max_bytes=1024)
    assert len(data_url_decode(url=exactly, max_bytes=1025)) == 1025


@pytest.mark.parametrize(
    ("source", "thumbnail_format"),
    [
        (encode(picture((300, 200)), "JPEG"), "JPEG"),
        (encode(picture((200, 300), "RGBA"), "PNG"), "PNG"),
        (
            encode(
                picture((300, 200)).convert("P"),
                "GIF",
                save_all=True,
                append_images=[picture((300, 200)).convert("P")],
            ),
            "JPEG",
        ),
    ],
)
def test_a_thumbnail_is_small(source: bytes, thumbnail_format: str) -> None:
    with Image.open(io.BytesIO(image_thumbnail(data=source))) as thumbnail:
        assert thumbnail.format == thumbnail_format
        assert max(thumbnail.size) == 128
        assert thumbnail.mode == ("RGBA" if thumbnail_format == "PNG" else "RGB")
