from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.scopes import tenant_named
from memory.api.serializers.imports import ImportLine, ImportParamsSerializer, NdjsonLines
from memory.services.imports import memory_import_lines, memory_import_start
from mirix_site.common.history import OPERATOR, history_context

# Lines between two progress lines on stderr.
PROGRESS_EVERY = 10_000
# Refused lines printed at the end (every one is on the import's row, up to its limit).
REFUSALS_PRINTED = 20


class Command(BaseCommand):
    help = (
        "Import a file of conversation turns (NDJSON, one turn a line, as POST /memory/import "
        "takes them) for a client of an organization: stored in batches as /memory/add stores "
        "turns, extracted into memories by the workers. Idempotent and resumable: each turn "
        "carries its client_message_id, so running the command again on the same file (after "
        "a cut, or twice) stores every turn once. A bad line is refused with its number; the "
        "others are imported. Progress is on the import's row in the admin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="the organization's id")
        parser.add_argument("file", help="the NDJSON file (- : standard input)")
        parser.add_argument(
            "--client", default=None, help="the client the turns are stored for, by id or name"
        )
        parser.add_argument("--user-id", default=None, help="the end user of lines that name none")
        parser.add_argument(
            "--import-id",
            default=None,
            help="the import's name (default: the file's name); the same name continues it",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(organization_id=options["organization"], client=options["client"])
        path = options["file"]
        import_id = options["import_id"] or (
            "stdin" if path == "-" else Path(path).name or "import"
        )
        params = ImportParamsSerializer(
            data={
                "import_id": import_id,
                **({"user_id": options["user_id"]} if options["user_id"] else {}),
            }
        )
        if not params.is_valid():
            raise CommandError(
                "; ".join(f"{name}: {' '.join(texts)}" for name, texts in params.errors.items())
            )
        try:
            stream: BinaryIO = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None
        try:
            expected = None if path == "-" else _line_count(stream)
            lines = NdjsonLines(stream, default_user_id=options["user_id"], max_lines=None)
            with history_context(OPERATOR, operator="import_turns"):
                job = memory_import_start(
                    tenant=tenant, import_id=import_id, expected_lines=expected
                )
                part = memory_import_lines(
                    tenant=tenant, job=job, lines=self._reported(lines, expected)
                )
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        for refusal in part.refused[:REFUSALS_PRINTED]:
            reasons = "; ".join(
                f"{name}: {' '.join(texts)}" for name, texts in refusal.errors.items()
            )
            self.stderr.write(f"  line {refusal.line}: {reasons}")
        if len(part.refused) > REFUSALS_PRINTED:
            self.stderr.write(f"  ... and {len(part.refused) - REFUSALS_PRINTED:,} more lines")
        self.stdout.write(
            f"Import {import_id}: {part.lines_read:,} lines read, {part.turns_stored:,} turns "
            f"stored, {part.turns_found:,} stored before (not again), {part.memories_stored:,} "
            f"memories stored, {part.memories_found:,} stored before, {len(part.refused):,} "
            "lines refused."
        )

    def _reported(self, lines: Iterable[ImportLine], expected: int | None) -> Iterator[ImportLine]:
        for count, line in enumerate(lines, start=1):
            if count % PROGRESS_EVERY == 0:
                total = f" of {expected:,}" if expected else ""
                self.stderr.write(f"  {count:,} lines{total} read")
            yield line


def _line_count(stream: BinaryIO) -> int:
    """The file's lines (what its ETA is of), the file read back to its start."""
    count = sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b""))
    stream.seek(0)
    return count or 1
