"""The rules between fields that OpenAPI 3.0 cannot state, for the schemathesis run of
``tests/test_schema.py``: a case the schema allows but one of these refuses is not a valid
request, so it is not generated as one. Each rule is stated in the operation's description and
enforced by the server in the serializer named beside it; a rule of one field belongs in the
schema, never here.

Loaded by the schemathesis CLI (``hooks`` in ``tests/schemathesis.toml``), outside Django.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import schemathesis
from schemathesis import Case, GenerationMode, HookContext

from images.fetch import url_check
from images.validation import ImageInvalidError, data_url_decode, image_validate

# memory.types' searchable kinds and their text fields (SearchParamsSerializer's search_field
# names one of the searched type's), with the names the MIRIX client uses for the vault.
TEXT_FIELDS = {
    "episodic": {"summary", "details"},
    "semantic": {"name", "summary", "details"},
    "procedural": {"summary", "steps"},
    "resource": {"title", "summary", "content"},
    "knowledge_vault": {"caption"},
    "knowledge": {"caption"},
    "knowledge_vault_memory": {"caption"},
}
NO_SEARCH_FIELD = {None, "null", "None", ""}


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _dates_in_order(values: dict[str, Any]) -> bool:
    """start_date is not after end_date (``_dates_check``)."""
    start, end = _moment(values.get("start_date")), _moment(values.get("end_date"))
    return start is None or end is None or start <= end


def _search(case: Case) -> bool:
    """SearchParamsSerializer: search_field names a field of the one memory_type searched."""
    query = case.query or {}
    field = query.get("search_field")
    memory_type = query.get("memory_type", "all")
    return _dates_in_order(query) and (
        field in NO_SEARCH_FIELD or field in TEXT_FIELDS.get(memory_type, set())
    )


def _image_url_real(url: Any) -> bool:
    """An image URL the schema's pattern allows is a real one (``images.sources``): a data:
    URL holds a PNG, JPEG, WebP or GIF within the limits; an http(s) URL has a host that may be
    fetched (not an internal address in any spelling)."""
    if not isinstance(url, str):
        return True
    if url[:5].lower() == "data:":
        try:
            image_validate(data=data_url_decode(url=url, max_bytes=10**7), max_bytes=10**7)
        except ImageInvalidError:
            return False
        return True
    return url_check(url=url) is None


def _images_real(messages: Any) -> bool:
    """Every image of the turns is real (``_image_url_real``). Named images (``image_id``)
    that the organization lacks answer 404, which the checks accept."""
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                if not _image_url_real(image.get("url") if isinstance(image, dict) else image):
                    return False
    return True


def _image_upload(case: Case) -> bool:
    """ImageUploadApi: an uploaded file is an image (``images.validation``); a URL, a real
    image's (``_image_url_real``)."""
    body = case.body if isinstance(case.body, dict) else {}
    upload = body.get("file")
    if isinstance(upload, str | bytes):
        data = upload.encode() if isinstance(upload, str) else upload
        try:
            image_validate(data=data, max_bytes=10**7)
        except ImageInvalidError:
            return False
    return _image_url_real(body.get("url"))


def _has_text_or_image(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    parts = (
        [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []
    )
    texts = [part.get("text") for part in parts if part.get("type") == "text"]
    if "\n".join(text for text in texts if text).strip():
        return True
    return any(part.get("type") in {"image_url", "image"} for part in parts)


def _conversation(case: Case) -> bool:
    """RetrieveConversationInputSerializer: some message holds text or an image."""
    body = case.body if isinstance(case.body, dict) else {}
    messages = body.get("messages")
    return (
        _dates_in_order(body)
        and _images_real(messages)
        and (not isinstance(messages, list) or any(map(_has_text_or_image, messages)))
    )


def _add(case: Case) -> bool:
    """MemoryAddInputSerializer: a task session is named; a session named twice, alike."""
    body = case.body if isinstance(case.body, dict) else {}
    tags = body.get("filter_tags") if isinstance(body.get("filter_tags"), dict) else {}
    session_id, tagged = body.get("session_id"), tags.get("session_id")
    if session_id is not None and tagged is not None and session_id != tagged:
        return False
    if not _images_real(body.get("messages")):
        return False
    return body.get("session_tag") != "task" or (session_id or tagged) is not None


def _initialize(case: Case) -> bool:
    """MetaAgentInitializeInputSerializer: a provider, or a config that is not empty."""
    body = case.body if isinstance(case.body, dict) else {}
    return bool(body.get("provider") or body.get("config"))


def _past(value: Any) -> bool:
    """An experience's occurred_at is not in the future (ExperienceInput's check: "now" is not
    a value a schema can name)."""
    moment = _moment(value)
    return moment is None or moment.tzinfo is None or moment <= datetime.now(moment.tzinfo)


def _experience(case: Case) -> bool:
    """ExperienceRecordSerializer and its batch: every occurred_at in the past."""
    body = case.body if isinstance(case.body, dict) else {}
    items = body.get("experiences") if isinstance(body.get("experiences"), list) else [body]
    return all(_past(item.get("occurred_at")) for item in items if isinstance(item, dict))


def _transcript(case: Case) -> bool:
    """skills.transcripts: a user turn with text gives the task, an assistant turn the action;
    the outcome is given (a transcript that does not say how it went needs it)."""
    body = case.body if isinstance(case.body, dict) else {}
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]

    def text(message: dict[str, Any]) -> bool:
        content = message.get("content")
        if isinstance(content, str):
            return bool(content.strip())
        parts = content if isinstance(content, list) else []
        return any(
            isinstance(part, dict) and part.get("type") == "text" and str(part.get("text")).strip()
            for part in parts
        )

    return (
        body.get("outcome") is not None
        and _images_real(messages)
        and any(m.get("role") == "user" and text(m) for m in messages)
        and any(m.get("role") == "assistant" and (text(m) or m.get("tool_calls")) for m in messages)
    )


RULES: dict[tuple[str, str], Callable[[Case], bool]] = {
    ("POST", "/experiences"): _experience,
    ("POST", "/experiences/failure"): _experience,
    ("POST", "/experiences/conversation"): _transcript,
    ("GET", "/memory/search"): _search,
    ("GET", "/memory/search_all_users"): _search,
    ("POST", "/memory/retrieve/conversation"): _conversation,
    ("POST", "/memory/add"): _add,
    ("POST", "/agents/meta/initialize"): _initialize,
    ("POST", "/images"): _image_upload,
}


@schemathesis.hook
def filter_case(context: HookContext, case: Case) -> bool:
    rule = RULES.get((case.operation.method.upper(), case.operation.path))
    negative = case.meta is not None and case.meta.generation.mode == GenerationMode.NEGATIVE
    return rule is None or negative or rule(case)
