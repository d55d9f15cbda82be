"""The scim2-tester compliance checks (RFC 7643/7644, from PyPI) against a real gateway
process serving the control plane: every check it runs passes."""

from __future__ import annotations

import httpx2
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import Status, check_server

from accounts.models import Account
from scim.tokens import scim_token_issue


def run_checks(stack) -> list:
    tenant = stack.tenant()
    _, secret = scim_token_issue(account=Account.objects.get(pk=tenant.account_id))
    http = httpx2.Client(
        base_url=f"{stack.url}/scim/v2", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    with http:
        return check_server(SyncSCIMClient(http))


def test_every_scim2_tester_check_passes_against_a_gateway(stack):
    results = run_checks(stack)

    failed = [(r.title, r.resource_type, r.reason) for r in results if r.status == Status.ERROR]
    assert failed == []
    print(sorted({(r.title, r.resource_type, r.status.name) for r in results}))
