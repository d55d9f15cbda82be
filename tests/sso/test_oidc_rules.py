"""The relying party's own rules, without a provider: where it may call, which issuers it
takes, and that its discovery cache stays bounded."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from sso import oidc
from sso.oidc import SignInRefused, check_issuer


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/o",
        "https://10.1.2.3/",
        "https://169.254.169.254/latest",
        "https://[::1]/o",
        "https://0x7f.1/o",
        "https://localhost/o",
    ],
)
def test_a_tenants_provider_never_reaches_the_operators_network(url):
    with pytest.raises(SignInRefused) as refused:
        oidc.metadata(url)
    assert refused.value.reason == "address"


def test_an_allowed_network_is_called():
    allowing = {**settings.TOLLGATE, "WEB_ALLOW_NETS": ["127.0.0.1/32"]}
    with override_settings(TOLLGATE=allowing), pytest.raises(SignInRefused) as refused:
        oidc.metadata("https://127.0.0.1:9/o")  # allowed, called, and nothing answers there
    assert (refused.value.reason, str(refused.value)) == (
        "discovery",
        "The provider's discovery document could not be read.",
    )


def test_an_issuer_is_https_unless_the_operator_allows_http():
    assert check_issuer("https://example.okta.com") is None
    assert check_issuer("http://example.okta.com") == "An issuer is an https:// URL."
    assert check_issuer("https://example.okta.com/?tenant=1") is not None
    with override_settings(SSO_ALLOW_HTTP=True):
        assert check_issuer("http://127.0.0.1:9000/o") is None


def test_the_discovery_cache_keeps_the_newest_and_no_more(monkeypatch):
    monkeypatch.setattr(oidc, "CACHE_MAX", 3)
    cache = oidc._Bounded()
    for n in range(5):
        cache.put(f"https://issuer-{n}.example", {"n": n})
    assert cache.get("https://issuer-0.example") is None
    assert cache.get("https://issuer-4.example") == {"n": 4}
    assert len(cache._items) == 3
