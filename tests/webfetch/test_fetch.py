from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from typing import Any

import pytest

from tests.support.processes import free_port
from tests.support.testsite import MIB, article_html, graph_html
from webfetch.fetcher import Fetched, FetchLimits, FetchRefused, fetch, limits_from_settings

LOCAL = (ipaddress.ip_network("127.0.0.1/32"),)
UA = "TollgateFetch/1.0 (+https://tollgate.invalid/bot)"


def limits(**changes: Any) -> FetchLimits:
    values: dict[str, Any] = dict(
        max_redirects=5,
        max_bytes=5_000_000,
        max_decompressed_bytes=10_000_000,
        timeout_s=5.0,
        allow=LOCAL,
    )
    values.update(changes)
    return FetchLimits(**values)


def get(url: str, *, loop_factory=None, **changes) -> Fetched:
    async def main() -> Fetched:
        return await fetch(None, url, limits=limits(**changes), user_agent=UA)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


def refused(url: str, *, loop_factory=None, **changes) -> FetchRefused:
    with pytest.raises(FetchRefused) as caught:
        get(url, loop_factory=loop_factory, **changes)
    return caught.value


def test_page_is_fetched_whole_with_its_type_and_wire_size(site):
    page = get(site.url + "/")
    body = article_html().encode()
    assert (page.status, page.content_type, page.charset) == (200, "text/html", "utf-8")
    assert page.body == body
    assert page.wire_bytes == len(body)  # the Content-Length of an uncompressed page
    assert (page.url, page.final_url, page.redirects) == (site.url + "/", site.url + "/", ())
    assert page.text() == article_html()
    assert site.hits == ["/"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_page_is_inflated_and_counted_as_sent(site, encoding):
    page = get(f"{site.url}/{encoding}")
    assert page.body == article_html().encode()
    assert 0 < page.wire_bytes < len(page.body)


def test_any_status_is_a_result(site):
    assert [get(f"{site.url}/status/{code}").status for code in (404, 500, 503)] == [404, 500, 503]
    assert get(f"{site.url}/status/404").body == b"status 404"


def test_head_has_no_body(site):
    async def main() -> Fetched:
        return await fetch(None, site.url + "/", limits=limits(), user_agent=UA, method="HEAD")

    page = asyncio.run(main())
    assert (page.status, page.body, page.wire_bytes) == (200, b"", 0)


def test_redirect_chain_is_followed_hop_by_hop(site):
    page = get(site.url + "/redirect-chain/3")
    assert page.redirects == tuple(f"{site.url}/redirect-chain/{n}" for n in (2, 1, 0))
    assert page.final_url == site.url + "/redirect-chain/0"
    assert page.body == graph_html("/c/1").encode()
    assert site.hits == [f"/redirect-chain/{n}" for n in (3, 2, 1, 0)]


def test_as_many_redirects_as_the_cap_are_followed_and_one_more_is_refused(site):
    assert len(get(site.url + "/redirect-chain/5").redirects) == 5
    site.clear()
    error = refused(site.url + "/redirect-chain/6")
    assert (error.reason, error.retryable) == ("too_many_redirects", False)
    # The first answer and the five redirects followed; the sixth Location is not asked.
    assert site.hits == [f"/redirect-chain/{n}" for n in (6, 5, 4, 3, 2, 1)]


def test_relative_redirect_resolves_against_the_current_url(site):
    page = get(site.url + "/redirect?to=b/1")
    assert page.final_url == site.url + "/b/1"
    assert page.redirects == (site.url + "/b/1",)
    assert page.body == graph_html("/b/1").encode()


@pytest.mark.parametrize(
    ("path", "reason_text"),
    [("/redirect-private", "(private)"), ("/redirect-metadata", "(metadata)")],
)
def test_redirect_to_a_non_public_address_is_refused(site, path, reason_text):
    error = refused(site.url + path)
    assert (error.reason, error.retryable) == ("private_address", False)
    assert reason_text in error.message


@pytest.mark.parametrize("host", ["127.0.0.2", "0x7f000002", "2130706434", "127.2"])
def test_redirect_to_a_loopback_address_outside_the_allowed_net_never_reaches_it(
    site, other_site, host
):
    other_site.clear()
    error = refused(f"{site.url}/redirect?to=http://{host}:{other_site.port}/")
    assert (error.reason, error.message) == (
        "private_address",
        f"{host} is not a public address (loopback)",
    )
    assert other_site.hits == []
    assert get(other_site.url + "/", allow=(ipaddress.ip_network("127.0.0.0/8"),)).status == 200


@pytest.mark.parametrize("target", ["ftp://example.com/x", "file:///etc/passwd", "gopher://x/"])
def test_redirect_to_another_scheme_is_refused(site, target):
    assert refused(f"{site.url}/redirect?to={target}").reason == "scheme"


def test_page_declaring_more_than_the_cap_is_refused_unread(site):
    error = refused(site.url + "/huge?mb=3", max_bytes=2 * MIB)
    assert (error.reason, error.retryable, error.wire_bytes) == ("too_large", False, 0)


def test_streamed_page_is_cut_just_past_the_cap(site):
    error = refused(site.url + "/huge?mb=3&chunked=1", max_bytes=2 * MIB)
    assert error.reason == "too_large"
    # Reading stops at the first chunk that crosses the cap (chunks are at most 64 KiB).
    assert 2 * MIB < error.wire_bytes <= 2 * MIB + 64 * 1024


def test_gzip_bomb_is_refused_long_before_the_wire_cap(site):
    error = refused(site.url + "/gzip-bomb", max_bytes=5_000_000, max_decompressed_bytes=10_000_000)
    assert (error.reason, error.retryable) == ("decompression_bomb", False)
    # 10 MB of zeros are about 10 KB of gzip: one or two 64 KiB reads, not 1 GB inflated.
    assert 0 < error.wire_bytes <= 2 * 64 * 1024


def test_slow_page_times_out_within_the_bound(site):
    start = time.monotonic()
    error = refused(site.url + "/slow?s=10", timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert (error.reason, error.retryable) == ("timeout", True)
    assert 0.5 <= elapsed < 1.5


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/", "file:///etc/passwd", "javascript:alert(1)", "data:text/html,hi"]
)
def test_only_http_and_https_are_fetched(site, url):
    error = refused(url)
    assert (error.reason, error.retryable) == ("scheme", False)


@pytest.mark.parametrize(
    "userinfo", ["user:secret@", "user@", ":secret@", "@"]
)  # fmt: skip
def test_credentials_in_the_url_are_refused(site, userinfo):
    error = refused(f"http://{userinfo}127.0.0.1:{site.port}/")
    assert (error.reason, error.retryable) == ("bad_url", False)
    assert site.hits == []


@pytest.mark.parametrize("url", ["http:///x", "http://[fe80::1%25eth0]/", "http://[::1/"])
def test_malformed_url_is_refused(url):
    assert refused(url).reason == "bad_url"


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "[::1]",
     "[::ffff:127.0.0.1]", "localhost"],
)  # fmt: skip
def test_loopback_in_any_encoding_is_refused_unless_allowed(site, host):
    error = refused(f"http://{host}:{site.port}/", allow=())
    assert (error.reason, error.retryable) == ("private_address", False)
    assert error.message.endswith("(loopback)")
    assert site.hits == []


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]", "localhost"],
)
def test_allowed_loopback_is_reached_in_every_encoding(site, host):
    assert get(f"http://{host}:{site.port}/").status == 200
    assert site.hits == ["/"]


