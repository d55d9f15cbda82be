"""Scrape and search through real processes: the gateway, the stub as renderer and search
vendor, our own fetcher against a local test site; money exact to the micro-USD.

Prices (tests/support/web.py): a page 100, a rendered page 2,000, a query 5,000 micro-USD.
A prepaid request reserves its plan's worst case (every platform link billing its unit,
x1.2) before its first call, and commits what its units cost.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from accounts.models import Group
from billing.models import Reservation, Wallet
from core.money import with_margin_micro
from tests.byok.helpers import team_keys
from tests.support.processes import WEB_TOKEN
from tests.support.testsite import (
    ARTICLE_SENTENCES,
    ARTICLE_TITLE,
    BOILERPLATE,
    article_html,
)
from tests.support.usage import settled
from tests.support.waits import wait_until
from tests.support.web import (
    PAGE_MICRO,
    QUERY_MICRO,
    RENDER_KEY,
    RENDERED_MICRO,
    SEARCH_KEY,
    WEB_ENV,
    search_results,
    web,
    web_profiles,
    web_stack,
)

WALLET = 100_000_000


@pytest.fixture(scope="module")
def web_gateway(module_gateways):
    # A 1.5 MB cap on what our fetcher reads, so the huge page is refused quickly.
    return module_gateways(**WEB_ENV, TOLLGATE_WEB_MAX_BYTES="1500000")


@pytest.fixture
def full(transactional_db, web_gateway, stub, site):
    return web_stack(web_gateway, stub, site, web_profiles(stub.url))


@pytest.fixture
def direct_only(transactional_db, web_gateway, stub, site):
    return web_stack(
        web_gateway, stub, site, web_profiles(stub.url, render=False, search=False, timeout_s=1)
    )


def wallet_of(tenant) -> int:
    return Wallet.objects.get(account_id=tenant.account_id).balance_micro


def scrape(stack, tenant, url, **body):
    return web(stack.url, tenant.api_key, "scrape", {"url": url, **body})


# ---------------------------------------------------------------- scrape


def test_a_page_is_fetched_by_our_fetcher_extracted_and_billed_one_page(full, site):
    tenant = full.tenant(wallet_micro=WALLET)

    response = scrape(full, tenant, f"{site.url}/", formats=["markdown", "html"])

    assert response.status_code == 200, response.text
    page = response.json()
    assert page["url"] == page["final_url"] == f"{site.url}/"
    assert (page["status"], page["content_type"]) == (200, "text/html")
    assert page["title"] == f"{ARTICLE_TITLE} | Tollgate test site"
    for sentence in ARTICLE_SENTENCES:
        assert sentence in page["text"]
    assert "Subscribe to our newsletter" in BOILERPLATE[3]
    assert BOILERPLATE[3] not in page["text"] and BOILERPLATE[4] not in page["text"]
    assert ARTICLE_SENTENCES[0] in page["markdown"]
    assert page["html"] == article_html()
    assert page["bytes"] == len(article_html().encode())
    assert (page["provider"], page["served_by"]) == ("direct", "platform")
    assert page["units"] == {"page": 1, "rendered_page": 0, "query": 0}
    assert page["cost_micro"] == PAGE_MICRO
    assert site.hits == ["/"]
    assert full.stub.calls() == []  # no vendor was needed
    [row] = settled(tenant, 1)
    assert (row.endpoint, row.provider, row.served_by, row.status) == (
        "web.scrape",
        "direct",
        "platform",
        200,
    )
    assert (row.web_pages, row.web_rendered_pages, row.web_queries) == (1, 0, 0)
    assert row.web_url == f"{site.url}/"  # the page asked for: the usage log's readers see it
    assert (row.provider_cost_micro, row.tokens_in, row.tokens_out) == (PAGE_MICRO, 0, 0)
    assert row.bytes_out == len(response.content)
    assert wallet_of(tenant) == WALLET - PAGE_MICRO
    [reservation] = Reservation.objects.filter(request_id=row.request_id)
    # The plan's worst case: our page then a rendered one, x1.2.
    assert reservation.amount_micro == with_margin_micro(
        PAGE_MICRO + RENDERED_MICRO, margin_pct=120
    )
    assert reservation.status == "committed"


def test_a_page_written_by_scripts_goes_on_to_the_renderer_and_both_units_are_billed(full, site):
    tenant = full.tenant(wallet_micro=WALLET)

    response = scrape(full, tenant, f"{site.url}/js")

    assert response.status_code == 200, response.text
    page = response.json()
    assert "Rendered paragraph one." in page["text"]
    assert page["title"] == "Rendered title" or "Rendered title" in page["text"]
    assert (page["provider"], page["served_by"]) == ("stub-render", "platform")
    assert page["units"] == {"page": 1, "rendered_page": 1, "query": 0}
    assert page["cost_micro"] == PAGE_MICRO + RENDERED_MICRO
    [call] = full.stub.calls()
    assert (call["path"], call["key"], call["body"]) == (
        "/web/v1/render",
        RENDER_KEY,
        {
            "url": f"{site.url}/js",
            "resolve": {"host": "127.0.0.1", "port": site.port, "addresses": ["127.0.0.1"]},
            "follow_redirects": False,
        },
    )
    assert site.hits == ["/js", "/js"]  # our fetcher, then the renderer's browser
    [row] = settled(tenant, 1)
    assert (row.web_pages, row.web_rendered_pages, row.provider_cost_micro) == (
        1,
        1,
        PAGE_MICRO + RENDERED_MICRO,
    )
    assert [(a.provider, a.outcome) for a in row.attempts] == [
        ("direct", "ok"),
        ("stub-render", "ok"),
    ]
    assert wallet_of(tenant) == WALLET - PAGE_MICRO - RENDERED_MICRO


def test_render_js_goes_straight_to_the_renderer(full, site):
    tenant = full.tenant(wallet_micro=WALLET)

    response = scrape(full, tenant, f"{site.url}/js", render_js=True)

    assert response.status_code == 200, response.text
    assert response.json()["units"] == {"page": 0, "rendered_page": 1, "query": 0}
    assert response.json()["cost_micro"] == RENDERED_MICRO
    assert site.hits == ["/js"]  # only the renderer's
    [row] = settled(tenant, 1)
    assert (row.web_pages, row.web_rendered_pages, row.provider_cost_micro) == (
        0,
        1,
        RENDERED_MICRO,
    )


def test_a_page_over_our_size_cap_is_left_to_the_renderer_and_only_its_unit_billed(full, site):
    tenant = full.tenant(wallet_micro=WALLET)

    response = scrape(full, tenant, f"{site.url}/huge?mb=2")

    assert response.status_code == 200, response.text
    assert response.json()["provider"] == "stub-render"
    assert response.json()["units"] == {"page": 0, "rendered_page": 1, "query": 0}
    [row] = settled(tenant, 1)
    assert row.provider_cost_micro == RENDERED_MICRO
    assert wallet_of(tenant) == WALLET - RENDERED_MICRO


@pytest.mark.parametrize(
    "path",
    ["/redirect-private", "/redirect-metadata"],
)
def test_a_redirect_to_a_private_address_is_refused_and_no_vendor_is_asked(full, site, path):
    tenant = full.tenant(wallet_micro=WALLET)

    response = scrape(full, tenant, f"{site.url}{path}")

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "LM-2001"
    assert site.hits == [path]
    assert full.stub.calls() == []  # the renderer may not fetch it either
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.provider_cost_micro, row.web_pages) == (
        400,
        "LM-2001",
        0,
        0,
    )
    assert row.bandwidth_charge_micro == 0
    assert wallet_of(tenant) == WALLET


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.2/",
        "http://2130706434/",  # 127.0.0.2
        "http://0x7f.0.0.2/",
        "http://0177.0.0.2/",
        "http://127.2/",
        "http://[::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
        "ftp://example.com/",
        "file:///etc/passwd",
        "http://user:pw@example.com/",
    ],
)
def test_urls_that_may_not_be_fetched_are_refused_before_any_call(full, site, url):
    tenant = full.tenant(wallet_micro=WALLET)

    response = scrape(full, tenant, url, render_js=url.startswith("http://10."))

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "LM-2001"
    assert full.stub.calls() == []
    assert site.hits == []


def test_a_gzip_bomb_is_stopped_at_the_decompression_cap(direct_only, site):
    tenant = direct_only.tenant(wallet_micro=WALLET)

    response = scrape(direct_only, tenant, f"{site.url}/gzip-bomb")

    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "LM-5001"
    assert "inflates past the cap" in response.json()["error"]["message"]
    assert site.hits == ["/gzip-bomb"]  # a cap is not worth a second try
    [row] = settled(tenant, 1)
    assert (row.web_pages, row.provider_cost_micro) == (0, 0)
    assert wallet_of(tenant) == WALLET


def test_a_slow_page_times_out_twice_and_bills_nothing(direct_only, site):
    tenant = direct_only.tenant(wallet_micro=WALLET)

    started = time.monotonic()
    response = scrape(direct_only, tenant, f"{site.url}/slow?s=5")
    waited = time.monotonic() - started

    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "LM-5002"
    assert site.hits == ["/slow?s=5", "/slow?s=5"]  # two tries of the profile, 1 s each
    assert waited < 4.5
    [row] = settled(tenant, 1)
    assert [a.outcome for a in row.attempts] == ["timeout", "timeout"]
    assert (row.web_pages, row.provider_cost_micro) == (0, 0)


def test_a_redirect_chain_is_followed_and_too_long_a_chain_refused(direct_only, site):
    tenant = direct_only.tenant(wallet_micro=WALLET)

    ok = scrape(direct_only, tenant, f"{site.url}/redirect-chain/3")
    assert ok.status_code == 200, ok.text
    assert ok.json()["final_url"] != f"{site.url}/redirect-chain/3"
    too_long = scrape(direct_only, tenant, f"{site.url}/redirect-chain/9")
    assert too_long.status_code == 502, too_long.text
    assert "redirect" in too_long.json()["error"]["message"]
    rows = settled(tenant, 2)
    assert [r.provider_cost_micro for r in rows] == [PAGE_MICRO, 0]


def test_a_status_page_is_a_result_not_a_failure(direct_only, site):
    tenant = direct_only.tenant(wallet_micro=WALLET)

    response = scrape(direct_only, tenant, f"{site.url}/status/404")

    assert response.status_code == 200, response.text
    assert response.json()["status"] == 404
    assert response.json()["cost_micro"] == PAGE_MICRO


# ---------------------------------------------------------------- search


def test_search_answers_the_vendors_results_and_bills_one_query(full):
    tenant = full.tenant(wallet_micro=WALLET)

    response = web(
        full.url, tenant.api_key, "search", {"query": "LLM gateways, 2026!", "max_results": 3}
    )

    assert response.status_code == 200, response.text
    assert response.json()["results"] == search_results("LLM gateways, 2026!", 3)
    assert response.json()["units"] == {"page": 0, "rendered_page": 0, "query": 1}
    assert response.json()["cost_micro"] == QUERY_MICRO
    [call] = full.stub.calls()
    assert (call["path"], call["key"], call["body"]) == (
        "/web/v1/search",
        SEARCH_KEY,
        {"query": "LLM gateways, 2026!", "max_results": 3},
    )
    [row] = settled(tenant, 1)
    assert (row.endpoint, row.web_queries, row.provider_cost_micro) == (
        "web.search",
        1,
        QUERY_MICRO,
    )
    assert wallet_of(tenant) == WALLET - QUERY_MICRO


def test_max_results_over_the_cap_is_refused_before_the_vendor(full):
    tenant = full.tenant(wallet_micro=WALLET)

    response = web(full.url, tenant.api_key, "search", {"query": "x", "max_results": 11})

    assert response.status_code == 400
    assert "1 to 10" in response.json()["error"]["message"]
    assert full.stub.calls() == []


def test_search_on_a_team_key_costs_nothing_and_carries_the_team_key(full):
    tenant = full.tenant(wallet_micro=WALLET)
    team_keys(full, tenant, "stub-search", ["sk-team-search-1111"])

    response = web(full.url, tenant.api_key, "search", {"query": "team", "max_results": 2})

    assert response.status_code == 200, response.text
    assert (response.json()["served_by"], response.json()["cost_micro"]) == ("team", 0)
    [call] = full.stub.calls()
    assert call["key"] == "sk-team-search-1111"
    [row] = settled(tenant, 1)
    assert (row.served_by, row.web_queries, row.provider_cost_micro) == ("team", 1, 0)
    assert wallet_of(tenant) == WALLET
    assert not Reservation.objects.filter(request_id=row.request_id).exists()


def test_a_refused_team_key_with_fallback_off_is_lm_3021_and_the_platform_is_not_asked(full):
    tenant = full.tenant(wallet_micro=WALLET)
    team_keys(full, tenant, "stub-search", ["sk-team-search-2222"])
    full.stub.faults({"kind": "401", "match": {"key": "sk-team-search-2222"}})

    response = web(full.url, tenant.api_key, "search", {"query": "team", "max_results": 2})

    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "LM-3021"
    assert [c["key"] for c in full.stub.calls()] == ["sk-team-search-2222"]
    [row] = settled(tenant, 1)
    assert (row.provider_cost_micro, row.web_queries) == (0, 0)


def test_a_vendor_failure_is_retried_once_then_the_breaker_opens(full):
    tenant = full.tenant(wallet_micro=WALLET)
    full.stub.faults({"kind": "500", "times": 100, "match": {"key": SEARCH_KEY}})
    body = {"query": "down", "max_results": 1}

    for _ in range(5):  # TOLLGATE_BREAKER_FAILURES: 5 failed requests of 2 tries each
        failed = web(full.url, tenant.api_key, "search", body)
        assert failed.json()["error"]["code"] == "LM-5001"
    assert len(full.stub.calls()) == 10
    fast = web(full.url, tenant.api_key, "search", body)

    assert fast.status_code == 503
    assert fast.json()["error"]["code"] == "LM-5003"
    assert len(full.stub.calls()) == 10  # failing fast: no vendor call
    rows = settled(tenant, 6)
    assert sum(r.provider_cost_micro for r in rows) == 0
    assert wallet_of(tenant) == WALLET


# ---------------------------------------------------------------- money before the vendor


def test_the_daily_unit_budget_refuses_before_the_vendor_until_the_next_utc_day(full, site):
    tenant = full.tenant(wallet_micro=WALLET)
    Group.objects.filter(pk=tenant.group_id).update(web_units_per_day=2)
    full.gateway.reload()

    assert scrape(full, tenant, f"{site.url}/").status_code == 200
    assert web(full.url, tenant.api_key, "search", {"query": "q"}).status_code == 200
    refused = scrape(full, tenant, f"{site.url}/a")

    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "LM-3004"
    now = datetime.now(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    assert abs(int(refused.headers["retry-after"]) - (midnight - now).total_seconds()) <= 2
    assert site.hits == ["/"]  # the third page was never fetched
    rows = settled(tenant, 3)
    assert [r.provider_cost_micro for r in rows] == [PAGE_MICRO, QUERY_MICRO, 0]
    assert wallet_of(tenant) == WALLET - PAGE_MICRO - QUERY_MICRO


def test_units_a_failed_call_took_are_given_back(direct_only, site):
    tenant = direct_only.tenant(wallet_micro=WALLET)
    Group.objects.filter(pk=tenant.group_id).update(web_units_per_day=1)
    direct_only.gateway.reload()

    assert scrape(direct_only, tenant, f"{site.url}/gzip-bomb").status_code == 502
    again = scrape(direct_only, tenant, f"{site.url}/")

    assert again.status_code == 200, again.text  # the failed fetch billed no unit


def test_a_wallet_that_cannot_cover_the_plan_is_refused_before_any_fetch(full, site):
    worst = with_margin_micro(PAGE_MICRO + RENDERED_MICRO, margin_pct=120)
    tenant = full.tenant(wallet_micro=worst - 1)

    response = scrape(full, tenant, f"{site.url}/")

    assert response.status_code == 402, response.text
    assert response.json()["error"]["code"] == "LM-4002"
    assert site.hits == []
    assert full.stub.calls() == []
    settled(tenant, 1)
    assert wallet_of(tenant) == worst - 1


def test_a_group_budget_refuses_lm_4001_before_any_fetch(full, site):
    tenant = full.tenant(wallet_micro=WALLET, invoiced=True, budget_micro=100)

    response = scrape(full, tenant, f"{site.url}/")

    assert response.status_code == 402, response.text
    assert response.json()["error"]["code"] == "LM-4001"
    assert site.hits == []


def test_an_invoiced_group_is_charged_its_units_on_its_counters(full, site):
    tenant = full.tenant(invoiced=True, budget_micro=1_000_000)

    assert scrape(full, tenant, f"{site.url}/js").status_code == 200

    settled(tenant, 1)
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.spent_micro, group.settled_micro, group.reserved_micro) == (
        PAGE_MICRO + RENDERED_MICRO,
        PAGE_MICRO + RENDERED_MICRO,
        0,
    )


def test_many_concurrent_scrapes_bill_exactly_once_each(full, site):
    import concurrent.futures

    tenant = full.tenant(wallet_micro=WALLET)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: scrape(full, tenant, f"{site.url}/"), range(40)))

    assert [a.status_code for a in answers] == [200] * 40
    rows = settled(tenant, 40)
    assert sum(r.provider_cost_micro for r in rows) == 40 * PAGE_MICRO
    assert wallet_of(tenant) == WALLET - 40 * PAGE_MICRO
    assert Wallet.objects.get(account_id=tenant.account_id).reserved_micro == 0


# ---------------------------------------------------------------- internal routes, auth


def test_internal_scrape_names_its_group_and_keeps_its_request_id_as_a_label(full, site):
    tenant = full.tenant(wallet_micro=WALLET)

    response = httpx.post(
        f"{full.url}/internal/scrape",
        json={"group": tenant.group_id, "request_id": "ingest-42", "url": f"{site.url}/"},
        headers={"Authorization": f"Bearer {WEB_TOKEN}"},
        timeout=30,
    )

    assert response.status_code == 200, response.text
    assert response.json()["request_id"] == "ingest-42"
    [row] = settled(tenant, 1)
    assert (row.endpoint, row.client_request_id, row.provider_cost_micro) == (
        "internal.scrape",
        "ingest-42",
        PAGE_MICRO,
    )
    assert row.request_id != "ingest-42"  # ours keys the books


def test_internal_routes_refuse_a_wrong_token(full, site):
    response = httpx.post(
        f"{full.url}/internal/search",
        json={"group": 1, "request_id": "x", "query": "q"},
        headers={"Authorization": "Bearer wrong"},
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "LM-1001"


def test_web_routes_refuse_a_missing_key(full, site):
    response = httpx.post(f"{full.url}/v1/web/scrape", json={"url": f"{site.url}/"})
    assert response.status_code == 401
    assert site.hits == []


# ---------------------------------------------------------------- the seed's retry rule, caps


def test_a_failure_the_vendor_billed_is_not_retried_and_is_on_the_books(full, site):
    tenant = full.tenant(wallet_micro=WALLET)
    full.stub.faults({"kind": "500", "credits": 1, "match": {"key": RENDER_KEY}})

    response = scrape(full, tenant, f"{site.url}/js", render_js=True)

    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "LM-5001"
    assert len(full.stub.calls()) == 1  # a try that recorded a billable unit is the last
    [row] = settled(tenant, 1)
    assert (row.web_rendered_pages, row.provider_cost_micro, row.provider) == (
        1,
        RENDERED_MICRO,
        "stub-render",
    )
    assert wallet_of(tenant) == WALLET - RENDERED_MICRO


def test_an_unbilled_vendor_failure_is_retried_once_on_the_same_profile(full, site):
    tenant = full.tenant(wallet_micro=WALLET)
    full.stub.faults({"kind": "500", "match": {"key": RENDER_KEY}})

    response = scrape(full, tenant, f"{site.url}/js", render_js=True)

    assert response.status_code == 200, response.text
    assert [c["status"] for c in full.stub.calls()] == [500, 200]
    [row] = settled(tenant, 1)
    assert [a.outcome for a in row.attempts] == ["upstream_error", "ok"]
    assert row.provider_cost_micro == RENDERED_MICRO


def test_the_group_concurrency_cap_holds_for_web_actions(direct_only, site):
    import concurrent.futures

    tenant = direct_only.tenant(wallet_micro=WALLET)
    Group.objects.filter(pk=tenant.group_id).update(concurrency_limit=1)
    direct_only.gateway.reload()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(scrape, direct_only, tenant, f"{site.url}/slow?s=0.8")
        wait_until(lambda: "/slow?s=0.8" in site.hits, what="the slow fetch to start")
        refused = scrape(direct_only, tenant, f"{site.url}/")
        assert slow.result().status_code == 200

    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "LM-3003"
    assert "/" not in site.hits


def test_a_team_key_refused_with_fallback_on_goes_to_the_platform_and_bills_it(full):
    tenant = full.tenant(wallet_micro=WALLET)
    team_keys(full, tenant, "stub-search", ["sk-team-search-3333"], fallback=True)
    full.stub.faults({"kind": "401", "match": {"key": "sk-team-search-3333"}})

    response = web(full.url, tenant.api_key, "search", {"query": "fallback", "max_results": 1})

    assert response.status_code == 200, response.text
    assert response.json()["served_by"] == "platform"
    assert [c["key"] for c in full.stub.calls()] == ["sk-team-search-3333", SEARCH_KEY]
    [row] = settled(tenant, 1)
    assert (row.served_by, row.provider_cost_micro) == ("platform", QUERY_MICRO)
    assert wallet_of(tenant) == WALLET - QUERY_MICRO


def test_a_scrape_past_the_action_deadline_is_lm_5002(spawn_gateway, transactional_db, stub, site):
    gateway = spawn_gateway(**WEB_ENV, TOLLGATE_WEB_ACTION_TIMEOUT_S="1")
    stack = web_stack(gateway, stub, site, web_profiles(stub.url, render=False, search=False))
    tenant = stack.tenant(wallet_micro=WALLET)

    started = time.monotonic()
    response = scrape(stack, tenant, f"{site.url}/slow?s=3")

    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "LM-5002"
    assert time.monotonic() - started < 2.5
    [row] = settled(tenant, 1)
    assert row.provider_cost_micro == 0
    assert wallet_of(tenant) == WALLET


@pytest.mark.parametrize("value", ["bogus", "10.0.0.0/8,300.1.1.1/32"])
def test_a_malformed_allow_list_stops_the_process_at_start(value, tmp_path):
    from tests.support.processes import manage_check

    result = manage_check(tmp_path, TOLLGATE_WEB_ALLOW_NETS=value)

    assert result.returncode != 0
    assert "Malformed setting TOLLGATE_WEB_ALLOW_NETS" in result.stderr
