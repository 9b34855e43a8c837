"""The published MIRIX client (mirix==0.1.7), unmodified, on a live server, with a tenant whose
user has memories of every type."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from mirix import MirixClient

from tests.factories import TenantFixture, memories_create, tenant_fixture

USER_ID = "sam"


@dataclass
class Mirix:
    tenant: TenantFixture
    client: MirixClient


def mirix_client(tenant: TenantFixture, url: str) -> MirixClient:
    client = MirixClient(api_key=tenant.key, base_url=url, max_retries=0)
    client.initialize_meta_agent(provider="openai", api_key="sk-test")
    return client


@pytest.fixture
def mirix(live_server) -> Mirix:
    tenant = tenant_fixture("mirix-compat")
    client = mirix_client(tenant, live_server.url)
    memories_create(tenant, user_id=USER_ID)
    return Mirix(tenant=tenant, client=client)