def test_another_loopback_address_is_refused_with_only_one_allowed(other_site):
    other_site.clear()
    assert refused(f"{other_site.url}/").message == "127.0.0.2 is not a public address (loopback)"
    assert refused(f"http://[::1]:{other_site.port}/").reason == "private_address"
    assert other_site.hits == []


class FakeDnsLoop(asyncio.SelectorEventLoop):
    """An event loop whose resolver answers names under .test from a table (a fake DNS)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        super().__init__()
        self.answers = answers
        self.lookups: list[str] = []

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        if not str(host).endswith(".test"):
            return await super().getaddrinfo(host, port, family=family, type=type)
        self.lookups.append(host)
        rounds = self.answers.get(host)
        if not rounds:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        addresses = rounds[min(len(self.lookups), len(rounds)) - 1]
        return [
            (
                socket.AF_INET6 if ":" in a else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (a, port),
            )
            for a in addresses
        ]


def test_answer_mixing_an_allowed_and_a_private_address_is_refused(site):
    loop = FakeDnsLoop({"mixed.test": [["127.0.0.1", "10.0.0.1"]]})
    error = refused(f"http://mixed.test:{site.port}/", loop_factory=lambda: loop)
    assert (error.reason, error.message) == (
        "private_address",
        "mixed.test is not a public address (private)",
    )
    assert site.hits == []


def test_name_is_resolved_once_so_a_rebinding_answer_is_never_used(site):
    # A second lookup would answer a private address; the connection uses the first answer.
    loop = FakeDnsLoop({"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    page = get(f"http://rebind.test:{site.port}/", loop_factory=lambda: loop)
    assert (page.status, page.body) == (200, article_html().encode())
    assert loop.lookups == ["rebind.test"]
    assert site.hits == ["/"]


def test_each_redirect_hop_is_resolved_and_checked_again(site):
    loop = FakeDnsLoop({"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    error = refused(f"http://rebind.test:{site.port}/redirect?to=/a", loop_factory=lambda: loop)
    assert (error.reason, error.message) == (
        "private_address",
        "rebind.test is not a public address (private)",
    )
    assert loop.lookups == ["rebind.test", "rebind.test"]
    assert site.hits == ["/redirect?to=/a"]


def test_literal_in_another_encoding_is_asked_for_in_its_canonical_form(site):
    page = get(f"http://0x7f.1:{site.port}/redirect?to=/a")
    assert page.final_url == f"http://127.0.0.1:{site.port}/a"


def test_unknown_name_is_a_retryable_dns_failure():
    loop = FakeDnsLoop({})
    error = refused("http://nowhere.test/", loop_factory=lambda: loop)
    assert (error.reason, error.retryable, error.message) == (
        "dns",
        True,
        "nowhere.test did not resolve",
    )


def test_closed_port_is_a_retryable_connect_failure():
    error = refused(f"http://127.0.0.1:{free_port()}/")
    assert (error.reason, error.retryable) == ("connect", True)


def test_text_decodes_with_the_charset_and_falls_back_to_utf8():
    def page(body: bytes, charset: str | None) -> Fetched:
        return Fetched("u", "u", 200, "text/plain", charset, body, len(body), ())

    assert page("caf\xe9".encode("latin-1"), "iso-8859-1").text() == "café"
    assert page("café".encode(), None).text() == "café"
    assert page(b"caf\xe9", "no-such-charset").text() == "caf\ufffd"


def test_limits_come_from_the_settings(settings):
    settings.TOLLGATE = {
        **settings.TOLLGATE,
        "WEB_MAX_REDIRECTS": 3,
        "WEB_MAX_BYTES": 1000,
        "WEB_MAX_DECOMPRESSED_BYTES": 2000,
        "WEB_ALLOW_NETS": ["127.0.0.1/32", "10.9.0.0/16"],
    }
    assert limits_from_settings(7.5) == FetchLimits(
        max_redirects=3,
        max_bytes=1000,
        max_decompressed_bytes=2000,
        timeout_s=7.5,
        allow=(ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.9.0.0/16")),
    )


def test_default_settings_allow_no_private_network(settings):
    assert limits_from_settings(1.0).allow == ()
