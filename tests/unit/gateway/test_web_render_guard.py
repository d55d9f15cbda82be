"""The renderer adapter's guard against server-side request forgery: a URL is resolved and
every address checked before the vendor is asked (its host pinned to those addresses, told
not to follow redirects); each redirect comes back and is checked before the vendor is sent
there. The vendor is our stub, in this process;
names are answered by an injected resolver (tests/support/fakedns.py), which the stub's own
browser asks too, as a renderer inside the operator's network would ask its DNS."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gateway.adapters.base import ProviderError
from gateway.web.adapters import RenderApi
from gateway.web.types import PageAnswer, WebProviderError, WebTarget
from stubvendor.server import make_app, start_site
from stubvendor.state import STATE
from tests.support.fakedns import FakeDnsLoop
from tests.support.testsite import TestSite

KEY = "sk-render-unit"


@pytest.fixture(scope="module")
def inner_site():
    """The page an internal service serves, on a loopback address no setting allows."""
    with TestSite(host="127.0.0.2") as server:
        yield server


@pytest.fixture(scope="module")
def module_site():
    with TestSite() as server:
        yield server


@pytest.fixture
def site(module_site, inner_site, tollgate):
    """The test site, on the one address the operator's setting allows (127.0.0.1/32)."""
    tollgate(WEB_ALLOW_NETS=["127.0.0.1/32"])
    module_site.clear()
    inner_site.clear()
    return module_site


def render(url: str, answers: dict[str, list[str]]) -> tuple[PageAnswer | Exception, list, list]:
    """Ask the renderer adapter for `url` with the stub as its vendor; return what it answered
    (or raised), the stub's calls and the names looked up."""
    loop = FakeDnsLoop(answers)

    async def main():
        app = make_app(accept_keys=[KEY])
        runner, port = await start_site(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                adapter = RenderApi(base_url=f"http://127.0.0.1:{port}/web/v1", session=session)
                try:
                    answer = await adapter.scrape(url, WebTarget(api_key=KEY, timeout_s=5))
                except Exception as exc:  # noqa: BLE001 - the test reads it
                    answer = exc
            return answer, list(app[STATE].calls)
        finally:
            await runner.cleanup()

    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        answer, calls = runner.run(main())
    return answer, calls, loop.lookups


def refusal(answer) -> str:
    assert isinstance(answer, WebProviderError), answer
    # A refused URL ends the request (LM-2001), bills nothing and is no vendor failure.
    assert (answer.refused, answer.retryable, answer.billed_units, answer.status) == (
        True,
        False,
        0,
        None,
    )
    return answer.message


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("172.16.5.4", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("127.0.0.2", "loopback"),
    ],
)
def test_a_name_resolving_to_a_private_address_is_refused_before_the_renderer_is_asked(
    tollgate, address, reason
):
    tollgate(WEB_ALLOW_NETS=[])  # production's default: only public addresses
    answer, calls, lookups = render("http://inner.test/admin", {"inner.test": [address]})

    assert refusal(answer) == f"inner.test is not a public address ({reason})"
    assert calls == []
    assert lookups == ["inner.test"]


def test_a_name_that_does_not_resolve_is_refused_before_the_renderer_is_asked(tollgate):
    tollgate(WEB_ALLOW_NETS=[])
    answer, calls, _ = render("http://nowhere.test/", {"nowhere.test": []})

    assert refusal(answer) == "nowhere.test did not resolve"
    assert calls == []


def test_the_renderer_is_sent_the_checked_addresses_and_loads_the_page_through_them(site):
    url = f"http://site.test:{site.port}/js"

    answer, [call], lookups = render(url, {"site.test": ["127.0.0.1"]})

    assert isinstance(answer, PageAnswer), answer
    assert (answer.final_url, answer.status, answer.rendered) == (url, 200, True)
    assert b"Rendered paragraph one." in answer.body
    assert call["body"] == {
        "url": url,
        "resolve": {"host": "site.test", "port": site.port, "addresses": ["127.0.0.1"]},
        "follow_redirects": False,
    }
    # Ours before the call; the stub's browser used the pin, no lookup.
    assert lookups == ["site.test"]
    assert site.hits == ["/js"]


