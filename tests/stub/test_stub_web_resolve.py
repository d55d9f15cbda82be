"""The stub renderer's `resolve` pin (stubvendor/web.py): the asked host's connections go to
the given addresses with no lookup, as curl's --resolve; every other host a redirect leads
to is looked up and loaded, as a browser does."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.testsite import TestSite

RENDER = "/web/v1/render"
AUTH = {"Authorization": "Bearer wk-1"}
NOWHERE = "pinned.invalid"  # resolves nowhere: only the pin can reach it


@pytest.fixture(scope="module")
def module_site() -> Iterator[TestSite]:
    with TestSite() as server:
        yield server


@pytest.fixture()
def site(module_site: TestSite) -> TestSite:
    module_site.clear()
    return module_site


def pin(port: int, *addresses: str, host: str = NOWHERE) -> dict:
    return {"host": host, "port": port, "addresses": list(addresses or ["127.0.0.1"])}


def test_the_pinned_host_is_loaded_from_the_pinned_address(client: httpx.Client, site) -> None:
    url = f"http://{NOWHERE}:{site.port}/js"

    r = client.post(RENDER, json={"url": url, "resolve": pin(site.port)}, headers=AUTH)

    assert r.status_code == 200, r.text
    assert (r.json()["final_url"], r.json()["status"]) == (url, 200)
    assert "Rendered paragraph one." in r.json()["html"]
    assert site.hits == ["/js"]


def test_a_pin_with_several_addresses_uses_one_that_answers(client: httpx.Client, site) -> None:
    # IPv6 loopback first: nothing listens there on the site's port, so the next is tried.
    url = f"http://{NOWHERE}:{site.port}/"

    r = client.post(
        RENDER, json={"url": url, "resolve": pin(site.port, "::1", "127.0.0.1")}, headers=AUTH
    )

    assert (r.status_code, r.json()["status"]) == (200, 200)
    assert site.hits == ["/"]


def test_redirects_on_the_pinned_host_stay_on_the_pin(client: httpx.Client, site) -> None:
    url = f"http://{NOWHERE}:{site.port}/redirect-chain/2"

    r = client.post(RENDER, json={"url": url, "resolve": pin(site.port)}, headers=AUTH)

    assert r.status_code == 200, r.text
    assert r.json()["final_url"] == f"http://{NOWHERE}:{site.port}/redirect-chain/0"
    assert site.hits == ["/redirect-chain/2", "/redirect-chain/1", "/redirect-chain/0"]


def test_a_redirect_to_another_host_is_looked_up_and_followed(client: httpx.Client, site) -> None:
    elsewhere = f"http://localhost:{site.port}/plain.txt"
    url = f"http://{NOWHERE}:{site.port}/redirect?to={elsewhere}"

    r = client.post(RENDER, json={"url": url, "resolve": pin(site.port)}, headers=AUTH)

    assert r.status_code == 200, r.text
    assert r.json()["final_url"] == elsewhere
    assert site.hits == [f"/redirect?to={elsewhere}", "/plain.txt"]


def test_a_pin_for_another_port_does_not_apply(client: httpx.Client, site) -> None:
    url = f"http://{NOWHERE}:{site.port}/"

    r = client.post(RENDER, json={"url": url, "resolve": pin(site.port + 1)}, headers=AUTH)

    assert r.status_code == 502
    assert r.json() == {"error": {"message": "could not load the page", "type": "upstream_error"}}
    assert site.hits == []


@pytest.mark.parametrize(
    "resolve",
    [
        "127.0.0.1",
        {"host": NOWHERE, "port": 80},
        {"host": NOWHERE, "port": 80, "addresses": []},
        {"host": NOWHERE, "port": 80, "addresses": ["not-an-address"]},
        {"host": NOWHERE, "port": 0, "addresses": ["127.0.0.1"]},
        {"host": NOWHERE, "port": True, "addresses": ["127.0.0.1"]},
        {"host": "", "port": 80, "addresses": ["127.0.0.1"]},
    ],
)
def test_a_malformed_pin_is_a_400(client: httpx.Client, resolve) -> None:
    body = {"url": f"http://{NOWHERE}/", "resolve": resolve}

    r = client.post(RENDER, json=body, headers=AUTH)

    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "resolve: {host, port 1..65535, addresses: [IP address, ...]} is required.",
            "type": "invalid_request_error",
        }
    }
