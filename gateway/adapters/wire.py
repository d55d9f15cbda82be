"""One keep-alive connection to a vendor and the answers read from it (gateway/adapters/
client.py pools them): httptools parses the answer as it arrives, and the answer's body is
read as it comes, up to a size or whole.

- Bytes received before a connection broke are read first; then the read raises
  ServerDisconnected (a stream's last tokens are not lost to the break).
- At most `BUFFER_HIGH` unread bytes per answer: past that the socket stops being read until
  the reader catches up.
- An answer let go before its end is read on and dropped, and its connection kept, if the
  rest is short (`DRAIN_MAX_BYTES`) and comes soon (the pool's drain timeout).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import httptools

BUFFER_HIGH = 64 * 1024  # unread bytes at which the socket is paused
BUFFER_LOW = 16 * 1024  # ... and resumed
DRAIN_MAX_BYTES = 16 * 1024  # what a let-go answer may still send for its connection to stay
HEADERS_MAX_BYTES = 64 * 1024  # an answer's headers, all together: more is not an answer


class HttpClientError(Exception):
    """A vendor call failed below HTTP: the connection, or bytes that are not HTTP."""


class ServerDisconnected(HttpClientError, ConnectionError):
    """The connection closed before the answer ended."""


class BadResponse(HttpClientError):
    """The server sent bytes that are not an HTTP/1.1 answer."""


class InvalidHeader(HttpClientError, ValueError):
    """A header to send holds a line break: sent, it would start a header of its own."""


class Headers(dict):
    """An answer's headers by lowercase name (repeated ones joined by ", ")."""

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


