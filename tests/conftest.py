from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory.retrieval.lanes import lanes_close
from tests.factories import TenantFixture, tenant_fixture
from tests.loopback import loopback  # noqa: F401  (fixture)


@pytest.fixture(scope="session", autouse=True)
def _lane_connections_closed(django_db_setup: None) -> Iterator[None]:
    """Hybrid searches outside a transaction open connections in the lane pool; they must be
    gone before the test database is dropped."""
    yield
    lanes_close()


@pytest.fixture
def org(db: None) -> TenantFixture:
    """Alice's organization: the caller in most tests."""
    return tenant_fixture("alice")


@pytest.fixture
def other_org(db: None) -> TenantFixture:
    """Bob's organization: its rows must never be visible to alice."""
    return tenant_fixture("bob")
