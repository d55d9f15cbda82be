"""A web vendor refusing the request itself (a 4xx but 401/402/403/408/409/429) follows the
chain's rule for every kind: its status to the client (LM-2002), one call, no other profile;
a page our fetcher already got still serves. Prices: tests/support/web.py."""

from __future__ import annotations

import pytest

from billing.models import Wallet
from tests.support.usage import settled
from tests.support.web import (
    PAGE_MICRO,
    RENDER_KEY,
    SEARCH_KEY,
    WEB_ENV,
    web,
    web_profiles,
    web_stack,
)

WALLET = 100_000_000


@pytest.fixture(scope="module")
def web_gateway(module_gateways):
    return module_gateways(**WEB_ENV)


@pytest.fixture
def full(transactional_db, web_gateway, stub, site):
    return web_stack(web_gateway, stub, site, web_profiles(stub.url))


def wallet_of(tenant) -> int:
    return Wallet.objects.get(account_id=tenant.account_id).balance_micro


def trail(row) -> list[tuple]:
    return [(a.provider, a.outcome, a.upstream_status) for a in row.attempts]


def test_a_refused_render_answers_the_vendors_status_once_and_bills_nothing(full, site):
    tenant = full.tenant(wallet_micro=WALLET)
    full.stub.faults({"kind": "422", "message": "unsupported url", "match": {"key": RENDER_KEY}})

    response = web(full.url, tenant.api_key, "scrape", {"url": f"{site.url}/js", "render_js": True})

    assert response.status_code == 422, response.text
    assert response.json() == {
        "error": {
            "message": "The upstream provider refused the request (HTTP 422).",
            "type": "invalid_request_error",
            "code": "LM-2002",
        }
    }
    assert [(c["key"], c["status"]) for c in full.stub.calls()] == [(RENDER_KEY, 422)]
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.web_rendered_pages, row.provider_cost_micro) == (
        422,
        "LM-2002",
        0,
        0,
    )
    assert trail(row) == [("stub-render", "refused_by_vendor", 422)]
    assert wallet_of(tenant) == WALLET


def test_a_page_our_fetcher_got_still_serves_when_the_renderer_refuses(full, site):
    tenant = full.tenant(wallet_micro=WALLET)
    full.stub.faults({"kind": "400", "match": {"key": RENDER_KEY}})

    response = web(full.url, tenant.api_key, "scrape", {"url": f"{site.url}/js"})

    assert response.status_code == 200, response.text
    page = response.json()
    assert (page["provider"], page["units"], page["cost_micro"]) == (
        "direct",
        {"page": 1, "rendered_page": 0, "query": 0},
        PAGE_MICRO,
    )
    assert [(c["key"], c["status"]) for c in full.stub.calls()] == [(RENDER_KEY, 400)]
    [row] = settled(tenant, 1)
    assert trail(row) == [("direct", "ok", 200), ("stub-render", "refused_by_vendor", 400)]
    assert wallet_of(tenant) == WALLET - PAGE_MICRO


def test_a_refused_search_is_not_retried(full):
    tenant = full.tenant(wallet_micro=WALLET)
    full.stub.faults({"kind": "400", "times": 2, "match": {"key": SEARCH_KEY}})

    response = web(full.url, tenant.api_key, "search", {"query": "refused", "max_results": 1})

    assert (response.status_code, response.json()["error"]["code"]) == (400, "LM-2002")
    assert len(full.stub.calls()) == 1
    [row] = settled(tenant, 1)
    assert (row.web_queries, row.provider_cost_micro) == (0, 0)
    assert wallet_of(tenant) == WALLET
