"""The test site serves what its docstring promises (others' tests build on it)."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request

import pytest

from tests.support.testsite import DATA_JSON, JS_PAGE, MIB, PLAIN_TEXT, ROBOTS_TXT

# No proxy from the environment: the site is on loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with OPENER.open(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_fixed_pages_are_served_and_every_request_is_recorded_in_order(site):
    assert get(site.url + "/js")[2] == JS_PAGE.encode()
    assert get(site.url + "/robots.txt")[2] == ROBOTS_TXT.encode()
    assert get(site.url + "/plain.txt")[2] == PLAIN_TEXT.encode()
    assert json.loads(get(site.url + "/data.json")[2]) == DATA_JSON
    assert get(site.url + "/status/418")[0] == 418
    assert get(site.url + "/no/such/page")[0] == 404
    assert site.hits == [
        "/js",
        "/robots.txt",
        "/plain.txt",
        "/data.json",
        "/status/418",
        "/no/such/page",
    ]
    site.clear()
    assert site.hits == []


def test_gzip_bomb_is_a_valid_gzip_stream_of_zeros(site):
    status, headers, body = get(site.url + "/gzip-bomb?mb=3")
    assert (status, headers["Content-Encoding"]) == (200, "gzip")
    assert len(body) < 4 * 1024
    assert gzip.decompress(body) == bytes(3 * MIB)


@pytest.mark.parametrize("query", ["mb=2", "mb=2&chunked=1"])
def test_huge_page_is_as_large_as_asked(site, query):
    assert len(get(f"{site.url}/huge?{query}")[2]) == 2 * MIB
