"""Redirects never reach an internal service, on either scrape path (our fetcher, and the
renderer with render_js), and a crawl's seed is judged as a scrape's URL: real processes (a
gateway, the stub as the rendering vendor) and local HTTP servers counting their requests.

The gateway may fetch one address only, 127.0.0.3 (TOLLGATE_WEB_ALLOW_NETS), where the "public"
test site runs. The internal service listens where loopback names lead: 127.0.0.1 (what
`localhost` and this machine's host name resolve to) and ::1. A page of the public site
redirects to the internal service in every spelling a resolver or a socket accepts; the
internal service must receive no request at all (not one refused afterwards), and the tenant
is billed nothing.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from billing.models import Wallet
from tests.support.testsite import TestSite
from tests.support.usage import settled
from tests.support.web import (
    PAGE_MICRO,
    RENDER_KEY,
    RENDERED_MICRO,
    assert_refused_unbilled,
    loopback_names,
    web,
    web_profiles,
    web_stack,
)
from webfetch.models import CrawlJob

WALLET = 100_000_000
PUBLIC_HOST = "127.0.0.3"


@pytest.fixture(scope="module")
def public_site():
    with TestSite(host=PUBLIC_HOST) as server:
        yield server


@pytest.fixture(scope="module")
def internal_v4():
    with TestSite(host="127.0.0.1") as server:
        yield server


@pytest.fixture(scope="module")
def internal_v6():
    with TestSite(host="::1") as server:
        yield server


@pytest.fixture(scope="module")
def gateway(module_gateways):
    return module_gateways(
        TOLLGATE_WEB_ALLOW_NETS=f"{PUBLIC_HOST}/32", TOLLGATE_CRAWL_HOST_DELAY_MS="0"
    )


@pytest.fixture
def stack(transactional_db, gateway, stub, public_site, internal_v4, internal_v6):
    internal_v4.clear()
    internal_v6.clear()
    return web_stack(gateway, stub, public_site, web_profiles(stub.url))


@pytest.fixture
def tenant(stack):
    return stack.tenant(wallet_micro=WALLET)


def internal_targets(v4_port: int, v6_port: int) -> list[tuple[str, str, str]]:
    """(id, the internal URL, the host as the refusal names it) for every spelling."""
    names = [(name, f"http://{name}:{v4_port}/secret", name) for name in loopback_names()]
    literals = [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "2130706433"),  # one decimal integer
        ("0177.0.0.1", "0177.0.0.1"),  # octal
        ("0x7f.0.0.1", "0x7f.0.0.1"),  # hex part
        ("0x7f000001", "0x7f000001"),  # one hex integer
        ("127.1", "127.1"),  # the last part fills three bytes
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),  # IPv4-mapped: a socket reaches 127.0.0.1
        ("[::ffff:0:127.0.0.1]", "::ffff:0:7f00:1"),  # IPv4-translated (RFC 2765)
        ("[64:ff9b::7f00:1]", "64:ff9b::7f00:1"),  # NAT64 of 127.0.0.1
        ("[2002:7f00:1::]", "2002:7f00:1::"),  # 6to4 of 127.0.0.1
    ]
    return [
        ("localhost", f"http://localhost:{v4_port}/secret", "localhost"),
        *names,
        *[(host, f"http://{host}:{v4_port}/secret", shown) for host, shown in literals],
        ("[::1]", f"http://[::1]:{v6_port}/secret", "::1"),
    ]


# The ports are the servers' own; ids and hosts are known before they start.
TARGET_IDS = [target_id for target_id, _, _ in internal_targets(1, 2)]


def redirect_to(site: TestSite, target: str) -> str:
    return f"{site.url}/redirect?to={quote(target, safe='')}"


def paths(site: TestSite) -> list[str]:
    """The paths the site was asked for, in order (queries aside: they hold the targets)."""
    return [hit.split("?", 1)[0] for hit in site.hits]


def scrape(stack, tenant, url: str, *, render_js: bool):
    return web(stack.url, tenant.api_key, "scrape", {"url": url, "render_js": render_js})


def assert_no_request_reached_the_internal_service(internal_v4, internal_v6) -> None:
    assert (internal_v4.hits, internal_v6.hits) == ([], [])


@pytest.mark.parametrize("render_js", [False, True], ids=["direct", "render_js"])
@pytest.mark.parametrize("target_id", TARGET_IDS)
def test_a_redirect_to_the_internal_service_is_refused_before_any_request_reaches_it(
    stack, tenant, public_site, internal_v4, internal_v6, target_id, render_js
):
    targets = {t[0]: t[1:] for t in internal_targets(internal_v4.port, internal_v6.port)}
    target, shown = targets[target_id]
    url = redirect_to(public_site, target)

    response = scrape(stack, tenant, url, render_js=render_js)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "message": f"{shown} is not a public address (loopback)",
        "type": "invalid_request_error",
        "code": "LM-2001",
    }
    assert_no_request_reached_the_internal_service(internal_v4, internal_v6)
    assert paths(public_site) == ["/redirect"]
    calls = stack.stub.calls()
    if render_js:
        # The renderer loaded the asked page only and handed its redirect back.
        assert [(c["key"], c["body"]["url"], c["body"]["follow_redirects"]) for c in calls] == [
            (RENDER_KEY, url, False)
        ]
    else:
        assert calls == []  # a refused URL ends the request: no renderer tries it
    assert_refused_unbilled(tenant, wallet_micro=WALLET, error="LM-2001")


@pytest.mark.parametrize("render_js", [False, True], ids=["direct", "render_js"])
@pytest.mark.parametrize("middle", ["127.0.0.1", "localhost"])
def test_a_bounce_through_the_internal_service_and_back_out_is_refused_at_its_internal_hop(
    stack, tenant, public_site, internal_v4, internal_v6, middle, render_js
):
    back_out = f"{public_site.url}/js"
    inner = f"http://{middle}:{internal_v4.port}/redirect?to={quote(back_out, safe='')}"
    url = redirect_to(public_site, inner)

    response = scrape(stack, tenant, url, render_js=render_js)

    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == f"{middle} is not a public address (loopback)"
    assert_no_request_reached_the_internal_service(internal_v4, internal_v6)
    assert paths(public_site) == ["/redirect"]  # never back out
    assert len(stack.stub.calls()) == (1 if render_js else 0)
    assert_refused_unbilled(tenant, wallet_micro=WALLET, error="LM-2001")


def test_a_public_redirect_is_followed_hop_by_hop_through_the_renderer_and_billed_once(
    stack, tenant, public_site
):
    # The control of the refusals above: the same redirect, to a page the gateway may fetch.
    target = f"{public_site.url}/js"
    url = redirect_to(public_site, target)

    response = scrape(stack, tenant, url, render_js=True)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["final_url"], answer["cost_micro"]) == (target, RENDERED_MICRO)
    assert answer["units"] == {"page": 0, "rendered_page": 1, "query": 0}
    assert "Rendered paragraph one." in answer["text"]
    pin = {"host": PUBLIC_HOST, "port": public_site.port, "addresses": [PUBLIC_HOST]}
    assert [c["body"] for c in stack.stub.calls()] == [
        {"url": url, "resolve": pin, "follow_redirects": False},
        {"url": target, "resolve": pin, "follow_redirects": False},
    ]
    assert paths(public_site) == ["/redirect", "/js"]
    [row] = settled(tenant, 1)
    assert (row.status, row.web_rendered_pages, row.provider_cost_micro) == (200, 1, RENDERED_MICRO)
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == WALLET - RENDERED_MICRO


def test_a_public_redirect_is_followed_by_our_fetcher_and_billed_one_page(
    stack, tenant, public_site
):
    target = f"{public_site.url}/a"
    url = redirect_to(public_site, target)

    response = scrape(stack, tenant, url, render_js=False)

    assert response.status_code == 200, response.text
    assert (response.json()["final_url"], response.json()["cost_micro"]) == (target, PAGE_MICRO)
    assert paths(public_site) == ["/redirect", "/a"]
    assert stack.stub.calls() == []


# ---------------------------------------------------------------- crawl seeds


def seeds(v4_port: int) -> list[tuple[str, str, str]]:
    """(id, a seed on the internal service, the refusal's message): names resolving to
    loopback (judged on their addresses) and a literal (judged by the request's shape)."""
    return [
        (
            "localhost",
            f"http://localhost:{v4_port}/",
            "localhost is not a public address (loopback)",
        ),
        *[
            (name, f"http://{name}:{v4_port}/", f"{name} is not a public address (loopback)")
            for name in loopback_names()
        ],
        (
            "127.0.0.1",
            f"http://127.0.0.1:{v4_port}/",
            "'url' points at a non-public address (loopback).",
        ),
    ]


@pytest.mark.parametrize("seed_id", [seed_id for seed_id, _, _ in seeds(1)])
def test_a_crawl_seed_a_scrape_would_refuse_is_refused_at_submission_with_the_same_error(
    stack, public_site, internal_v4, internal_v6, seed_id
):
    seed, message = {s[0]: s[1:] for s in seeds(internal_v4.port)}[seed_id]
    crawler, scraper = stack.tenant(wallet_micro=WALLET), stack.tenant(wallet_micro=WALLET)

    crawl = web(stack.url, crawler.api_key, "crawl", {"url": seed, "max_pages": 3})
    scrape_of_it = scrape(stack, scraper, seed, render_js=False)

    assert crawl.status_code == 400, crawl.text
    assert crawl.json()["error"] == {
        "message": message,
        "type": "invalid_request_error",
        "code": "LM-2001",
    }
    assert scrape_of_it.json()["error"] == crawl.json()["error"]
    assert CrawlJob.objects.count() == 0
    assert_no_request_reached_the_internal_service(internal_v4, internal_v6)
    assert_refused_unbilled(
        crawler, wallet_micro=WALLET, error="LM-2001", endpoint="web.crawl", planned=False
    )


def test_a_crawl_of_a_public_seed_is_still_queued(stack, tenant, public_site):
    crawl = web(stack.url, tenant.api_key, "crawl", {"url": f"{public_site.url}/", "max_pages": 1})

    assert crawl.status_code == 202, crawl.text
    assert CrawlJob.objects.filter(seed_url=f"{public_site.url}/").count() == 1