def test_a_redirect_to_a_private_address_is_refused_before_the_renderer_is_sent_there(
    site, inner_site
):
    url = f"{site.url}/redirect?to={inner_site.url}/"

    answer, [call], _ = render(url, {})

    assert refusal(answer) == "127.0.0.2 is not a public address (loopback)"
    # The renderer loaded the asked page only and handed its redirect back, unfollowed.
    assert (call["status"], call["body"]["url"], call["body"]["follow_redirects"]) == (
        200,
        url,
        False,
    )
    assert inner_site.hits == []
    assert site.hits == [f"/redirect?to={inner_site.url}/"]


def test_a_redirect_to_a_name_resolving_to_a_private_address_is_refused(site, inner_site):
    target = f"http://inner.test:{inner_site.port}/"
    url = f"{site.url}/redirect?to={target}"

    answer, [_call], lookups = render(url, {"inner.test": ["127.0.0.2"]})

    assert refusal(answer) == "inner.test is not a public address (loopback)"
    assert inner_site.hits == []
    assert lookups == ["inner.test"]  # ours, on the redirect: the renderer never looked


def test_each_redirect_hop_is_checked_pinned_and_asked_for_in_its_own_call(site):
    url = f"{site.url}/redirect-chain/2"

    answer, calls, lookups = render(url, {})

    assert isinstance(answer, PageAnswer), answer
    assert (answer.final_url, answer.status, answer.rendered) == (
        f"{site.url}/redirect-chain/0",
        200,
        True,
    )
    pin = {"host": "127.0.0.1", "port": site.port, "addresses": ["127.0.0.1"]}
    assert [c["body"] for c in calls] == [
        {"url": f"{site.url}/redirect-chain/{n}", "resolve": pin, "follow_redirects": False}
        for n in (2, 1, 0)
    ]
    assert site.hits == ["/redirect-chain/2", "/redirect-chain/1", "/redirect-chain/0"]


def test_a_chain_longer_than_the_redirect_cap_is_failed_not_followed(site, tollgate):
    tollgate(WEB_ALLOW_NETS=["127.0.0.1/32"], WEB_MAX_REDIRECTS=2)

    answer, calls, _ = render(f"{site.url}/redirect-chain/5", {})

    assert isinstance(answer, WebProviderError), answer
    assert (answer.refused, answer.retryable, answer.status) == (False, False, None)
    assert answer.message == f"more than 2 redirects from {site.url}/redirect-chain/5"
    assert len(calls) == 3  # the asked page and two hops; the third redirect is not followed
    assert site.hits == ["/redirect-chain/5", "/redirect-chain/4", "/redirect-chain/3"]


def test_a_vendor_that_follows_a_redirect_despite_being_told_not_to_is_not_served(site):
    """A renderer that ignores `follow_redirects` (here a vendor of a few lines that says it
    ended elsewhere): its page is a vendor fault, never the answer."""
    from aiohttp import web

    url = f"{site.url}/js"

    async def elsewhere(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(
            {"final_url": "http://127.0.0.2/secret", "status": 200, "html": "<p>x</p>"}
            | {"url": body["url"], "content_type": "text/html", "credits": 1}
        )

    async def main():
        app = web.Application()
        app.router.add_post("/render", elsewhere)
        runner, port = await start_site(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                adapter = RenderApi(base_url=f"http://127.0.0.1:{port}", session=session)
                try:
                    return await adapter.scrape(url, WebTarget(api_key=KEY, timeout_s=5))
                except Exception as exc:  # noqa: BLE001 - the test reads it
                    return exc
        finally:
            await runner.cleanup()

    answer = asyncio.run(main())

    assert type(answer) is ProviderError, answer
    assert (str(answer), answer.retryable) == (
        "upstream rendered another page than the one asked",
        False,
    )
