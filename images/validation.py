"""Image bytes checked and cleaned before anything is stored.

Uploads, data: URLs and fetched images all pass ``image_validate``. The format is what Pillow
reads from the bytes (PNG, JPEG, WebP or GIF), never a claimed type or extension. The size is
bounded from the header before a pixel is decoded, every frame is then decoded once so truncated
or corrupt files are refused, and the metadata (EXIF with its GPS position, XMP, IPTC, comments,
text chunks, timestamps) is cut out at the byte level: the pixels stored are bit for bit the
pixels sent, and the same input always gives the same output, which the content-addressed store
dedupes on. The cleaned bytes are read back and fully decoded by Pillow before they are returned,
so a bug here refuses an image rather than storing a broken one.

Kept per format (everything else is dropped):
- JPEG: every non-APPn segment and the entropy-coded scans, plus APP0 ``JFIF``, APP2
  ``ICC_PROFILE`` (colour) and APP14 ``Adobe`` (its colour transform). Data after EOI goes too:
  the second picture of an MPO, HDR gain maps and vendor trailers.
- PNG: the critical chunks, colour and transparency (tRNS cHRM gAMA iCCP sBIT sRGB cICP mDCv
  cLLI), pHYs, and the APNG chunks (acTL fcTL fdAT).
- WebP: the image, alpha, animation and ICCP chunks; EXIF and XMP go and their VP8X flags are
  cleared.
- GIF: images, their graphic control extensions and the NETSCAPE2.0 / ANIMEXTS1.0 loop block;
  comments, plain-text blocks and other application blocks (XMP lives in one) go.

Orientation: a JPEG whose EXIF Orientation is not 1 would show rotated once its EXIF is gone, so
it is turned upright and re-encoded (quality 95, the original's chroma subsampling and ICC
profile), the one case where pixels change. Other formats keep their pixels as stored; browsers
do not agree on honouring EXIF orientation outside JPEG, so none is applied.

Pillow's globals are read, never set: ``MAX_IMAGE_PIXELS`` stays as it is (our bound is lower
and checked first; Pillow's own bomb error or warning above it is reported as too large), and
``LOAD_TRUNCATED_IMAGES`` must be False, or ``image_validate`` fails loudly.
"""

from __future__ import annotations

import base64
import io
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from PIL import ExifTags, Image, ImageFile, ImageOps, ImageSequence, JpegImagePlugin

from mirix_site.common.errors import InvalidInputError

logger = logging.getLogger(__name__)

MAX_PIXELS = 40_000_000
# Animations: every frame is decoded onto the whole canvas, so the bound is on frames x canvas
# pixels. 200 MP is five frames at MAX_PIXELS, ~650 frames of 640x480 or ~100 of 1080p, and
# decodes in about a second at worst (10 MB of animated WebP noise).
MAX_FRAMES = 1_000
MAX_ANIMATION_PIXELS = 200_000_000

_KINDS = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    "WEBP": ("image/webp", "webp"),
    "GIF": ("image/gif", "gif"),
}
_UNSUPPORTED = "Only PNG, JPEG, WebP and GIF images are accepted."
_CORRUPT = "The image is truncated or corrupt."
_TOO_MANY_PIXELS = f"The image is larger than {MAX_PIXELS // 1_000_000} megapixels."


class ImageInvalidError(InvalidInputError):
    """An image that cannot be stored; ``reason`` is a sentence safe to show the caller. Left
    to the API, it is the 422 of the upload's ``file`` field; a caller that took the image from
    elsewhere (a message's URL) reports the reason under its own field."""

    def __init__(self, reason: str) -> None:
        super().__init__({"file": [reason]})
        self.reason = reason


@dataclass(frozen=True)
class ValidImage:
    """Cleaned image bytes, ready to store, and what they are."""

    data: bytes
    mime: str
    extension: str
    width: int
    height: int


def _size_check(*, width: int, height: int, frames: int) -> None:
    if width < 1 or height < 1:
        raise ImageInvalidError(_CORRUPT)
    if width * height > MAX_PIXELS:
        raise ImageInvalidError(_TOO_MANY_PIXELS)
    if frames > MAX_FRAMES:
        raise ImageInvalidError(f"An animation may have at most {MAX_FRAMES} frames.")
    if frames * width * height > MAX_ANIMATION_PIXELS:
        raise ImageInvalidError(
            f"An animation may hold at most {MAX_ANIMATION_PIXELS // 1_000_000} megapixels "
            "in all its frames together."
        )


