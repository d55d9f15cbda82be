"""The one HTTP/1.1 client model vendors are called with: pooled keep-alive connections on
an asyncio protocol, httptools' parser (the one uvicorn already runs), nothing else. One
connection and the answers read from it: gateway/adapters/wire.py.

Why not aiohttp's client: a vendor call is the hot path's one outbound request, and aiohttp
spends about 200 Python calls on it (its request and response objects, its stream reader,
signals, cookie jar, auto headers); this spends a few dozen. The calls that need more than a
POST (redirects, a pinned TLS name: guard hooks, web acquisition) stay on aiohttp.

What it does:
- POST only, a whole body at once; the answer's status and headers first, then its body,
  read as it comes (`readany`), up to a size (`read(n)`) or whole (`read()`).
- One pool of idle connections per (scheme, host, port), newest first; a connection idle
  longer than `keepalive_s`, or one the server closed, is never handed out. An answer read to
  its end goes back to the pool. One let go before its end is read on and dropped, and its
  connection kept, if the rest is short and comes soon: a stream's last bytes (the chunked
  body's end) often arrive just after its final event, and a new TLS connection to a vendor
  costs far more than waiting for them.
- A header name or value with a line break is refused (a tenant's key is text it chose).
- No redirects, no cookies, no decompression (it asks for `identity`), no proxies: the same
  as the aiohttp session it replaces was configured to do.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from yarl import URL

from gateway.adapters.wire import Connection, HttpClientError, InvalidHeader, VendorResponse

_URLS_CACHED = 1024  # parsed URLs kept (a profile's few URLs; a signed one varies by model)
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"  # what stays as it is in a path: an escape stays escaped


class VendorClient:
    """Pooled keep-alive HTTP/1.1 connections to vendors; one per process (the runtime's)."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = 10.0,
        keepalive_s: float = 15.0,
        drain_timeout_s: float = 1.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._keepalive_s = keepalive_s
        self.drain_timeout_s = drain_timeout_s  # how long a let-go answer may take to end
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._urls: dict[str, _Target] = {}
        self._open: set[Connection] = set()
        self._closed = False

    def post(self, url: str | URL, *, data: bytes, headers: Mapping[str, str]) -> _PendingResponse:
        """Send `data`; awaited, or entered with `async with`, it gives the answer once its
        status and headers are in (leaving the `async with` lets it go)."""
        return _PendingResponse(self, str(url), data, headers)

    async def __aenter__(self) -> VendorClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection, idle or busy."""
        self._closed = True
        for conn in list(self._open):
            conn.close()
        self._idle.clear()

    async def _send(self, url: str, data: bytes, headers: Mapping[str, str]) -> VendorResponse:
        if self._closed:
            raise HttpClientError("the client is closed")
        target = self._target(url)
        message = _request_bytes(target, data, headers)
        conn = self._idle_connection(target.key) or await self._connect(target)
        return await conn.exchange(message)

    def _target(self, url: str) -> _Target:
        target = self._urls.get(url)
        if target is None:
            if len(self._urls) >= _URLS_CACHED:
                self._urls.clear()
            target = self._urls[url] = _Target.parse(url)
        return target

    def _idle_connection(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        fresh_after = time.monotonic() - self._keepalive_s
        while idle:
            conn = idle.pop()
            if conn.usable and conn.idle_since >= fresh_after:
                return conn
            conn.close()
        return None

    async def _connect(self, target: _Target) -> Connection:
        loop = asyncio.get_running_loop()
        scheme, host, port = target.key
        tls = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        async with asyncio.timeout(self._connect_timeout_s):
            _, conn = await loop.create_connection(
                lambda: Connection(self, target.key, loop),
                host,
                port,
                ssl=tls,
                server_hostname=host if tls else None,
            )
        return conn

    def opened(self, conn: Connection) -> None:
        self._open.add(conn)

    def closed(self, conn: Connection) -> None:
        self._open.discard(conn)

    def put_back(self, conn: Connection) -> None:
        """An answer is all in: its connection serves the next call to its host."""
        if self._closed:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle = self._idle.setdefault(conn.key, [])
        # Newest last (handed out first); the oldest, first, go once stale.
        while idle and (
            not idle[0].usable or idle[0].idle_since < conn.idle_since - self._keepalive_s
        ):
            idle.pop(0).close()
        idle.append(conn)


class _Target:
    """A URL as a call needs it: its pool's key, its Host header, its request target."""

    __slots__ = ("host_header", "key", "path")

    def __init__(self, key: tuple[str, str, int], host_header: str, path: str) -> None:
        self.key = key
        self.host_header = host_header
        self.path = path

    @classmethod
    def parse(cls, url: str) -> _Target:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise HttpClientError(f"not an http(s) URL: {scheme or 'no scheme'}")
        host = parts.hostname
        default = 443 if scheme == "https" else 80
        try:
            port = parts.port or default
        except ValueError:  # a port out of range or not a number
            raise HttpClientError("the URL's port is not a port") from None
        named = f"[{host}]" if ":" in host else host
        host_header = named if port == default else f"{named}:{port}"
        path = quote(parts.path or "/", safe=_PATH_SAFE)
        if parts.query:
            path = f"{path}?{quote(parts.query, safe=_PATH_SAFE + '?')}"
        return cls((scheme, host, port), host_header, path)


def _request_bytes(target: _Target, data: bytes, headers: Mapping[str, str]) -> bytes:
    fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    # Each header adds exactly one CR and one LF; any more is a line break inside one.
    if fields.count("\n") != len(headers) or fields.count("\r") != len(headers):
        raise InvalidHeader("a header holds a line break")
    host = "" if "Host" in headers or "host" in headers else f"Host: {target.host_header}\r\n"
    head = (
        f"POST {target.path} HTTP/1.1\r\n{host}"
        f"Accept-Encoding: identity\r\n{fields}Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode("utf-8", "surrogateescape") + data


class _PendingResponse:
    """`client.post(...)`: awaitable for the answer, or an `async with` that lets it go."""

    __slots__ = ("_args", "_client", "_response")

    def __init__(
        self, client: VendorClient, url: str, data: bytes, headers: Mapping[str, str]
    ) -> None:
        self._client = client
        self._args = (url, data, headers)
        self._response: VendorResponse | None = None

    def __await__(self):
        return self._client._send(*self._args).__await__()

    async def __aenter__(self) -> VendorResponse:
        self._response = await self._client._send(*self._args)
        return self._response

    async def __aexit__(self, *exc_info: object) -> None:
        if self._response is not None:
            self._response.release()
