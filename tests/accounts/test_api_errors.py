"""Every tenant API error (/api, /admin/groups) is JSON in our error language, at any status:
numbers out of range are 400 LM-2001 naming the field before the database sees them, unknown
or malformed ids are 404 LM-2004, unknown paths and methods answer JSON, and an unexpected
exception is a JSON 500 with no traceback."""

from __future__ import annotations

import base64

import pytest
from django.urls import include, path
from rest_framework.test import APIClient
from rest_framework.views import APIView

from accounts.models import ApiKey, Group
from config import urls as project_urls
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db

BIGINT_MAX = 2**63 - 1  # PostgreSQL bigint
INTEGER_MAX = 2**31 - 1  # PostgreSQL integer (Django's PositiveIntegerField)
BUDGET_MAX = 10**15  # a billion dollars of micro-USD: the most a person types (core/money.py)


def client_for(tenant, **kwargs) -> APIClient:
    client = APIClient(**kwargs)
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


def error_of(response, status: int) -> dict:
    """The error body of a JSON answer with this status."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json"
    return response.json()["error"]


def test_a_key_budget_past_a_billion_dollars_is_400_naming_the_field_and_nothing_is_stored():
    tenant = make_tenant()
    client = client_for(tenant)

    for budget in (10**30, BIGINT_MAX + 1, BIGINT_MAX, BUDGET_MAX + 1):
        response = client.post(
            "/api/keys",
            {"group": tenant.group_id, "budget_max_micro": budget},
            format="json",
        )
        error = error_of(response, 400)
        assert error["code"] == "LM-2001"
        assert error["message"].startswith("budget_max_micro: ")
    assert ApiKey.objects.filter(group_id=tenant.group_id).count() == 1

    at_the_edge = client.post(
        "/api/keys", {"group": tenant.group_id, "budget_max_micro": BUDGET_MAX}, format="json"
    )
    assert at_the_edge.status_code == 201
    assert ApiKey.objects.get(pk=at_the_edge.json()["id"]).budget_max_micro == BUDGET_MAX


@pytest.mark.parametrize(
    ("field", "too_big", "largest"),
    [
        ("rpm_limit", 2**63, INTEGER_MAX),
        ("rpm_limit", INTEGER_MAX + 1, INTEGER_MAX),
        ("tpm_limit", 2**63, INTEGER_MAX),
        ("concurrency_limit", INTEGER_MAX + 1, INTEGER_MAX),
        ("caller_rpm_limit", INTEGER_MAX + 1, INTEGER_MAX),
        ("caller_tpm_limit", INTEGER_MAX + 1, INTEGER_MAX),
        ("web_units_per_day", INTEGER_MAX + 1, INTEGER_MAX),
        ("budget_max_micro", BIGINT_MAX + 1, BUDGET_MAX),
        ("budget_max_micro", BUDGET_MAX + 1, BUDGET_MAX),
        ("caller_budget_max_micro", 10**30, BUDGET_MAX),
    ],
)
def test_a_group_limit_past_its_column_is_400_naming_the_field(field, too_big, largest):
    tenant = make_tenant()
    client = client_for(tenant)

    response = client.patch(f"/api/groups/{tenant.group_id}", {field: too_big}, format="json")

    error = error_of(response, 400)
    assert error["code"] == "LM-2001"
    assert error["message"].startswith(f"{field}: ")
    assert getattr(Group.objects.get(pk=tenant.group_id), field) is None
    accepted = client.patch(f"/api/groups/{tenant.group_id}", {field: largest}, format="json")
    assert accepted.status_code == 200
    assert getattr(Group.objects.get(pk=tenant.group_id), field) == largest


def test_a_new_groups_limits_are_bounded_as_a_changed_groups_are():
    tenant = make_tenant()
    client = client_for(tenant)

    response = client.post("/api/groups", {"name": "big", "rpm_limit": 2**63}, format="json")

    assert error_of(response, 400)["message"].startswith("rpm_limit: ")
    assert not Group.objects.filter(name="big").exists()


@pytest.mark.parametrize(
    "url",
    [
        "/api/groups/abc",
        "/api/groups/-1",
        "/api/groups/1.5",
        "/api/groups/99999999999999999999999",
        f"/api/groups/{2**63}",
        "/api/keys/abc",
        "/api/keys/abc/revoke",
        f"/api/keys/{2**64}",
        "/api/accounts/abc/wallet",
        f"/api/accounts/{2**63}/ledger",
        "/api/groups/abc/spend",
        "/api/usage/requests/%00",
        "/api/usage/requests/" + "x" * 5000,
        "/api/receipts/%00nul",
        "/admin/groups/abc/byok",
        f"/admin/groups/{2**70}/byok",
        "/admin/groups/{group}/byok/keys/abc",
        "/admin/groups/{group}/byok/keys/" + "9" * 30,
        "/api/no-such-route",
        "/api/groups/{group}/no-such-thing",
        "/admin/groups/",
        "/admin/groups/{group}/byok/stub-openai/nothing",
    ],
)
def test_unknown_or_malformed_ids_and_paths_are_a_json_404(url):
    tenant = make_tenant()
    url = url.replace("{group}", str(tenant.group_id))
    # Each route's own method, so the 404 is the id's, not a 405.
    method = "post" if url.endswith("/revoke") else "delete" if "/byok/keys/" in url else "get"

    response = getattr(client_for(tenant), method)(url)

    error = error_of(response, 404)
    assert error == {"message": error["message"], "type": "not_found_error", "code": "LM-2004"}


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("put", "/admin/groups/{group}/byok/%00"),
        ("post", "/admin/groups/{group}/byok/%00/keys"),
        ("put", "/admin/groups/{group}/byok/" + "p" * 3000),
    ],
)
def test_a_malformed_provider_is_refused_in_json_before_the_database(method, url):
    tenant = make_tenant()
    url = url.replace("{group}", str(tenant.group_id))

    response = getattr(client_for(tenant), method)(
        url, {"fallback": True, "label": "l", "key": "sk-abcd"}, format="json"
    )

    assert response.status_code in (400, 404), response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] in ("LM-2001", "LM-2004")


def forged_cursor(text: str) -> str:
    """A cursor as DRF encodes one (base64 of its query string), with a made-up position."""
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor", ["p=garbage", "o=0&r=0&p=2026-13-45+00:00", "r=1&p=abc", "o=99999999999999999999&p=x"]
)
@pytest.mark.parametrize("route", ["/api/usage", "/api/accounts/{account}/ledger", "/api/audit"])
def test_a_forged_cursor_is_a_json_404_not_a_database_error(route, cursor):
    tenant = make_tenant()
    url = route.replace("{account}", str(tenant.account_id))

    response = client_for(tenant).get(url, {"cursor": forged_cursor(cursor)})

    # Its position is no value of the ordering's field (a date-time, an id): it names no page.
    error = error_of(response, 404)
    assert error == {"message": "Invalid cursor", "type": "not_found_error", "code": "LM-2004"}


def test_a_method_the_route_does_not_take_is_a_json_405():
    tenant = make_tenant()

    response = client_for(tenant).delete("/api/groups")

    error = error_of(response, 405)
    assert error["code"] == "LM-2001"
    assert response["Allow"] == "GET, POST, HEAD, OPTIONS"


def test_a_browser_asking_for_html_still_gets_errors_as_json():
    tenant = make_tenant()

    response = client_for(tenant).get(f"/api/groups/{2**20}", HTTP_ACCEPT="text/html")

    assert error_of(response, 404)["code"] == "LM-2004"


def test_malformed_json_and_a_body_that_is_not_an_object_are_400():
    tenant = make_tenant()
    client = client_for(tenant)

    broken = client.post("/api/keys", b'{"group": ', content_type="application/json")
    a_list = client.post("/api/keys", [1, 2], format="json")
    nan = client.post(
        "/api/keys", b'{"group": 1, "budget_max_micro": NaN}', content_type="application/json"
    )

    assert error_of(broken, 400)["code"] == "LM-2001"
    assert error_of(a_list, 400)["code"] == "LM-2001"
    assert error_of(nan, 400)["code"] == "LM-2001"


def test_a_body_over_the_upload_cap_is_json(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    tenant = make_tenant()

    response = client_for(tenant, raise_request_exception=False).post(
        "/api/keys",
        b'{"name": "' + b"x" * 2000 + b'"}',
        content_type="application/json",
    )

    assert response.status_code in (400, 413), response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] in ("LM-2001", "LM-2013")


# ---------------------------------------------------------------- unexpected exceptions


class Boom(RuntimeError):
    pass


class ExplodingApiView(APIView):
    def get(self, request):
        raise Boom("secret detail that must not leak")


def exploding_django_view(request):
    raise Boom("secret detail that must not leak")


# The project's URLs, with two routes that fail the way a bug would: inside a DRF view and in
# a plain Django view. The error handlers are the project's own (config.urls).
urlpatterns = [
    path("api/_test/drf-boom", ExplodingApiView.as_view()),
    path("admin/groups/_test/django-boom", exploding_django_view),
    path("", include("config.urls")),
]
handler400 = project_urls.handler400
handler403 = project_urls.handler403
handler404 = project_urls.handler404
handler500 = project_urls.handler500


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("url", ["/api/_test/drf-boom", "/admin/groups/_test/django-boom"])
def test_an_unexpected_exception_is_a_json_500_without_its_detail(url, caplog):
    tenant = make_tenant()

    response = client_for(tenant, raise_request_exception=False).get(url)

    error = error_of(response, 500)
    assert error == {"message": "Internal error.", "type": "api_error", "code": "LM-5001"}
    assert b"secret detail" not in response.content and b"Traceback" not in response.content
    assert any(r.exc_info and isinstance(r.exc_info[1], Boom) for r in caplog.records)


@pytest.mark.urls(__name__)
def test_a_404_outside_the_tenant_api_keeps_djangos_page():
    response = APIClient(raise_request_exception=False).get("/no-such-page-anywhere")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