# --- JPEG: a segment walk ----------------------------------------------------------------------

# The end of a scan: a marker, i.e. 0xFF followed by neither a stuffed 0x00, a restart marker
# (0xD0-0xD7, part of the scan) nor a fill 0xFF.
_JPEG_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_JPEG_APP_KEPT = {0xE0: b"JFIF\x00", 0xE2: b"ICC_PROFILE\x00", 0xEE: b"Adobe"}


def _jpeg_strip(data: bytes) -> bytes:
    parts, position = [data[:2]], 2
    while True:
        if len(data) < position + 2 or data[position] != 0xFF:
            raise ImageInvalidError(_CORRUPT)
        marker = data[position + 1]
        if marker == 0xFF:
            position += 1
            continue
        if marker == 0xD9:
            parts.append(b"\xff\xd9")
            return b"".join(parts)
        end = position + 2 + int.from_bytes(data[position + 2 : position + 4], "big")
        if end < position + 4 or end > len(data):
            raise ImageInvalidError(_CORRUPT)
        segment = data[position:end]
        is_metadata = 0xE0 <= marker <= 0xEF or marker == 0xFE
        kept_prefix = _JPEG_APP_KEPT.get(marker)
        if not is_metadata or (kept_prefix and segment[4:].startswith(kept_prefix)):
            parts.append(segment)
        position = end
        if marker == 0xDA:
            scan_end = _JPEG_SCAN_END.search(data, position)
            if scan_end is None:
                raise ImageInvalidError(_CORRUPT)
            parts.append(data[position : scan_end.start()])
            position = scan_end.start()


def _jpeg_orientation(image: Image.Image) -> int:
    """The EXIF Orientation, 1 (as stored) when missing, unreadable or out of range."""
    try:
        orientation = image.getexif().get(ExifTags.Base.Orientation, 1)
    except Exception:  # a malformed EXIF block must not refuse the picture it is cut from
        return 1
    return orientation if orientation in range(1, 9) else 1


def _jpeg_upright(image: Image.Image) -> bytes:
    try:
        upright = ImageOps.exif_transpose(image)
        # The copy inherits info, and Pillow's JPEG writer would write its comment back.
        upright.info = {}
        buffer = io.BytesIO()
        upright.save(
            buffer,
            format="JPEG",
            quality=95,
            subsampling=JpegImagePlugin.get_sampling(image),  # -1 (not 3 channels): default
            icc_profile=image.info.get("icc_profile"),
        )
    except Exception as exc:
        raise ImageInvalidError(_CORRUPT) from exc
    return buffer.getvalue()


# --- PNG: a chunk walk ------------------------------------------------------------------------

_PNG_KEPT = {
    *(b"IHDR", b"PLTE", b"IDAT", b"IEND"),
    *(b"tRNS", b"cHRM", b"gAMA", b"iCCP", b"sBIT", b"sRGB", b"cICP", b"mDCv", b"cLLI"),
    *(b"pHYs", b"acTL", b"fcTL", b"fdAT"),
}


def _png_strip(data: bytes) -> bytes:
    parts, position = [data[:8]], 8
    while True:
        if len(data) < position + 12:
            raise ImageInvalidError(_CORRUPT)
        kind = data[position + 4 : position + 8]
        end = position + 12 + int.from_bytes(data[position : position + 4], "big")
        if end > len(data):
            raise ImageInvalidError(_CORRUPT)
        if kind in _PNG_KEPT:
            parts.append(data[position:end])
        position = end
        if kind == b"IEND":
            return b"".join(parts)


# --- WebP: a RIFF walk ------------------------------------------------------------------------

_WEBP_KEPT = {b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"ANIM", b"ANMF", b"ICCP"}
_VP8X_EXIF_AND_XMP_FLAGS = 0x08 | 0x04


def _webp_strip(data: bytes) -> bytes:
    riff_end = 8 + int.from_bytes(data[4:8], "little")
    if riff_end > len(data):
        raise ImageInvalidError(_CORRUPT)
    chunks, position = [], 12
    while position < riff_end:
        kind = data[position : position + 4]
        size = int.from_bytes(data[position + 4 : position + 8], "little")
        end = position + 8 + size + (size & 1)  # payloads are padded to an even length
        if position + 8 > riff_end or end > riff_end:
            raise ImageInvalidError(_CORRUPT)
        chunk = data[position:end]
        if kind == b"VP8X" and size >= 1:
            flags = chunk[8] & ~_VP8X_EXIF_AND_XMP_FLAGS
            chunk = chunk[:8] + bytes([flags]) + chunk[9:]
        if kind in _WEBP_KEPT:
            chunks.append(chunk)
        position = end
    body = b"WEBP" + b"".join(chunks)
    return b"RIFF" + len(body).to_bytes(4, "little") + body


