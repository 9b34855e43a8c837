"""The user's learned skills as MCP resources, after the Skills Extension (SEP-2640,
``io.modelcontextprotocol/skills``): each served skill's SKILL.md at
``skill://<user>/<name>/SKILL.md`` (the path's last segment is the skill's name, ``SKILL.md``
explicit; the first segment, the end user, is a locator a client must not resolve as a host),
and the ``skill://index.json`` resource listing them in the Agent Skills discovery index's
shape with ``url`` the skill:// URI and no digest (the transport carries integrity). Both come
through plain ``resources/list`` and ``resources/read``, which every MCP client speaks; the
extension's ``skills/list`` / ``skills/get`` methods, whose shapes it left unsettled, are not
served.

The server's ``GET /skills/index.json`` is the source: what it lists is what retrieval
serves. ``SkillWatch`` polls it and tells the sessions that listed the resources when the list
or a skill's text changed (``notifications/resources/list_changed``), as after a learning run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from mcp.types import Resource

from mirix_mcp.api import Api, ApiError

EXTENSION = "io.modelcontextprotocol/skills"
INDEX_URI = "skill://index.json"
MARKDOWN = "text/markdown"
_SKILL_URL = re.compile(r"/skills/([^/]+)/SKILL\.md$")


def skill_uri(user_id: str, name: str) -> str:
    return f"skill://{quote(user_id, safe='')}/{name}/SKILL.md"


def skill_name(uri: str, user_id: str) -> str | None:
    """The skill a ``skill://`` URI of this user names; None for any other URI."""
    parts = urlsplit(uri)
    segments = parts.path.strip("/").split("/")
    if (
        parts.scheme != "skill"
        or unquote(parts.netloc) != user_id
        or len(segments) != 2
        or segments[1] != "SKILL.md"
    ):
        return None
    return segments[0]


async def skill_index(api: Api) -> dict[str, Any]:
    """The server's discovery index of the user's served skills (empty for a user nothing
    was stored for yet)."""
    return await api.call("GET", "/skills/index.json", if_missing={"skills": []})


def index_fingerprint(index: dict[str, Any]) -> str:
    """Changes when a skill is added, removed or its SKILL.md changes (its digest)."""
    entries = sorted((entry["name"], entry.get("digest", "")) for entry in index["skills"])
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def skill_resources(index: dict[str, Any], user_id: str) -> list[Resource]:
    resources = [
        Resource(
            uri=INDEX_URI,
            name="index.json",
            title="Skills learned for this user",
            description="The discovery index of the skills below (Agent Skills' index.json).",
            mime_type="application/json",
        )
    ]
    resources.extend(
        Resource(
            uri=skill_uri(user_id, entry["name"]),
            name=entry["name"],
            description=entry.get("description") or None,
            mime_type=MARKDOWN,
        )
        for entry in index["skills"]
    )
    return resources


def mcp_index(index: dict[str, Any], user_id: str) -> dict[str, Any]:
    """``skill://index.json``: the HTTP index with skill:// URLs and no digests."""
    entries = [
        {name: value for name, value in entry.items() if name not in {"digest", "sha256", "url"}}
        | {"url": skill_uri(user_id, entry["name"])}
        for entry in index["skills"]
    ]
    return {**{k: v for k, v in index.items() if k != "skills"}, "skills": entries}


async def skill_read(api: Api, uri: str) -> tuple[str, str]:
    """The text and MIME type of a skill resource; ``ApiError`` naming what is missing."""
    user_id = api.settings.user_id
    index = await skill_index(api)
    if uri == INDEX_URI:
        return json.dumps(mcp_index(index, user_id), ensure_ascii=False), "application/json"
    name = skill_name(uri, user_id)
    if name is None:
        raise ApiError(
            f"No such resource: {uri}. Skills are skill://{quote(user_id, safe='')}/<name>/"
            f"SKILL.md; {INDEX_URI} lists them."
        )
    entry = next((entry for entry in index["skills"] if entry["name"] == name), None)
    found = _SKILL_URL.search(urlsplit(entry["url"]).path) if entry else None
    text = await api.text(f"/skills/{found.group(1)}/SKILL.md") if found else None
    if text is None:
        raise ApiError(
            f"No skill named {name!r} is served for this user (it may have been deprecated "
            f"or renamed); {INDEX_URI} or list_skills lists those that are."
        )
    return text, MARKDOWN


class SkillWatch:
    """What the sessions that listed the skill resources last saw, to tell them of a change."""

    def __init__(self) -> None:
        self.fingerprint: str | None = None
        self.sessions: list[Any] = []  # ServerSession: those that listed the resources

    def listed(self, session: Any, index: dict[str, Any]) -> None:
        if session not in self.sessions:
            self.sessions.append(session)
        self.fingerprint = index_fingerprint(index)

    async def check(self, api: Api) -> bool:
        """Poll the index once; True when it changed and the sessions were told."""
        if not self.sessions:
            return False
        fingerprint = index_fingerprint(await skill_index(api))
        if fingerprint == self.fingerprint:
            return False
        self.fingerprint = fingerprint
        await _notify(self.sessions)
        return True


async def _notify(sessions: Iterable[Any]) -> None:
    for session in list(sessions):
        await session.send_resource_list_changed()
