"""TLS is verified: a certificate no trusted authority signed is refused, never read past."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.testsite import TestSite
from webfetch.fetcher import FetchLimits, FetchRefused, fetch


def self_signed_context(tmp_path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context


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
