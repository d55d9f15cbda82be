"""Tenants made through the provisioning service, as `create_tenant` makes them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from rest_framework.test import APIClient


@dataclass
class Tenant:
    account_id: int
    group_id: int
    api_key: str
    api_key_id: int
    api_token: str


def make_tenant(
    *, wallet_micro: int = 100_000_000, invoiced: bool = False, budget_micro: int | None = None
) -> Tenant:
    from billing.services import tenant_provision

    tenant = tenant_provision(
        name=f"t-{uuid.uuid4().hex[:10]}",
        wallet_micro=wallet_micro,
        invoiced=invoiced,
        budget_max_micro=budget_micro,
    )
    return Tenant(
        account_id=tenant.account.pk,
        group_id=tenant.group.pk,
        api_key=tenant.api_key_secret,
        api_key_id=tenant.api_key.pk,
        api_token=tenant.api_token_secret,
    )


def client_for(tenant: Tenant) -> APIClient:
    """A tenant API client signed in with the tenant's API token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client
