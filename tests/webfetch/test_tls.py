"""TLS is verified: a certificate no trusted authority signed is refused, never read past."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from tests.support.certificates import self_signed_context
from tests.support.testsite import TestSite
from webfetch.fetcher import FetchLimits, FetchRefused, fetch


def test_untrusted_certificate_is_refused_as_tls(tmp_path):
    limits = FetchLimits(
        max_redirects=5,
        max_bytes=1_000_000,
        max_decompressed_bytes=1_000_000,
        timeout_s=5.0,
        allow=(ipaddress.ip_network("127.0.0.1/32"),),
    )
    with TestSite(ssl_context=self_signed_context(tmp_path)) as site:
        with pytest.raises(FetchRefused) as caught:
            asyncio.run(fetch(None, site.url + "/", limits=limits, user_agent="t"))
        assert site.hits == []  # the handshake failed: no request was sent
    assert site.url.startswith("https://127.0.0.1:")
    assert (caught.value.reason, caught.value.retryable) == ("tls", False)
