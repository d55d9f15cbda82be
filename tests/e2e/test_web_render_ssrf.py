"""No server-side request forgery through the JavaScript renderer, through real processes:
the gateway, the stub as the rendering vendor (its browser fetches pages itself, as a
renderer inside the operator's network would; told not to follow redirects, it hands them
back), and local sites standing for internal services. Money exact to the micro-USD.

Two gateways: one with production's setting (no private network allowed), so a name
resolving to loopback meets the real refusal; one allowed the test site's 127.0.0.1/32 only
(tests/support/web.py), whose page redirects to an internal service on 127.0.0.2.
"""

from __future__ import annotations

import pytest

from billing.models import Wallet
from tests.support.testsite import TestSite
from tests.support.usage import set_bandwidth_rate, settled
from tests.support.web import (
    RENDER_KEY,
    RENDERED_MICRO,
    WEB_ENV,
    assert_refused_unbilled,
    loopback_names,
    web,
    web_profiles,
    web_stack,
)

WALLET = 100_000_000
BUDGET = 1_000_000
INNER_TEXT = "Main sentence"  # graph_html's text: what the internal service would leak


@pytest.fixture(scope="module")
def strict_gateway(module_gateways):
    return module_gateways()  # TOLLGATE_WEB_ALLOW_NETS unset: only public addresses


@pytest.fixture(scope="module")
def site_gateway(module_gateways):
    # One vendor failure opens a breaker: a refusal that counted as one would show.
    return module_gateways(**WEB_ENV, TOLLGATE_BREAKER_FAILURES="1")


@pytest.fixture(scope="module")
def inner_site():
    """An internal service on 127.0.0.2, which no setting of these gateways allows."""
    with TestSite(host="127.0.0.2") as server:
        yield server


@pytest.fixture
def strict(transactional_db, strict_gateway, stub, site, inner_site):
    inner_site.clear()
    return web_stack(strict_gateway, stub, site, web_profiles(stub.url))


@pytest.fixture
def allowed(transactional_db, site_gateway, stub, site, inner_site):
    inner_site.clear()
    return web_stack(site_gateway, stub, site, web_profiles(stub.url))


@pytest.fixture(params=["prepaid", "invoiced"])
def tenant(request, strict):
    """A tenant of each billing mode, both with a wallet: neither may move."""
    invoiced = request.param == "invoiced"
    tenant = strict.tenant(wallet_micro=WALLET, invoiced=invoiced, budget_micro=BUDGET)
    set_bandwidth_rate(tenant)  # a micro-USD a byte: bandwidth billed by mistake would show
    return tenant


def render_js(stack, tenant, url: str):
    return web(stack.url, tenant.api_key, "scrape", {"url": url, "render_js": True})


def assert_nothing_billed(tenant, *, error: str, planned: bool = True) -> None:
    assert_refused_unbilled(tenant, wallet_micro=WALLET, error=error, planned=planned)


def test_localhost_with_render_js_is_refused_and_the_renderer_never_called(strict, site, tenant):
    response = render_js(strict, tenant, f"http://localhost:{site.port}/x")

    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "message": "'url' points at a non-public host.",
        "type": "invalid_request_error",
        "code": "LM-2001",
    }
    assert strict.stub.calls() == []
    assert site.hits == []
    assert_nothing_billed(tenant, error="LM-2001", planned=False)  # refused by its shape


@pytest.mark.parametrize("name", loopback_names() or ["(none)"])
def test_a_name_resolving_to_loopback_is_refused_before_the_renderer_is_asked(
    strict, site, tenant, name
):
    if name == "(none)":
        pytest.skip("this machine's host name does not resolve to loopback (see /etc/hosts)")

    response = render_js(strict, tenant, f"http://{name}:{site.port}/x")

    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "message": f"{name} is not a public address (loopback)",
        "type": "invalid_request_error",
        "code": "LM-2001",
    }
    assert strict.stub.calls() == []
    assert site.hits == []
    assert_nothing_billed(tenant, error="LM-2001")
    [row] = settled(tenant, 1)
    # The refusal is no vendor failure: the trail says the renderer's try ended in error.
    assert [(a.provider, a.outcome, a.upstream_status) for a in row.attempts] == [
        ("stub-render", "upstream_error", None)
    ]


def test_a_name_that_does_not_resolve_is_refused_before_the_renderer_is_asked(strict, tenant):
    response = render_js(strict, tenant, "http://nowhere.invalid/x")

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "LM-2001"
    assert response.json()["error"]["message"] == "nowhere.invalid did not resolve"
    assert strict.stub.calls() == []
    assert_nothing_billed(tenant, error="LM-2001")


def test_a_redirect_to_an_internal_service_comes_back_unfollowed_and_is_refused_unbilled(
    allowed, site, inner_site
):
    tenant = allowed.tenant(wallet_micro=WALLET)
    set_bandwidth_rate(tenant)
    url = f"{site.url}/redirect?to={inner_site.url}/secret"

    response = render_js(allowed, tenant, url)

    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "message": "127.0.0.2 is not a public address (loopback)",
        "type": "invalid_request_error",
        "code": "LM-2001",
    }
    assert INNER_TEXT not in response.text
    [call] = allowed.stub.calls()
    # The renderer was told where the asked host is (the address we checked) and not to
    # follow; it handed the redirect back, and its target was refused before any request.
    assert (call["path"], call["key"], call["status"], call["body"]) == (
        "/web/v1/render",
        RENDER_KEY,
        200,
        {
            "url": url,
            "resolve": {"host": "127.0.0.1", "port": site.port, "addresses": ["127.0.0.1"]},
            "follow_redirects": False,
        },
    )
    assert site.hits == [f"/redirect?to={inner_site.url}/secret"]
    assert inner_site.hits == []
    assert_nothing_billed(tenant, error="LM-2001")

    # The refusal was no vendor failure: with a breaker that opens on one, the renderer
    # still serves the next request, billed its one rendered page.
    served = render_js(allowed, tenant, f"{site.url}/js")

    assert served.status_code == 200, served.text
    assert served.json()["cost_micro"] == RENDERED_MICRO
    settled(tenant, 2)
    assert Wallet.objects.get(account_id=tenant.account_id).balance_micro == WALLET - (
        RENDERED_MICRO
    )


def test_one_vendor_failure_does_open_that_gateways_breaker(allowed, site):
    # The control of the test above: its gateway's breaker opens on one vendor failure.
    tenant = allowed.tenant(wallet_micro=WALLET)
    allowed.stub.faults({"kind": "500", "times": 2, "match": {"key": RENDER_KEY}})

    failed = render_js(allowed, tenant, f"{site.url}/js")
    fast = render_js(allowed, tenant, f"{site.url}/js")

    assert failed.json()["error"]["code"] == "LM-5001"
    assert (fast.status_code, fast.json()["error"]["code"]) == (503, "LM-5003")
    assert len(allowed.stub.calls()) == 2  # two tries, then failing fast
