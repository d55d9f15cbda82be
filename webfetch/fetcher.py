"""The direct fetcher: one URL over http(s), safe to point at whatever a tenant asks for.

What makes it safe (server-side request forgery):

* Only http and https; no userinfo in the URL; a host that is an IP literal in any encoding
  (`addresses.literal_host`) is judged before any lookup.
* A name is resolved once (`loop.getaddrinfo`); EVERY returned address must pass
  `addresses.refusal` (an answer mixing a public and a private address is refused), and the
  connection goes to the first of them, pinned: the per-hop connector's resolver can answer
  nothing else, so a second lookup (DNS rebinding) cannot happen. TLS still verifies the
  certificate against the host name (SNI = the name), because aiohttp connects by name.
* Redirects are followed by hand, at most `max_redirects`, each hop checked like the first.
* `destination(url)` runs the same checks and lookup without fetching, for a URL handed to
  the rendering vendor (gateway/web/adapters.py): before it is asked, and on its final URL.
* The wire body stops at `max_bytes`, the decompressed body at `max_decompressed_bytes`
  (gzip and deflate, inflated incrementally with a bound), and all hops together at
  `timeout_s`.

Why a small session per hop, not the caller's session: a session's connector (and so its
resolver) is fixed when it is made, and its cookie jar would carry one tenant's cookies into
another's fetch. Each hop gets a `ClientSession` with a one-address resolver, no cookie jar,
no proxy from the environment, no decompression of its own; the `session` argument of
`fetch` is accepted for the interface and not used. Making one costs tens of microseconds
(the TLS context is aiohttp's shared default); no connection is reused across fetches.

Failures are `FetchRefused(reason, message, retryable)`:

    reason                   retryable   when
    bad_url                  no          unparsable URL, userinfo, zone id, no host
    scheme                   no          not http/https (also on a redirect hop)
    private_address          no          a literal or resolved address is not public
    dns                      yes         the name did not resolve
    connect                  yes         connection refused/reset/closed early
    timeout                  yes         the whole fetch took longer than timeout_s
    tls                      no          certificate or handshake failure
    protocol                 no          the answer was not valid HTTP
    too_many_redirects       no          more than max_redirects hops
    too_large                no          wire body over max_bytes (Content-Length or counted)
    decompression_bomb       no          inflated body over max_decompressed_bytes
    unsupported_encoding     no          a Content-Encoding other than gzip/deflate/identity

Any HTTP status is a result (`Fetched.status`), not a failure.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from core.config import tollgate
from webfetch.addresses import IPAddress, Network, allowed_networks, literal_host, refusal

SCHEMES = frozenset({"http", "https"})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
READ_CHUNK_BYTES = 64 * 1024
RETRYABLE = frozenset({"dns", "connect", "timeout"})


class FetchRefused(Exception):
    """Refuse or abandon a fetch; `message` is safe to show the client (never the body)."""

    def __init__(self, reason: str, message: str, *, wire_bytes: int = 0) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.retryable = reason in RETRYABLE
        # Body bytes received before giving up (caps), for the books and for tests.
        self.wire_bytes = wire_bytes


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_redirects: int
    max_bytes: int
    max_decompressed_bytes: int
    timeout_s: float
    allow: tuple[Network, ...] = ()


def limits_from_settings(timeout_s: float) -> FetchLimits:
    """Build the limits of the TOLLGATE_WEB_* settings, with the caller's deadline."""
    config = tollgate()
    return FetchLimits(
        max_redirects=config.web_max_redirects,
        max_bytes=config.web_max_bytes,
        max_decompressed_bytes=config.web_max_decompressed_bytes,
        timeout_s=timeout_s,
        allow=allowed_networks(config.web_allow_nets),
    )


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # as asked
    final_url: str  # after redirects
    status: int
    content_type: str  # media type only, lowercased
    charset: str | None
    body: bytes  # decompressed
    wire_bytes: int  # body bytes received (transfer framing and headers excluded)
    redirects: tuple[str, ...]  # each Location followed, resolved; the last is final_url

    def text(self) -> str:
        """Decode the body with its charset, falling back to UTF-8 with replacement."""
        if self.charset:
            try:
                return self.body.decode(self.charset, errors="replace")
            except LookupError:
                pass
        return self.body.decode("utf-8", errors="replace")


async def fetch(
    session: aiohttp.ClientSession | None,
    url: str,
    *,
    limits: FetchLimits,
    user_agent: str,
    method: str = "GET",
) -> Fetched:
    """Fetch `url` within `limits`, following redirects; raise FetchRefused when refused.

    `session` is not used (see the module docstring): every hop runs on its own pinned
    connector.
    """
    try:
        async with asyncio.timeout(limits.timeout_s):
            return await _follow(url, limits=limits, user_agent=user_agent, method=method)
    except TimeoutError:
        raise FetchRefused("timeout", f"no complete answer within {limits.timeout_s:g} s") from None


