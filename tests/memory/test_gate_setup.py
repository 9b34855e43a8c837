"""The default install searches with the similarity gate it was benchmarked with: migrating a
fresh database measures the bundled model's calibration, and setup's ``calibrate_gate
--if-missing`` leaves an existing one alone (and measures one that is missing)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.core.management import call_command

from mirix_site.providers.embeddings import LOCAL_MODEL_NAME, embedding_provider_from_settings
from mirix_site.search.gate import bundled_pairs, gate_calibration_ensure, gate_measure
from mirix_site.search.models import GateCalibration
from skills.search import SKILL_KIND

PROJECT_DIR = Path(__file__).resolve().parents[2]
FIELDS = ("min_similarity", "strong_similarity", "related_pairs", "unrelated_pairs")


@pytest.fixture
def fresh_database_url() -> Iterator[str]:
    """A new, empty database on the test run's PostgreSQL; dropped afterwards."""
    server = os.environ["DATABASE_URL"]
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _manage(database_url: str, *arguments: str) -> str:
    # The settings `make run` uses, every gate setting at its default.
    environment = {
        key: value for key, value in os.environ.items() if key != "GATE_CALIBRATE_ON_MIGRATE"
    }
    environment |= {
        "DJANGO_SETTINGS_MODULE": "mirix_site.settings.local",
        "DATABASE_URL": database_url,
    }
    finished = subprocess.run(  # noqa: S603
        [sys.executable, "manage.py", *arguments],
        cwd=PROJECT_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    return finished.stdout


@pytest.mark.slow
def test_a_freshly_migrated_database_has_the_bundled_models_calibration(
    fresh_database_url: str,
) -> None:
    _manage(fresh_database_url, "migrate", "--noinput")

    query = (
        "SELECT model, kind, min_similarity, strong_similarity, related_pairs, unrelated_pairs,"
        " measured_at FROM memory_gatecalibration"
    )
    with psycopg.connect(fresh_database_url) as fresh:
        rows = fresh.execute(query + " ORDER BY kind").fetchall()
    # The model's, and the skill kind's from the pairs it ships.
    assert [row[:2] for row in rows] == [(LOCAL_MODEL_NAME, ""), (LOCAL_MODEL_NAME, "skill")]
    embedder = embedding_provider_from_settings()
    for row, pairs in zip(
        rows, (bundled_pairs(), bundled_pairs(SKILL_KIND.calibration_pairs)), strict=True
    ):
        expected = gate_measure(embedder=embedder, related_pairs=pairs)
        assert dict(zip(FIELDS, row[2:6], strict=True)) == {
            field: expected[field] for field in FIELDS
        }
        assert 0 < expected["min_similarity"] < expected["strong_similarity"] < 1

    # Setup's second step, on every start: the calibrations are there, so nothing changes.
    assert "calibrated already" in _manage(fresh_database_url, "calibrate_gate", "--if-missing")
    with psycopg.connect(fresh_database_url) as fresh:
        assert fresh.execute(query + " ORDER BY kind").fetchall() == rows


def test_calibrate_gate_if_missing_measures_a_missing_calibration_and_keeps_one(
    similarity_gate_off: None,
) -> None:
    call_command("calibrate_gate", if_missing=True, stdout=StringIO())
    calibration = GateCalibration.objects.get(model=LOCAL_MODEL_NAME, kind="")
    expected = gate_measure(
        embedder=embedding_provider_from_settings(), related_pairs=bundled_pairs()
    )
    assert calibration.min_similarity == expected["min_similarity"]
    assert calibration.related_pairs == len(bundled_pairs())

    # One an operator measured on their own pairs is theirs: setup does not overwrite it.
    GateCalibration.objects.filter(pk=calibration.pk).update(min_similarity=0.5)
    out = StringIO()
    call_command("calibrate_gate", if_missing=True, stdout=out)
    assert "calibrated already" in out.getvalue()
    assert GateCalibration.objects.get(pk=calibration.pk).min_similarity == 0.5


def test_setup_measures_the_bundled_pairs_once_a_process(
    similarity_gate_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test suite inserts the calibrations again after every flush: from what this process
    measured when it first made them, not by embedding the pairs again."""
    embedder = embedding_provider_from_settings()
    embedded: list[str] = []
    embed = embedder.embed
    monkeypatch.setattr(embedder, "embed", lambda texts: embedded.extend(texts) or embed(texts))

    made = gate_calibration_ensure(embedder)

    assert embedded == []
    assert [calibration.kind for calibration in made] == ["", SKILL_KIND.name]
    for calibration, pairs in zip(
        made, (bundled_pairs(), bundled_pairs(SKILL_KIND.calibration_pairs)), strict=True
    ):
        measured = gate_measure(embedder=embedder, related_pairs=pairs)
        assert {field: getattr(calibration, field) for field in measured} == measured