class Pool(Protocol):
    """What a connection tells the pool it belongs to."""

    drain_timeout_s: float  # how long a let-go answer may take to end

    def opened(self, conn: Connection) -> None: ...

    def closed(self, conn: Connection) -> None: ...

    def put_back(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One keep-alive connection: one answer at a time, parsed as it arrives."""

    __slots__ = (
        "_answer_ended",
        "_pool",
        "_closing",
        "_drain_left",
        "_drain_timer",
        "_loop",
        "_header_bytes",
        "_header_names",
        "_paused",
        "_waiter",
        "idle_since",
        "key",
        "lost",
        "parser",
        "response",
        "transport",
    )

    def __init__(
        self, pool: Pool, key: tuple[str, str, int], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._pool = pool
        self._loop = loop
        self.key = key
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.response: VendorResponse | None = None
        self._waiter: asyncio.Future[VendorResponse] | None = None
        self._header_names: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._paused = False
        self._answer_ended = True
        self._closing = False
        self._drain_left = -1  # bytes a let-go answer may still send; -1: not draining
        self._drain_timer: asyncio.TimerHandle | None = None
        self.lost = False
        self.idle_since = 0.0

    async def exchange(self, message: bytes) -> VendorResponse:
        """Send one request; return its answer once its status and headers are in."""
        assert self.transport is not None and self._answer_ended
        self._answer_ended = False
        self.response = None
        waiter = self._waiter = self._loop.create_future()
        self.transport.write(message)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # The answer came, then a cancellation: let the answer go as its reader would
                # (the connection may be back in the pool already, serving another call).
                waiter.result().release()
            else:
                self.close()  # given up before the answer: the connection's state is unknown
            raise
        finally:
            # Cleared only if it is still this call's: once the answer is all in, the
            # connection may serve the next call before this one resumes.
            if self._waiter is waiter:
                self._waiter = None

    def close(self) -> None:
        self._closing = True  # never handed out again
        self._stop_draining()
        if self.transport is not None:
            self.transport.close()

    @property
    def usable(self) -> bool:
        return self._answer_ended and not self.lost and not self._closing

    def release(self) -> None:
        """The reader let go of an answer before its end: read on and drop the rest, and
        serve again once it ends; close if it goes past DRAIN_MAX_BYTES or the client's
        drain timeout."""
        if self.lost or self._closing or self._answer_ended:
            self.close()  # ended, and not to be kept (`Connection: close`), or gone already
            return
        self.response = None
        self._drain_left = DRAIN_MAX_BYTES
        self._drain_timer = self._loop.call_later(self._pool.drain_timeout_s, self.close)
        self.resume()

    def _stop_draining(self) -> None:
        self._drain_left = -1
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.lost:
            self._paused = False
            self.transport.resume_reading()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._pool.opened(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"the vendor's answer is not HTTP/1.1 ({exc})"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._stop_draining()
        self._pool.closed(self)
        response = self.response
        if response is not None and not response.ended and response.until_close and exc is None:
            response.feed_end()  # a body with no length ends when the server closes
            return
        self._fail(ServerDisconnected("the vendor closed the connection"))

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self._header_names = []
        self._header_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > HEADERS_MAX_BYTES:
            # Raised in a parser callback, it comes out of feed_data as the parser's error.
            raise BadResponse("the vendor's answer has too many headers")
        self._header_names.append((name, value))

    def on_headers_complete(self) -> None:
        headers = Headers()
        for raw_name, raw_value in self._header_names:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self._header_names = []
        status = self.parser.get_status_code()
        chunked = "chunked" in (headers.get("transfer-encoding") or "")
        until_close = "content-length" not in headers and not chunked
        self.response = VendorResponse(self, status, headers, until_close=until_close)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(self.response)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response.feed(body)
        elif self._drain_left >= 0:
            self._drain_left -= len(body)
            if self._drain_left < 0:
                self.close()

    def on_message_complete(self) -> None:
        self._answer_ended = True
        response = self.response
        if response is not None:
            response.feed_end()
        elif self._drain_timer is None:
            return  # nobody asked (it closes if more comes)
        self._stop_draining()
        if self.usable and self.parser.should_keep_alive():
            # The answer is all in: the connection serves the next call while it is read.
            if response is not None:
                response.detach()
                self.response = None
            self.resume()
            self._pool.put_back(self)

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        elif self.response is not None and not self.response.ended:
            self.response.feed_error(error)


class VendorResponse:
    """An answer: its status and headers, and its body as it arrives."""

    __slots__ = (
        "_chunks",
        "_conn",
        "_error",
        "_size",
        "_waiter",
        "ended",
        "headers",
        "status",
        "until_close",
    )

    def __init__(
        self, conn: Connection, status: int, headers: Headers, *, until_close: bool
    ) -> None:
        self._conn: Connection | None = conn
        self.status = status
        self.headers = headers
        self.ended = False
        self._chunks: list[bytes] = []
        self._size = 0
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.until_close = until_close  # no length: the body ends when the server closes

    async def readany(self) -> bytes:
        """What has arrived since the last read (waiting for some), or b"" at the end."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.ended:
                return b""
            await self._wait()
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._size = 0
        self._drained()
        return data

    async def read(self, n: int = -1) -> bytes:
        """At most `n` bytes (waiting for some; b"" at the end), or with n < 0 the whole
        rest of the body."""
        if n < 0:
            parts = []
            while data := await self.readany():
                parts.append(data)
            return b"".join(parts)
        data = await self.readany()
        if len(data) > n:
            self._chunks.insert(0, data[n:])
            self._size += len(data) - n
            data = data[:n]
        return data

    def detach(self) -> None:
        """The answer is all buffered and its connection back in the pool."""
        self._conn = None

    def release(self) -> None:
        """Done with the answer: a connection it still holds (it did not end) reads the rest
        on its own."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.release()

    async def _wait(self) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _drained(self) -> None:
        if self._size <= BUFFER_LOW and self._conn is not None:
            self._conn.resume()

    # What the connection feeds in.

    def feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > BUFFER_HIGH and self._conn is not None:
            self._conn.pause()
        self._wake()

    def feed_end(self) -> None:
        self.ended = True
        self._wake()

    def feed_error(self, error: Exception) -> None:
        self._error = error
        self._wake()