async def _follow(url: str, *, limits: FetchLimits, user_agent: str, method: str) -> Fetched:
    current = _checked_url(url)
    redirects: list[str] = []
    while True:
        address = await _pinned_address(current, limits.allow)
        if literal_host(current.raw_host or "") is not None:
            # Like browsers, ask for a literal in its canonical form (`127.1` -> `127.0.0.1`):
            # aiohttp refuses the other forms, and the Host header should name the address.
            current = current.with_host(str(address))
        hop = await _request(current, address, limits=limits, user_agent=user_agent, method=method)
        if hop.location is None:
            return Fetched(
                url=url,
                final_url=str(current),
                status=hop.status,
                content_type=hop.content_type,
                charset=hop.charset,
                body=hop.body,
                wire_bytes=hop.wire_bytes,
                redirects=tuple(redirects),
            )
        if len(redirects) >= limits.max_redirects:
            raise FetchRefused(
                "too_many_redirects", f"more than {limits.max_redirects} redirects from {url}"
            )
        current = _checked_url(hop.location, base=current)
        redirects.append(str(current))
        if hop.status == 303 and method != "HEAD":
            method = "GET"


def _checked_url(text: str, *, base: URL | None = None) -> URL:
    try:
        # yarl drops an empty userinfo ("http://@host/"); the text itself is checked too.
        has_userinfo = "@" in urlsplit(text.strip()).netloc
        url = URL(text)
        if base is not None:
            url = base.join(url)
    except (ValueError, TypeError):
        raise FetchRefused("bad_url", "the URL cannot be parsed") from None
    scheme = url.scheme.lower()
    if scheme not in SCHEMES:
        raise FetchRefused("scheme", f"only http and https are fetched, not {scheme or '(none)'}")
    if has_userinfo or url.raw_user is not None or url.raw_password is not None:
        raise FetchRefused("bad_url", "credentials in the URL are refused")
    if not url.raw_host:
        raise FetchRefused("bad_url", "the URL has no host")
    return url.with_fragment(None)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a URL leads: its host as written, its port, every address the host resolved to."""

    host: str
    port: int
    addresses: tuple[IPAddress, ...]  # each one checked; the fetcher connects to the first


async def destination(url: str, *, allow: tuple[Network, ...]) -> Destination:
    """Check `url` as the fetcher checks every hop and resolve its host once, without fetching.

    For a URL handed to someone else to load (the rendering vendor): the same rules, the same
    FetchRefused (bad_url, scheme, private_address, dns).
    """
    checked = _checked_url(url)
    addresses = await _checked_addresses(checked, allow)
    return Destination(host=checked.raw_host or "", port=checked.port or 0, addresses=addresses)


async def _pinned_address(url: URL, allow: tuple[Network, ...]) -> IPAddress:
    """Resolve the URL's host once and return the address to connect to, all answers checked."""
    return (await _checked_addresses(url, allow))[0]


async def _checked_addresses(url: URL, allow: tuple[Network, ...]) -> tuple[IPAddress, ...]:
    host = url.raw_host or ""
    try:
        literal = literal_host(host)
    except ValueError as exc:
        raise FetchRefused("bad_url", str(exc)) from None
    if literal is not None:
        _check_address(literal, host, allow)
        return (literal,)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, url.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise FetchRefused("dns", f"{host} did not resolve") from None
    # str: an AF_INET / AF_INET6 address (getaddrinfo types the other families' too).
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not addresses:
        raise FetchRefused("dns", f"{host} did not resolve")
    for address in addresses:
        _check_address(address, host, allow)
    return tuple(addresses)


def _check_address(address: IPAddress, host: str, allow: tuple[Network, ...]) -> None:
    reason = refusal(address, allow=allow)
    if reason is not None:
        raise FetchRefused("private_address", f"{host} is not a public address ({reason})")


