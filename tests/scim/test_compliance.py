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


# Every check scim2-tester 0.5.2 runs, and for which resource type: none may be skipped.
CHECKS = {
    ("service_provider_config_endpoint", None),
    ("service_provider_config_endpoint_methods", None),
    ("query_all_resource_types", None),
    ("query_resource_type_by_id", None),
    ("access_invalid_resource_type", None),
    ("resource_types_endpoint_methods", None),
    ("resource_types_schema_validation", None),
    ("query_all_schemas", None),
    ("access_schema_by_id", None),
    ("access_invalid_schema", None),
    ("schemas_endpoint_methods", None),
    ("random_url", None),
    *(
        (check, resource_type)
        for resource_type in ("User", "Group")
        for check in (
            "object_creation",
            "object_query",
            "object_query_without_id",
            "object_query_with_attributes",
            "object_list_with_attributes",
            "search_with_attributes",
            "object_replacement",
            "object_deletion",
            "check_add_attribute",
            "check_remove_attribute",
            "check_replace_attribute",
        )
    ),
}


def test_every_scim2_tester_check_passes_against_a_gateway(stack):
    results = run_checks(stack)

    failed = [(r.title, r.resource_type, r.reason) for r in results if r.status != Status.SUCCESS]
    assert failed == []
    assert {(r.title, r.resource_type) for r in results} == CHECKS
