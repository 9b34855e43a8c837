"""What every search reads of the embedding spaces and the gate's calibrations (and every
experience search of its client's half-life) is kept by the process for ``ROWS_MEMO_SECONDS``:
a search spends no round trip on it, a change made in the process is read at once, one made
elsewhere within the memo's lifetime, and nothing a transaction read (and may roll back)
outlives it."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from mirix_site.common import rowsmemo
from mirix_site.search.fusion import Thresholds
from mirix_site.search.gate import gate_thresholds
from mirix_site.search.kinds import kind_get
from mirix_site.search.models import EmbeddingSpace, GateCalibration
from skills.models import ExperienceSettings
from tests.factories import TenantFixture
from tests.skills.experiences import embed_all, record_many

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "a-model-of-this-test"
SEMANTIC = kind_get("semantic")


def _calibrate(min_similarity: float) -> None:
    GateCalibration.objects.update_or_create(
        model=MODEL,
        kind="",
        defaults={
            "min_similarity": min_similarity,
            "strong_similarity": 0.9,
            "related_pairs": 10,
            "unrelated_pairs": 90,
        },
    )


def _min_similarity() -> float:
    thresholds = gate_thresholds(model=MODEL, kinds=[SEMANTIC])["semantic"]
    assert isinstance(thresholds, Thresholds)
    return thresholds.min_similarity


def test_a_search_after_the_first_reads_no_spaces_calibrations_or_settings(
    org: TenantFixture,
) -> None:
    record_many(org, [{"task": "deploy the api", "action": "roll back", "outcome": "success"}])
    embed_all()
    asked = {"user_id": "ada", "query": "the api deploy failed"}
    assert org.api.get("/experiences/recall", asked).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        response = org.api.get("/experiences/recall", asked)
    assert response.status_code == 200 and response.json()["count"] == 1
    tables = (
        EmbeddingSpace._meta.db_table,
        GateCalibration._meta.db_table,
        ExperienceSettings._meta.db_table,
    )
    assert not [q["sql"] for q in queries.captured_queries if any(t in q["sql"] for t in tables)]


def test_a_calibration_changed_in_this_process_is_read_at_once() -> None:
    _calibrate(0.30)
    assert _min_similarity() == 0.30
    _calibrate(0.35)
    assert _min_similarity() == 0.35
    GateCalibration.objects.filter(model=MODEL).delete()
    assert gate_thresholds(model=MODEL, kinds=[SEMANTIC]) == {"semantic": None}


def test_a_change_from_another_process_is_read_within_the_memos_lifetime(
    monkeypatch: pytest.MonkeyPatch, settings
) -> None:
    settings.ROWS_MEMO_SECONDS = 1.0
    now = [1000.0]
    monkeypatch.setattr(rowsmemo, "monotonic", lambda: now[0])  # the memo's clock only
    _calibrate(0.30)
    assert _min_similarity() == 0.30
    # As another process writes it: no signal reaches this one.
    GateCalibration.objects.filter(model=MODEL).update(min_similarity=0.40)
    now[0] += 0.9
    assert _min_similarity() == 0.30
    now[0] += 0.2
    assert _min_similarity() == 0.40


def test_what_a_transaction_read_is_not_kept_after_it_rolls_back() -> None:
    _calibrate(0.30)

    class RollbackError(Exception):
        pass

    with pytest.raises(RollbackError), transaction.atomic():
        _calibrate(0.50)
        assert _min_similarity() == 0.50
        raise RollbackError
    assert _min_similarity() == 0.30
