from __future__ import annotations

import asyncio
import ipaddress

import pytest

from tests.support.processes import free_port
from tests.support.testsite import TestSite
from webfetch.fetcher import FetchLimits, FetchRefused
from webfetch.robots import RobotsRules, robots_for

UA = "TollgateFetch/1.0 (+https://tollgate.invalid/bot)"
LIMITS = FetchLimits(
    max_redirects=5,
    max_bytes=500_000,
    max_decompressed_bytes=1_000_000,
    timeout_s=5.0,
    allow=(ipaddress.ip_network("127.0.0.1/32"),),
)


def rules_for(origin: str, limits: FetchLimits = LIMITS) -> RobotsRules:
    return asyncio.run(robots_for(None, origin, limits=limits, user_agent=UA))


def test_site_robots_are_fetched_from_the_origin_and_applied(site):
    rules = rules_for(site.url + "/some/page?q=1")
    assert site.hits == ["/robots.txt"]
    assert rules.allows(site.url + "/a")
    assert not rules.allows(site.url + "/private/x")
    assert rules.crawl_delay_s is None


def test_missing_robots_allows_everything():
    with TestSite(robots_status=404) as site:
        rules = rules_for(site.url)
        assert site.hits == ["/robots.txt"]
    assert rules.allows(site.url + "/private/x")


@pytest.mark.parametrize("status", [500, 503, 429])
def test_failing_robots_disallows_everything(status):
    with TestSite(robots_status=status) as site:
        rules = rules_for(site.url)
    assert not rules.allows(site.url + "/")


def test_unreachable_host_disallows_everything():
    assert not rules_for(f"http://127.0.0.1:{free_port()}").allows("/")


def test_robots_of_a_refused_address_is_refused(site):
    with pytest.raises(FetchRefused) as caught:
        rules_for(f"http://127.0.0.2:{site.port}/")
    assert caught.value.reason == "private_address"
