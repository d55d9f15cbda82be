"""The OpenAPI schema a client generator can use: every operation typed, the Token scheme,
no generation warnings, and local docs pages."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.test import Client
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from tests.support.tenants import make_tenant

WRITE_METHODS = ("post", "put", "patch")

# Every tenant-API operation: a view drf-spectacular skipped or a route added without docs
# shows up here.
OPERATIONS = {
    ("get", "/api/account"),
    ("get", "/api/groups"),
    ("post", "/api/groups"),
    ("get", "/api/groups/{group_id}"),
    ("patch", "/api/groups/{group_id}"),
    ("get", "/api/groups/{group_id}/spend"),
    ("get", "/api/keys"),
    ("post", "/api/keys"),
    ("get", "/api/keys/{key_id}"),
    ("patch", "/api/keys/{key_id}"),
    ("post", "/api/keys/{key_id}/revoke"),
    ("post", "/api/keys/{key_id}/rotate"),
    ("get", "/api/tokens"),
    ("post", "/api/tokens/{token_id}/rotate"),
    ("get", "/api/keys/{key_id}/payers"),
    ("get", "/api/accounts/{account_id}/wallet"),
    ("get", "/api/accounts/{account_id}/ledger"),
    ("get", "/api/usage"),
    ("get", "/api/usage/daily"),
    ("get", "/api/usage/models"),
    ("get", "/api/usage/cache"),
    ("get", "/api/usage/tags"),
    ("get", "/api/usage/export.csv"),
    ("get", "/api/usage/requests/{request_id}"),
    ("post", "/api/cache/purge"),
    ("get", "/api/access-groups"),
    ("post", "/api/access-groups"),
    ("get", "/api/access-groups/{access_group_id}"),
    ("patch", "/api/access-groups/{access_group_id}"),
    ("delete", "/api/access-groups/{access_group_id}"),
    ("get", "/api/alert-rules"),
    ("post", "/api/alert-rules"),
    ("get", "/api/alert-rules/{rule_id}"),
    ("patch", "/api/alert-rules/{rule_id}"),
    ("delete", "/api/alert-rules/{rule_id}"),
    ("get", "/api/webhooks"),
    ("post", "/api/webhooks"),
    ("get", "/api/webhooks/{webhook_id}"),
    ("patch", "/api/webhooks/{webhook_id}"),
    ("delete", "/api/webhooks/{webhook_id}"),
    ("post", "/api/webhooks/{webhook_id}/rotate"),
    ("post", "/api/webhooks/{webhook_id}/test"),
    ("get", "/api/webhooks/{webhook_id}/deliveries"),
    ("get", "/api/guardrails"),
    ("post", "/api/guardrails"),
    ("get", "/api/guardrails/{guardrail_id}"),
    ("patch", "/api/guardrails/{guardrail_id}"),
    ("delete", "/api/guardrails/{guardrail_id}"),
    ("post", "/api/guardrails/{guardrail_id}/rotate-secret"),
    ("get", "/api/guardrail-attachments"),
    ("post", "/api/guardrail-attachments"),
    ("delete", "/api/guardrail-attachments/{attachment_id}"),
    ("get", "/api/tag-budgets"),
    ("post", "/api/tag-budgets"),
    ("get", "/api/tag-budgets/{tag_budget_id}"),
    ("patch", "/api/tag-budgets/{tag_budget_id}"),
    ("delete", "/api/tag-budgets/{tag_budget_id}"),
    ("get", "/api/members"),
    ("post", "/api/members"),
    ("patch", "/api/members/{member_id}"),
    ("delete", "/api/members/{member_id}"),
    ("get", "/api/directory-roles"),
    ("put", "/api/directory-roles"),
    ("post", "/api/scim-token"),
    ("get", "/api/audit"),
    ("get", "/api/audit/export.csv"),
    ("get", "/api/audit/export.jsonl"),
    ("get", "/api/audit/head"),
    ("get", "/api/receipts"),
    ("get", "/api/receipts/keys"),
    ("get", "/api/receipts/{request_id}"),
    ("get", "/api/receipts/statement"),
    ("get", "/api/receipts/head"),
    ("get", "/api/receipts/archives"),
    ("get", "/api/receipts/archives/{period}"),
    ("get", "/admin/groups/{group_id}/byok"),
    ("put", "/admin/groups/{group_id}/byok/{provider}"),
    ("post", "/admin/groups/{group_id}/byok/{provider}/keys"),
    ("delete", "/admin/groups/{group_id}/byok/keys/{key_id}"),
}
# Operations anyone may call, without authentication (the receipts' public keys).
PUBLIC = {("get", "/api/receipts/keys")}
# Writes that genuinely take no body.
NO_REQUEST_BODY = {
    ("post", "/api/keys/{key_id}/revoke"),
    ("post", "/api/webhooks/{webhook_id}/rotate"),
    ("post", "/api/webhooks/{webhook_id}/test"),
    ("post", "/api/guardrails/{guardrail_id}/rotate-secret"),
}
# Operations whose success genuinely has no body (204).
NO_RESPONSE_BODY = {
    ("delete", "/admin/groups/{group_id}/byok/keys/{key_id}"),
    ("delete", "/api/members/{member_id}"),
    ("delete", "/api/access-groups/{access_group_id}"),
    ("delete", "/api/alert-rules/{rule_id}"),
    ("delete", "/api/webhooks/{webhook_id}"),
    ("delete", "/api/tag-budgets/{tag_budget_id}"),
    ("delete", "/api/guardrails/{guardrail_id}"),
    ("delete", "/api/guardrail-attachments/{attachment_id}"),
}
USAGE_FILTERS = {"group", "key", "caller", "route", "client_request_id", "model", "start", "end"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                yield (method, path), operation


# What a typed 2xx answer may be: JSON, or an export (CSV, JSON lines, a gzip'd archive).
TYPED_MEDIA = ("application/json", "text/csv", "application/x-ndjson", "application/gzip")


def lacking_response_schema(schema: dict) -> set[tuple[str, str]]:
    """Return the operations with no 2xx response carrying a schema (JSON or an export)."""
    lacking = set()
    for op, operation in operations(schema):
        typed = [
            media
            for status, response in operation.get("responses", {}).items()
            if status.startswith("2")
            for name, media in response.get("content", {}).items()
            if "schema" in media and name in TYPED_MEDIA
        ]
        if not typed:
            lacking.add(op)
    return lacking


def lacking_request_body(schema: dict) -> set[tuple[str, str]]:
    """Return the writes with no JSON request body schema."""
    return {
        op
        for op, operation in operations(schema)
        if op[0] in WRITE_METHODS
        and "schema"
        not in operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    }


def test_schema_generates_without_warnings_and_validates(tmp_path):
    GENERATOR_STATS.reset()

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yaml"))

    assert dict(GENERATOR_STATS._warn_cache) == {}
    assert dict(GENERATOR_STATS._error_cache) == {}


def test_schema_has_every_tenant_operation(schema):
    validate_schema(schema)
    assert {op for op, _ in operations(schema)} == OPERATIONS


def test_every_operation_has_a_2xx_response_schema(schema):
    assert lacking_response_schema(schema) == NO_RESPONSE_BODY
    for method, path in NO_RESPONSE_BODY:
        responses = schema["paths"][path][method]["responses"]
        assert [s for s in responses if s.startswith("2")] == ["204"]
        assert "content" not in responses["204"]


def test_the_response_check_catches_an_operation_without_a_schema(schema):
    broken = {
        "paths": {
            "/api/account": {
                "get": {"responses": {"200": {"description": "No response body"}}},
            },
            "/api/usage/export.csv": {
                "get": {
                    "responses": {"200": {"content": {"text/csv": {"schema": {"type": "string"}}}}}
                }
            },
        }
    }
    assert lacking_response_schema(broken) == {("get", "/api/account")}


def test_every_write_has_a_request_body_except_those_taking_none(schema):
    assert lacking_request_body(schema) == NO_REQUEST_BODY
    for method, path in NO_REQUEST_BODY:
        assert "requestBody" not in schema["paths"][path][method]


def test_operation_ids_are_unique_and_explicit(schema):
    ids = [operation["operationId"] for _, operation in operations(schema)]
    assert len(ids) == len(set(ids)) == len(OPERATIONS)
    assert not any(re.search(r"_\d+$", i) for i in ids)


def test_error_responses_use_the_one_error_body(schema):
    detail = schema["components"]["schemas"]["ErrorDetailOut"]
    assert set(detail["properties"]) == {"message", "type", "code"}
    assert schema["components"]["schemas"]["ErrorOut"]["properties"]["error"] == {
        "$ref": "#/components/schemas/ErrorDetailOut"
    }
    for op, operation in operations(schema):
        errors = {s: r for s, r in operation["responses"].items() if s.startswith("4")}
        assert ("401" in errors) == (op not in PUBLIC), op
        for status, response in errors.items():
            media = response["content"]["application/json"]
            assert media["schema"] == {"$ref": "#/components/schemas/ErrorOut"}, (op, status)


def test_errors_documented_where_they_happen(schema):
    def statuses(method, path):
        return {s for s in schema["paths"][path][method]["responses"] if not s.startswith("2")}

    assert statuses("get", "/api/account") == {"401"}
    assert statuses("get", "/api/groups/{group_id}") == {"401", "404"}
    assert statuses("post", "/api/keys") == {"400", "401", "403", "404"}
    assert statuses("post", "/api/keys/{key_id}/revoke") == {"401", "403", "404"}
    assert statuses("get", "/api/usage") == {"400", "401", "404"}
    assert statuses("put", "/admin/groups/{group_id}/byok/{provider}") == {
        "400",
        "401",
        "403",
        "404",
    }
    assert statuses("post", "/admin/groups/{group_id}/byok/{provider}/keys") == {
        "400",
        "401",
        "403",
        "404",
        "409",
    }


@pytest.mark.django_db
def test_documented_error_body_matches_a_real_one(schema):
    tenant = make_tenant()
    client = Client(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")

    body = client.get("/api/groups/999999999").json()

    assert set(body) == set(schema["components"]["schemas"]["ErrorOut"]["properties"])
    assert set(body["error"]) == set(schema["components"]["schemas"]["ErrorDetailOut"]["required"])
    assert body["error"]["code"] == "LM-2004"


def test_token_scheme_is_defined_and_applied_to_every_operation(schema):
    schemes = schema["components"]["securitySchemes"]
    assert schemes["tokenAuth"]["type"] == "apiKey"
    assert (schemes["tokenAuth"]["in"], schemes["tokenAuth"]["name"]) == ("header", "Authorization")
    assert "Token <token>" in schemes["tokenAuth"]["description"]
    assert schemes["cookieAuth"] == {"type": "apiKey", "in": "cookie", "name": "sessionid"}
    for op, operation in operations(schema):
        expected = [{}] if op in PUBLIC else [{"tokenAuth": []}, {"cookieAuth": []}]
        assert operation["security"] == expected, op


@pytest.mark.parametrize(
    "path",
    [
        "/api/usage",
        "/api/usage/daily",
        "/api/usage/models",
        "/api/usage/cache",
        "/api/usage/export.csv",
    ],
)
def test_usage_filters_are_documented_query_parameters(schema, path):
    parameters = schema["paths"][path]["get"]["parameters"]
    query = {p["name"]: p for p in parameters if p["in"] == "query"}
    assert set(query) >= USAGE_FILTERS
    assert query["start"]["schema"] == {"type": "string", "format": "date-time"}
    # An id is bounded by its column: a larger one is a 400 naming the field, not a 500.
    assert query["group"]["schema"] == {
        "type": "integer",
        "format": "int64",
        "minimum": 1,
        "maximum": 2**63 - 1,
    }
    assert all(query[name].get("description") for name in USAGE_FILTERS)


def test_csv_export_is_documented_as_text_csv(schema):
    ok = schema["paths"]["/api/usage/export.csv"]["get"]["responses"]["200"]
    assert ok["content"] == {"text/csv": {"schema": {"type": "string"}}}


def test_list_routes_document_their_envelopes(schema):
    def ok_schema(method, path):
        return schema["paths"][path][method]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]

    components = schema["components"]["schemas"]
    assert ok_schema("get", "/api/keys") == {"$ref": "#/components/schemas/ApiKeyPage"}
    assert components["ApiKeyPage"]["properties"]["results"]["items"] == {
        "$ref": "#/components/schemas/ApiKeyOut"
    }
    assert ok_schema("get", "/api/usage") == {
        "$ref": "#/components/schemas/PaginatedUsageLogOutList"
    }
    assert ok_schema("get", "/api/accounts/{account_id}/ledger") == {
        "$ref": "#/components/schemas/PaginatedLedgerOutList"
    }
    created = schema["paths"]["/api/keys"]["post"]["responses"]["201"]
    assert created["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ApiKeyCreatedOut"
    }
    assert "secret" in components["ApiKeyCreatedOut"]["properties"]
    assert "eligible_providers" in components["PoolListOut"]["properties"]


@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
def test_docs_pages_are_html_with_local_assets_only(path):
    response = Client().get(path)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert not re.search(r"https?://", html)
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    # Swagger UI's start-up script is the page's own (?script), a file: no inline script
    # under the Content-Security-Policy.
    own = [a for a in assets if a.startswith(f"{path}?script")]
    assert "<script>" not in html
    assert assets and all(
        a.startswith("/static/drf_spectacular_sidecar/") for a in assets if a not in own
    )
    started = html + "".join(Client().get(a.replace("&amp;", "&")).content.decode() for a in own)
    assert "/api/schema" in started
    assert "default-src 'self'" in response["Content-Security-Policy"]


@pytest.mark.parametrize("path", ["/api/schema", "/api/schema/"])
def test_schema_is_served_at_both_paths(path):
    response = Client().get(path, HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    assert "/api/keys" in response.json()["paths"]
