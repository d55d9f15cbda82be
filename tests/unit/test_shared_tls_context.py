"""The suite's clients share one default TLS context (tests/support/tls.py), and only that."""

from __future__ import annotations

import ssl

import httpx
import openai


def context_of(client) -> ssl.SSLContext:
    return client._transport._pool._ssl_context


def test_clients_with_default_trust_share_one_context():
    shared = context_of(httpx.Client())
    assert context_of(httpx.Client()) is shared
    sdk = openai.DefaultHttpxClient()
    assert context_of(sdk) is context_of(openai.DefaultHttpxClient())
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname


def test_other_trust_settings_get_contexts_of_their_own(monkeypatch):
    shared = context_of(httpx.Client())
    assert context_of(httpx.Client(verify=False)) is not shared
    own = ssl.create_default_context()
    assert context_of(httpx.Client(verify=own)) is own
    monkeypatch.setenv("SSL_CERT_FILE", ssl.get_default_verify_paths().openssl_cafile)
    assert context_of(httpx.Client()) is not shared