class _PinnedResolver(AbstractResolver):
    """Answer every lookup with the one address already checked."""

    def __init__(self, address: IPAddress) -> None:
        self._address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        family = socket.AF_INET6 if self._address.version == 6 else socket.AF_INET
        return [
            ResolveResult(
                hostname=host,
                host=str(self._address),
                port=port,
                family=family,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class _Hop:
    status: int
    location: str | None
    content_type: str
    charset: str | None
    body: bytes
    wire_bytes: int


async def _request(
    url: URL, address: IPAddress, *, limits: FetchLimits, user_agent: str, method: str
) -> _Hop:
    connector = aiohttp.TCPConnector(resolver=_PinnedResolver(address), force_close=True)
    headers = {
        "User-Agent": user_agent,
        "Accept-Encoding": "gzip, deflate",
        "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.8",
    }
    try:
        async with (
            aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                trust_env=False,
                timeout=aiohttp.ClientTimeout(total=None),
            ) as client,
            client.request(method, url, headers=headers, allow_redirects=False) as response,
        ):
            location = response.headers.get("Location")
            if response.status in REDIRECT_STATUSES and location:
                return _Hop(response.status, location, "", None, b"", 0)
            body, wire_bytes = await _read_body(response, limits, url.raw_host or "")
            return _Hop(
                status=response.status,
                location=None,
                content_type=response.content_type.lower(),
                charset=response.charset,
                body=body,
                wire_bytes=wire_bytes,
            )
    except aiohttp.ClientSSLError:
        raise FetchRefused("tls", f"TLS with {url.raw_host} failed") from None
    except (aiohttp.ClientResponseError, aiohttp.ClientPayloadError):
        raise FetchRefused("protocol", f"{url.raw_host} did not answer valid HTTP") from None
    except aiohttp.InvalidURL:
        raise FetchRefused("bad_url", "the URL cannot be requested") from None
    except (aiohttp.ClientConnectionError, OSError):
        raise FetchRefused("connect", f"the connection to {url.raw_host} failed") from None
    except aiohttp.ClientError:
        raise FetchRefused("protocol", f"{url.raw_host} did not answer valid HTTP") from None


async def _read_body(
    response: aiohttp.ClientResponse, limits: FetchLimits, host: str
) -> tuple[bytes, int]:
    declared = response.content_length
    if declared is not None and declared > limits.max_bytes:
        raise FetchRefused("too_large", f"{host} declared {declared} bytes, over the cap")
    inflater = _inflater(response.headers.get("Content-Encoding", ""), host)
    parts: list[bytes] = []
    wire_bytes = 0
    async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
        wire_bytes += len(chunk)
        if wire_bytes > limits.max_bytes:
            raise FetchRefused(
                "too_large", f"the body from {host} is over the cap", wire_bytes=wire_bytes
            )
        data = chunk if inflater is None else inflater.feed(chunk, limits, wire_bytes, host)
        parts.append(data)
    if inflater is not None:
        parts.append(inflater.finish(limits, wire_bytes, host))
    return b"".join(parts), wire_bytes


def _inflater(content_encoding: str, host: str) -> _Inflater | None:
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _Inflater(encoding)
    raise FetchRefused("unsupported_encoding", f"{host} sent Content-Encoding {encoding!r}")


class _Inflater:
    """Inflate gzip or deflate incrementally, never holding more than the decompressed cap."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding != "deflate"
        # "deflate" is meant to be zlib-wrapped, but some servers send it raw: decided on
        # the first bytes.
        self._zlib_wrapped: bool | None = None if not self._gzip else True
        self._decoder = self._new_decoder()
        self._size = 0

    def _new_decoder(self):
        if self._gzip:
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(zlib.MAX_WBITS if self._zlib_wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes, limits: FetchLimits, wire_bytes: int, host: str) -> bytes:
        if self._zlib_wrapped is None:
            # A zlib header's first byte is 0x?8 with a checksum over the first two bytes.
            self._zlib_wrapped = (
                len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            )
            self._decoder = self._new_decoder()
        out: list[bytes] = []
        try:
            while data:
                room = limits.max_decompressed_bytes - self._size + 1
                piece = self._decoder.decompress(data, room)
                self._size += len(piece)
                if self._size > limits.max_decompressed_bytes:
                    raise FetchRefused(
                        "decompression_bomb",
                        f"the body from {host} inflates past the cap",
                        wire_bytes=wire_bytes,
                    )
                out.append(piece)
                if self._decoder.unconsumed_tail:
                    data = self._decoder.unconsumed_tail
                elif self._decoder.eof and self._decoder.unused_data and self._gzip:
                    # Concatenated gzip members.
                    data = self._decoder.unused_data
                    self._decoder = self._new_decoder()
                else:
                    data = b""
        except zlib.error:
            raise FetchRefused("protocol", f"the compressed body from {host} is corrupt") from None
        return b"".join(out)

    def finish(self, limits: FetchLimits, wire_bytes: int, host: str) -> bytes:
        try:
            tail = self._decoder.flush()
        except zlib.error:
            raise FetchRefused("protocol", f"the compressed body from {host} is corrupt") from None
        self._size += len(tail)
        if self._size > limits.max_decompressed_bytes:
            raise FetchRefused(
                "decompression_bomb",
                f"the body from {host} inflates past the cap",
                wire_bytes=wire_bytes,
            )
        return tail
