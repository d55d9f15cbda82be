"""One default TLS context per test process, shared by every HTTP client it builds.

httpx (the suite's own calls) and httpx2 (under the official SDKs) build a fresh context
from certifi's bundle for each client: about 18 ms of CPU, spent on every `httpx.get`, every
SDK client and every health poll while a gateway starts, though nearly every test speaks plain
http. Measured over tests/e2e, that was a third of a routine test's setup. A context is only
read once built, so clients with the same trust settings share one; anything else (a context
or CA file of the test's own, a client certificate) is built as before.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from types import ModuleType

Build = Callable[..., ssl.SSLContext]


def share_default_contexts() -> None:
    """Make httpx's and httpx2's transports reuse their default context."""
    import httpx._transports.default as httpx_transports
    import httpx2._transports.default as httpx2_transports

    for transports in (httpx_transports, httpx2_transports):
        _share(transports)


def _share(transports: ModuleType) -> None:
    build: Build = transports.create_ssl_context
    if getattr(build, "shares_defaults", False):
        return
    built: dict[tuple, ssl.SSLContext] = {}

    def create_ssl_context(verify=True, cert=None, trust_env=True) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        # The variables the default context reads: a test that sets them gets its own.
        trust = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        key = (trust_env, trust if trust_env else None)
        if key not in built:
            built[key] = build(verify=True, cert=None, trust_env=trust_env)
        return built[key]

    create_ssl_context.shares_defaults = True  # type: ignore[attr-defined]  # a marker
    transports.create_ssl_context = create_ssl_context  # type: ignore[attr-defined]  # re-exported there