# --- GIF: a block walk ------------------------------------------------------------------------

_GIF_LOOP_BLOCKS = (b"\x0bNETSCAPE2.0", b"\x0bANIMEXTS1.0")


def _gif_sub_blocks_end(data: bytes, position: int) -> int:
    while True:
        if position >= len(data):
            raise ImageInvalidError(_CORRUPT)
        size = data[position]
        position += 1 + size
        if size == 0:
            return position


def _gif_color_table_size(flags: int) -> int:
    return 3 << ((flags & 7) + 1) if flags & 0x80 else 0


def _gif_strip(data: bytes) -> bytes:
    """Also bounds the canvas: Pillow widens it to fit any frame that overflows the screen,
    allocating as it seeks, before ``image_validate`` could look at the frame."""
    if len(data) < 13:
        raise ImageInvalidError(_CORRUPT)
    width, height = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    position = 13 + _gif_color_table_size(data[10])
    parts, frames = [data[:position]], 0
    while True:
        introducer = data[position : position + 1]
        if introducer == b";":
            parts.append(b";")
            break
        if introducer == b",":
            if len(data) < position + 11:
                raise ImageInvalidError(_CORRUPT)
            left, top, frame_width, frame_height = (
                int.from_bytes(data[position + offset : position + offset + 2], "little")
                for offset in (1, 3, 5, 7)
            )
            width, height = max(width, left + frame_width), max(height, top + frame_height)
            # Then the local colour table and the LZW minimum code size.
            data_start = position + 10 + _gif_color_table_size(data[position + 9]) + 1
            end = _gif_sub_blocks_end(data, data_start)
            parts.append(data[position:end])
            frames += 1
        elif introducer == b"!":
            label = data[position + 1 : position + 2]
            end = _gif_sub_blocks_end(data, position + 2)
            if label == b"\xf9" or (
                label == b"\xff" and data[position + 2 : position + 14] in _GIF_LOOP_BLOCKS
            ):
                parts.append(data[position:end])
        elif not introducer:
            raise ImageInvalidError(_CORRUPT)
        else:
            end = position + 1  # a stray byte between blocks: Pillow and browsers skip them
        position = end
    _size_check(width=width, height=height, frames=frames)
    return b"".join(parts)


_STRIPPERS: dict[str, Callable[[bytes], bytes]] = {
    "PNG": _png_strip,
    "JPEG": _jpeg_strip,
    "WEBP": _webp_strip,
    "GIF": _gif_strip,
}


# --- Pillow ------------------------------------------------------------------------------------


def _image_open(data: bytes, *, formats: tuple[str, ...] = tuple(_KINDS)) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data), formats=formats)
    except Image.UnidentifiedImageError as exc:
        raise ImageInvalidError(_UNSUPPORTED) from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # The warning only arrives as an exception when warnings are errors (-W error).
        raise ImageInvalidError(_TOO_MANY_PIXELS) from exc
    except Exception as exc:  # crafted headers raise anything from SyntaxError to struct.error
        raise ImageInvalidError(_CORRUPT) from exc


def _frames_count(image: Image.Image) -> int:
    try:
        return getattr(image, "n_frames", 1)  # a GIF's count walks its blocks, decoding nothing
    except Exception as exc:
        raise ImageInvalidError(_CORRUPT) from exc


def _frames_load(image: Image.Image, *, frames: int) -> None:
    """Decodes the first ``frames`` frames, refusing a file that holds fewer."""
    loaded = 0
    try:
        for frame in ImageSequence.Iterator(image):
            frame.load()
            loaded += 1
            if loaded == frames:
                break
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageInvalidError(_TOO_MANY_PIXELS) from exc
    except Exception as exc:  # truncation is an OSError, bad data anything from ValueError on
        raise ImageInvalidError(_CORRUPT) from exc
    if loaded != frames:
        raise ImageInvalidError(_CORRUPT)


