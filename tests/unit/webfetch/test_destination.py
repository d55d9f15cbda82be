"""`destination`: the fetcher's checks and one lookup, for a URL handed to someone else (the
renderer). Names are answered by an injected resolver (tests/support/fakedns.py)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from tests.support.fakedns import FakeDnsLoop
from webfetch.fetcher import Destination, FetchRefused, destination

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
LOCAL = (ipaddress.ip_network("127.0.0.1/32"),)
ip = ipaddress.ip_address


def resolve(url: str, answers: dict[str, list[str]], allow=()) -> tuple[Destination, list[str]]:
    loop = FakeDnsLoop(answers)
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(destination(url, allow=allow)), loop.lookups


def refused(url: str, answers: dict[str, list[str]], allow=()) -> tuple[FetchRefused, list[str]]:
    loop = FakeDnsLoop(answers)
    with asyncio.Runner(loop_factory=lambda: loop) as runner, pytest.raises(FetchRefused) as err:
        runner.run(destination(url, allow=allow))
    return err.value, loop.lookups


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("172.16.5.4", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("100.64.0.1", "cgnat"),
        ("fe80::1", "link_local"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
    ],
)
def test_a_name_resolving_to_a_non_public_address_is_refused_with_its_reason(address, reason):
    error, lookups = refused("http://inner.test/x", {"inner.test": [address]})

    assert (error.reason, error.message) == (
        "private_address",
        f"inner.test is not a public address ({reason})",
    )
    assert error.retryable is False
    assert lookups == ["inner.test"]


def test_one_private_address_among_public_ones_refuses_the_name():
    error, _ = refused("https://mixed.test/", {"mixed.test": [PUBLIC_V4, PUBLIC_V6, "10.0.0.7"]})

    assert error.message == "mixed.test is not a public address (private)"


def test_a_public_name_answers_every_address_and_the_port_the_url_means():
    found, lookups = resolve("https://public.test/a?b=1", {"public.test": [PUBLIC_V4, PUBLIC_V6]})

    assert found == Destination(
        host="public.test", port=443, addresses=(ip(PUBLIC_V4), ip(PUBLIC_V6))
    )
    assert lookups == ["public.test"]
    assert resolve("http://public.test:8080/", {"public.test": [PUBLIC_V4]})[0].port == 8080
    assert resolve("http://public.test/", {"public.test": [PUBLIC_V4]})[0].port == 80


def test_a_name_that_does_not_resolve_is_refused_as_dns():
    error, lookups = refused("http://nowhere.test/", {"nowhere.test": []})

    assert (error.reason, error.message) == ("dns", "nowhere.test did not resolve")
    assert lookups == ["nowhere.test"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.1/", "10.0.0.1 is not a public address (private)"),
        ("http://0x7f.1/", "0x7f.1 is not a public address (loopback)"),
        (
            "http://[::ffff:169.254.169.254]/",
            "::ffff:a9fe:a9fe is not a public address (metadata)",  # as yarl spells it
        ),
    ],
)
def test_an_address_literal_is_judged_without_a_lookup(url, message):
    error, lookups = refused(url, {})

    assert (error.reason, error.message) == ("private_address", message)
    assert lookups == []


def test_the_operators_allow_list_admits_its_network_and_nothing_next_to_it():
    found, _ = resolve("http://site.test:8000/", {"site.test": ["127.0.0.1"]}, allow=LOCAL)
    error, _ = refused("http://other.test:8000/", {"other.test": ["127.0.0.2"]}, allow=LOCAL)

    assert found == Destination(host="site.test", port=8000, addresses=(ip("127.0.0.1"),))
    assert error.message == "other.test is not a public address (loopback)"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "scheme"),
        ("gopher://public.test/", "scheme"),
        ("http://user:pw@public.test/", "bad_url"),
        ("http:///nohost", "bad_url"),
    ],
)
def test_what_the_fetcher_would_not_fetch_is_refused_before_any_lookup(url, reason):
    error, lookups = refused(url, {"public.test": [PUBLIC_V4]})

    assert error.reason == reason
    assert lookups == []
