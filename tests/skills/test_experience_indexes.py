"""An experience recorded pays for the indexes its reads and deletions use, and no others: the
batch record's database time is mostly index upkeep (bench/RESULTS.md, 2026-12-04). What a
deletion looks experiences up by is still indexed, and it still finds them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import ForeignKey

from mirix_site.search.models import DocumentStats, Posting, TermStats
from skills.models import EXPERIENCE_REFERENCES, Experience, Recommendation
from tests.factories import TenantFixture
from tests.skills.experiences import record

pytestmark = pytest.mark.django_db


def _indexes(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


@pytest.mark.parametrize("model", [Experience, Posting, TermStats, DocumentStats])
def test_no_index_serves_only_pattern_matching(model: type) -> None:
    definitions = _indexes(model._meta.db_table).values()
    assert not [d for d in definitions if "pattern_ops" in d]


def test_an_experience_keeps_one_index_per_way_it_is_looked_up() -> None:
    indexes = _indexes(Experience._meta.db_table)
    single_user = [d for d in indexes.values() if d.endswith("(end_user_id)")]
    assert single_user == []  # experience_owner and experience_action lead with the user
    # Every nullable reference the model has, not only those it lists: one added without a
    # partial index would be a full index of NULLs again.
    references = [
        field
        for field in Experience._meta.concrete_fields
        if isinstance(field, ForeignKey) and field.null
    ]
    assert sorted(field.name for field in references) == sorted(EXPERIENCE_REFERENCES)
    for field in references:
        [definition] = [d for d in indexes.values() if f"({field.column})" in d]
        assert f"WHERE ({field.column} IS NOT NULL)" in definition
    assert {"experience_organization", "experience_client"} <= indexes.keys()


def test_deleting_a_recommendation_still_clears_the_outcomes_that_cite_it(
    org: TenantFixture,
) -> None:
    first = record(org, task="login times out", action="add a cache", outcome="success")
    body = org.api.get(
        "/experiences/recommend", {"user_id": "ada", "task": "login times out"}
    ).json()
    cited = record(
        org,
        task="login times out",
        action="add a cache",
        outcome="success",
        recommendation_id=body["recommendation_id"],
    )
    Recommendation.objects.get(pk=body["recommendation_id"]).delete()
    assert Experience.objects.get(pk=cited["id"]).recommendation_id is None
    assert Experience.objects.filter(pk__in=[first["id"], cited["id"]]).count() == 2