def _cleaned_reads_back(cleaned: bytes, *, kind: str, size: tuple[int, int], frames: int) -> bool:
    try:
        with _image_open(cleaned, formats=(kind,)) as image:
            same = image.format == kind and image.size == size
            same = same and (kind == "JPEG" or getattr(image, "n_frames", 1) == frames)
            _frames_load(image, frames=frames)
    except ImageInvalidError:
        return False
    return same


def image_validate(*, data: bytes, max_bytes: int) -> ValidImage:
    """The image in ``data``, checked and stripped of its metadata; ``ImageInvalidError`` if it
    cannot be stored.

    Only the cleaned bytes are decoded when all goes well: they hold the input's image data
    verbatim, so a truncated or corrupt input fails there. The input itself is decoded only to
    turn a JPEG upright, or to tell whose fault a failure was.
    """
    if not data:
        raise ImageInvalidError("The image is empty.")
    if len(data) > max_bytes:
        raise ImageInvalidError(f"The image is larger than {max_bytes} bytes.")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # Someone in this process made Pillow accept half-decoded files: refusing every image
        # loudly is better than storing truncated ones quietly.
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES must stay False.")
    with _image_open(data) as image:
        # A JPEG with a multi-picture index opens as MPO; only its first picture is kept.
        kind = "JPEG" if image.format == "MPO" else str(image.format)
        size = image.size
        frames = 1 if kind == "JPEG" else _frames_count(image)
        _size_check(width=size[0], height=size[1], frames=frames)
        cleaned = _STRIPPERS[kind](data)
        orientation = _jpeg_orientation(image) if kind == "JPEG" else 1
        if orientation != 1:
            _frames_load(image, frames=1)
            cleaned = _jpeg_strip(_jpeg_upright(image))
            if orientation >= 5:  # the transposing and quarter-turn orientations
                size = size[1], size[0]
    if not _cleaned_reads_back(cleaned, kind=kind, size=size, frames=frames):
        with _image_open(data) as image:
            _frames_load(image, frames=frames)  # refuses an input that is itself broken
        logger.error("A cleaned %s image no longer reads like its original.", kind)
        raise ImageInvalidError("The image could not be cleaned of its metadata.")
    mime, extension = _KINDS[kind]
    return ValidImage(data=cleaned, mime=mime, extension=extension, width=size[0], height=size[1])


_DATA_URL_HEADER = re.compile(
    r"data:image/[a-z0-9.+-]{1,50}(;[a-z0-9=.+-]{1,30}){0,4};base64", re.IGNORECASE
)


def data_url_decode(*, url: str, max_bytes: int) -> bytes:
    """The bytes of a ``data:image/<type>[;params];base64,<payload>`` URL.

    The payload must be strict base64: padded, no whitespace or line breaks (nothing puts them
    in a JSON string), no URL-safe alphabet. The media type is not trusted; ``image_validate``
    reads the format from the bytes.
    """
    header, comma, payload = url.partition(",")
    if not comma or not _DATA_URL_HEADER.fullmatch(header):
        raise ImageInvalidError("A data URL must look like data:image/<type>;base64,<payload>.")
    # Four characters carry three bytes: a payload too long is refused before it is decoded.
    if len(payload) > 4 * -(-max_bytes // 3):
        raise ImageInvalidError(f"The image is larger than {max_bytes} bytes.")
    try:
        data = base64.b64decode(payload, validate=True)
    except ValueError as exc:  # binascii.Error, or non-ASCII characters
        raise ImageInvalidError("The data URL's payload is not valid base64.") from exc
    if not data:
        raise ImageInvalidError("The image is empty.")
    if len(data) > max_bytes:
        raise ImageInvalidError(f"The image is larger than {max_bytes} bytes.")
    return data


def image_thumbnail(*, data: bytes, size: int = 128) -> bytes:
    """The first frame, at most ``size`` pixels a side, for the admin: PNG when it has
    transparency, JPEG otherwise."""
    with _image_open(data) as image:
        _size_check(width=image.width, height=image.height, frames=1)
        try:
            image.draft("RGB", (size, size))  # JPEG: decode straight at a reduced scale
            frame = image.convert("RGBA" if image.has_transparency_data else "RGB")
            frame.thumbnail((size, size))
            buffer = io.BytesIO()
            if frame.mode == "RGBA":
                frame.save(buffer, format="PNG")
            else:
                frame.save(buffer, format="JPEG", quality=85)
        except Exception as exc:
            raise ImageInvalidError(_CORRUPT) from exc
    return buffer.getvalue()
