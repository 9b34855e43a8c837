"""Importing skills from an Agent Skills discovery index (``manage.py import_skills``): the index
read from a file or an http(s) URL, each ``skill-md`` entry's SKILL.md fetched (relative URLs
resolved against the index's location, RFC 3986; beside a local index, files in its folder),
its bytes checked against the entry's digest, read back into a skill (``skills.export``) and
written as a version of the user's skill of that name (author ``import``), redacted as every
version is. Remote reads go through the SSRF-guarded fetcher (``images.fetch``): a URL leading
to this server's network is refused, as an image's is.

The digest is spelled ``"digest": "sha256:<hex>"`` (the RFC's) or ``"sha256": "<hex>"``; an
entry with neither, or whose bytes do not match, is refused and nothing of it is written. An
entry of another type (``archive``) is skipped. A skill whose SKILL.md would say what the
user's skill says already is unchanged (no version)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urljoin, urlsplit

from django.conf import settings

from accounts.models import EndUser
from accounts.tenancy import Tenant
from images.fetch import FetchKind, ImageFetchError, remote_fetch
from mirix_site.search.spaces import write_embedders
from sessions.sensitive import sensitive_redacted
from skills.content import SkillContent, quoted
from skills.export import DISCOVERY_SCHEMA, SkillMarkdownError, skill_md_read, skill_md_same
from skills.models import Skill, SkillVersion
from skills.selectors import skill_owned_named
from skills.services.skills import (
    Provenance,
    SkillConflictError,
    SkillInputError,
    skill_version_write,
    skills_embed,
)

INDEX_MAX_BYTES = 5 * 1024 * 1024
# A SKILL.md within the Agent Skills limits (500 lines) is far smaller; this only bounds a read.
SKILL_MD_MAX_BYTES = 1024 * 1024
FETCH_TIMEOUT_SECONDS = 30.0
_INDEX = FetchKind(noun="index", accept="application/json", media_type=None)
# Any media type: the digest, then reading it as a SKILL.md, judge the bytes.
_SKILL_MD = FetchKind(noun="SKILL.md", accept="text/markdown, text/plain;q=0.9", media_type=None)
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_REMOTE_SCHEMES = ("http", "https")

Outcome = Literal["created", "updated", "unchanged", "refused", "skipped"]


class SkillIndexError(Exception):
    """An index that cannot be imported at all (not read, not JSON, another schema): why."""


class _EntryRefusedError(Exception):
    """One entry refused: why, in one sentence."""


@dataclass(frozen=True)
class EntryImport:
    """What became of one entry of the index (for a dry run: what would)."""

    name: str  # as the index names it, or its place in the list when it names none
    outcome: Outcome
    reason: str = ""
    skill: Skill | None = None


@dataclass(frozen=True)
class IndexImport:
    entries: list[EntryImport]
    notes: list[str] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return sum(entry.outcome == outcome for entry in self.entries)


@dataclass(frozen=True)
class _Origin:
    """Where the index was read: its URL after redirects, or the folder of a local file."""

    url: str | None = None
    folder: Path | None = None


def _fetched(url: str, kind: FetchKind, max_bytes: int) -> bytes:
    try:
        return remote_fetch(
            url=url,
            kind=kind,
            max_bytes=max_bytes,
            timeout=FETCH_TIMEOUT_SECONDS,
            allow_hosts=settings.IMAGE_FETCH_ALLOW_HOSTS,
        ).data
    except ImageFetchError as error:
        raise _EntryRefusedError(error.reason) from None


def _file_read(path: Path, max_bytes: int) -> bytes:
    try:
        with path.open("rb") as opened:
            data = opened.read(max_bytes + 1)
    except OSError as error:
        raise _EntryRefusedError(f"{path} could not be read ({error.strerror or error}).") from None
    if len(data) > max_bytes:
        raise _EntryRefusedError(f"{path} is larger than {max_bytes} bytes.")
    return data


def _index_read(location: str) -> tuple[dict[str, Any], _Origin]:
    try:
        if urlsplit(location).scheme.lower() in _REMOTE_SCHEMES:
            fetched = remote_fetch(
                url=location,
                kind=_INDEX,
                max_bytes=INDEX_MAX_BYTES,
                timeout=FETCH_TIMEOUT_SECONDS,
                allow_hosts=settings.IMAGE_FETCH_ALLOW_HOSTS,
            )
            data, origin = fetched.data, _Origin(url=fetched.url)
        else:
            path = Path(location)
            data, origin = _file_read(path, INDEX_MAX_BYTES), _Origin(folder=path.resolve().parent)
    except ImageFetchError as error:
        raise SkillIndexError(error.reason) from None
    except _EntryRefusedError as error:
        raise SkillIndexError(str(error)) from None
    try:
        index = json.loads(data)
    except ValueError:
        raise SkillIndexError(f"{location} is not JSON.") from None
    if not isinstance(index, dict) or not isinstance(index.get("skills"), list):
        raise SkillIndexError(f"{location} is not a discovery index: no list of skills.")
    schema = index.get("$schema")
    if schema is not None and schema != DISCOVERY_SCHEMA:
        raise SkillIndexError(
            f"{location} names the schema {schema!r}, not the discovery index's "
            f"{DISCOVERY_SCHEMA}: its entries may mean something else."
        )
    return index, origin


def _artifact_read(origin: _Origin, url: str) -> tuple[bytes, str]:
    """The bytes ``url`` names, as the index at ``origin`` names them, and where they were."""
    parts = urlsplit(url)
    if parts.scheme.lower() in _REMOTE_SCHEMES:
        return _fetched(url, _SKILL_MD, SKILL_MD_MAX_BYTES), url
    if origin.url is not None:
        resolved = urljoin(origin.url, url)
        return _fetched(resolved, _SKILL_MD, SKILL_MD_MAX_BYTES), resolved
    if parts.scheme or parts.netloc:
        raise _EntryRefusedError(f"Its url {url!r} is neither http(s) nor a file beside the index.")
    if parts.path.startswith("/"):
        raise _EntryRefusedError(
            f"Its url {url!r} is path-absolute: a local index has no origin for it."
        )
    assert origin.folder is not None
    path = (origin.folder / unquote(parts.path)).resolve()
    if not path.is_relative_to(origin.folder):
        raise _EntryRefusedError(f"Its url {url!r} leads outside the index's folder.")
    return _file_read(path, SKILL_MD_MAX_BYTES), str(path)


def _digest_read(entry: dict[str, Any]) -> str:
    """The SHA-256 the entry gives its artifact, in hex, spelled either way."""
    spellings = []
    if "digest" in entry:
        digest = entry["digest"]
        if not isinstance(digest, str) or not digest.lower().startswith("sha256:"):
            raise _EntryRefusedError("Its digest is not sha256:<64 hex digits>.")
        spellings.append(digest[len("sha256:") :].lower())
    if "sha256" in entry:
        if not isinstance(entry["sha256"], str):
            raise _EntryRefusedError("Its sha256 is not 64 hex digits.")
        spellings.append(entry["sha256"].lower())
    if not spellings:
        raise _EntryRefusedError(
            'It gives no digest ("digest": "sha256:<hex>" or "sha256": "<hex>").'
        )
    if not all(_HEX_DIGEST.fullmatch(spelling) for spelling in spellings):
        raise _EntryRefusedError("Its digest is not sha256:<64 hex digits>.")
    if len(set(spellings)) > 1:
        raise _EntryRefusedError("Its digest and its sha256 disagree.")
    return spellings[0]


def _content_kept(existing: SkillContent, imported: SkillContent) -> SkillContent:
    """``imported``, with the skill's own phrasings when its SKILL.md quotes exactly those (a
    quote is clipped: reading it back would shorten a long one)."""
    if [quoted(t) for t in existing.triggers] == [quoted(t) for t in imported.triggers]:
        return replace(imported, triggers=existing.triggers)
    return imported


def _entry_import(
    *,
    tenant: Tenant,
    end_user: EndUser,
    origin: _Origin,
    entry: dict[str, Any],
    name: str,
    dry_run: bool,
) -> EntryImport:
    url = entry.get("url")
    if not isinstance(url, str) or not url.strip():
        raise _EntryRefusedError("It gives no url.")
    expected = _digest_read(entry)
    data, where = _artifact_read(origin, url.strip())
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise _EntryRefusedError(
            f"Its SKILL.md's digest is sha256:{actual}, the index says sha256:{expected}."
        )
    try:
        read = skill_md_read(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise _EntryRefusedError("Its SKILL.md is not UTF-8 text.") from None
    except SkillMarkdownError as error:
        raise _EntryRefusedError(f"Its SKILL.md cannot be read: {error}") from None
    content = read.content.redacted()
    if content.name != name:
        raise _EntryRefusedError(
            f"Its SKILL.md names the skill {content.name!r}, the index {name!r}."
        )
    errors = content.errors()
    if errors:
        broken = "; ".join(f"{key}: {' '.join(messages)}" for key, messages in errors.items())
        raise _EntryRefusedError(f"Its skill breaks the Agent Skills rules ({broken})")
    existing = skill_owned_named(tenant=tenant, end_user=end_user, name=name)
    if existing is not None:
        current = SkillContent.of(existing)
        if skill_md_same(current, content):
            return EntryImport(name=name, outcome="unchanged", skill=existing)
        content = _content_kept(current, content)
    outcome: Outcome = "created" if existing is None else "updated"
    if dry_run:
        return EntryImport(name=name, outcome=outcome, skill=existing)
    version = read.metadata.get("version")
    note = f"Imported from {where}" + (f" (its version {version})." if version else ".")
    try:
        written = skill_version_write(
            owner=tenant.owner_ids(end_user),
            skill=existing,
            content=content,
            provenance=Provenance(
                author=SkillVersion.Author.IMPORT,
                operation="create" if existing is None else "edit",
                # Where it came from may carry a token (a signed URL's query).
                note=sensitive_redacted(note),
            ),
            embedders=[],
        )
    except (SkillInputError, SkillConflictError) as error:
        raise _EntryRefusedError(f"It could not be written: {error}") from None
    return EntryImport(name=name, outcome=outcome, skill=written.skill)


def skills_index_import(
    *, tenant: Tenant, end_user: EndUser, location: str, dry_run: bool = False
) -> IndexImport:
    """Import the skills the discovery index at ``location`` (a file path or an http(s) URL)
    lists as the user's skills of the tenant's client: per entry, created, updated, unchanged,
    refused (and why) or skipped (another type). ``dry_run``: the same report, nothing
    written. The skills written are embedded here, as an import of a user's data is. Raises
    SkillIndexError when the index itself cannot be read."""
    index, origin = _index_read(location)
    notes = []
    if "$schema" not in index:
        notes.append(f"The index names no $schema: its entries are read as {DISCOVERY_SCHEMA}'s.")
    entries: list[EntryImport] = []
    seen: set[str] = set()
    for number, entry in enumerate(index["skills"], start=1):
        name = entry.get("name") if isinstance(entry, dict) else None
        label = name if isinstance(name, str) and name else f"entry {number}"
        if not isinstance(entry, dict) or not isinstance(name, str) or not name:
            entries.append(EntryImport(label, "refused", "It names no skill."))
            continue
        kind = entry.get("type")
        if kind != "skill-md":
            shown = f"type {kind!r}" if kind is not None else "no type"
            entries.append(EntryImport(label, "skipped", f"It has {shown}, not skill-md."))
            continue
        if name in seen:
            entries.append(EntryImport(label, "refused", "The index names it twice."))
            continue
        seen.add(name)
        try:
            entries.append(
                _entry_import(
                    tenant=tenant,
                    end_user=end_user,
                    origin=origin,
                    entry=entry,
                    name=name,
                    dry_run=dry_run,
                )
            )
        except _EntryRefusedError as error:
            entries.append(EntryImport(label, "refused", str(error)))
    written = [e.skill.pk for e in entries if e.outcome in ("created", "updated") and e.skill]
    if written and not dry_run:
        skills_embed(skill_ids=written, embedders=write_embedders())
    return IndexImport(entries=entries, notes=notes)
