from __future__ import annotations

import pytest

from tests.factories import TenantFixture, api_client_with, tenant_fixture
from tests.loopback import loopback  # noqa: F401  (fixture)


@pytest.fixture
def org(db: None) -> TenantFixture:
    """Alice's organization: the caller in most tests."""
    return tenant_fixture("alice")


@pytest.fixture
def other_org(db: None) -> TenantFixture:
    """Bob's organization: its rows must never be visible to alice."""
    return tenant_fixture("bob")


@pytest.fixture
def anonymous():
    return api_client_with(None)
