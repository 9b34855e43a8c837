"""The operators' imports, killed mid-way and run again: ``import_turns`` (a file of turns,
batch by batch, resumed by running it again) and ``import_user`` (an export file, all or
nothing, in one transaction) both end with the rows of one uninterrupted run."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from accounts.models import EndUser
from memory.models import MemoryImport
from mirix_site.launcher import PROJECT_DIR
from sessions.models import Message
from tests import processes
from tests.factories import TenantFixture, tenant_fixture


def turn_lines(count: int, *, sessions: int = 10) -> list[dict[str, Any]]:
    return [
        {
            "user_id": "ana",
            "session_id": f"s{n % sessions}",
            "role": "user" if n % 2 else "assistant",
            "content": f"turn {n}",
            "client_message_id": f"m{n}",
            "occurred_at": f"2024-03-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
        }
        for n in range(count)
    ]


def written(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def turns_of(client_id: int) -> set[tuple[Any, ...]]:
    return set(
        Message.objects.filter(client=client_id).values_list(
            "end_user__user_id",
            "session__session_id",
            "position",
            "role",
            "text",
            "client_message_id",
            "occurred_at",
        )
    )


def manage(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - this project's manage.py
        [sys.executable, str(PROJECT_DIR / "manage.py"), *args],
        env=processes.environment_on_test_database(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def killed_when(process: subprocess.Popen[bytes], condition, *, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "never got there"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(10)


def test_import_turns_reads_a_file_and_says_what_it_refused(
    org: TenantFixture, tmp_path: Path
) -> None:
    path = written(tmp_path / "turns.ndjson", [*turn_lines(3), {"role": "user"}])
    out, err = io.StringIO(), io.StringIO()
    call_command("import_turns", org.organization.pk, str(path), stdout=out, stderr=err)
    assert "3 turns stored, 0 stored before" in out.getvalue()
    assert "line 4: " in err.getvalue() and "client_message_id" in err.getvalue()
    job = MemoryImport.objects.get(import_id="turns.ndjson")
    assert (job.expected_lines, job.lines_read, job.lines_refused) == (4, 4, 1)
    again = io.StringIO()
    call_command("import_turns", org.organization.pk, str(path), stdout=again, stderr=err)
    assert "0 turns stored, 3 stored before" in again.getvalue()
    assert Message.objects.count() == 3


def test_import_turns_names_a_bad_import_id_or_file(org: TenantFixture, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("import_turns", org.organization.pk, str(tmp_path / "missing"))
    path = written(tmp_path / "t.ndjson", turn_lines(1))
    with pytest.raises(CommandError, match="import_id"):
        call_command("import_turns", org.organization.pk, str(path), "--import-id", " x")


def test_import_turns_killed_mid_way_and_run_again_ends_as_one_run(
    transactional_db: None, tmp_path: Path
) -> None:
    cut, whole = tenant_fixture("alice"), tenant_fixture("bob")
    path = written(tmp_path / "big.ndjson", turn_lines(1200))
    process = manage("import_turns", cut.organization.pk, str(path))
    killed_when(
        process,
        lambda: MemoryImport.objects.filter(client=cut.client, turns_stored__gt=0).exists(),
    )
    partly = Message.objects.filter(client=cut.client).count()
    assert 0 < partly < 1200  # killed between two batches' commits
    call_command("import_turns", cut.organization.pk, str(path), stdout=io.StringIO())
    call_command("import_turns", whole.organization.pk, str(path), stdout=io.StringIO())
    assert turns_of(cut.client.pk) == turns_of(whole.client.pk)
    assert len(turns_of(cut.client.pk)) == 1200


def test_import_user_killed_mid_way_leaves_nothing_and_run_again_imports_it_all(
    transactional_db: None, tmp_path: Path
) -> None:
    source, target = tenant_fixture("alice"), tenant_fixture("bob")
    call_command(
        "import_turns",
        source.organization.pk,
        str(written(tmp_path / "turns.ndjson", turn_lines(1100))),
        stdout=io.StringIO(),
    )
    export = tmp_path / "ana.export"
    with export.open("w") as out:
        call_command("export_user", source.organization.pk, "ana", stdout=out)
    process = manage(
        "import_user", target.organization.pk, "ana", str(export), "--client", target.client.pk
    )
    # Past its first 1,000 rows (its progress line), before its commit.
    deadline = time.monotonic() + 120
    read = b""
    while b"rows read" not in read:
        assert time.monotonic() < deadline and process.poll() is None, read.decode()
        read += process.stderr.read1(4096)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert not Message.objects.filter(client=target.client).exists()
    assert not EndUser.objects.filter(organization=target.organization, user_id="ana").exists()
    call_command(
        "import_user",
        target.organization.pk,
        "ana",
        str(export),
        "--client",
        target.client.pk,
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert turns_of(target.client.pk) == turns_of(source.client.pk)
