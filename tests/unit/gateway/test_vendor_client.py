"""The vendor client against servers that send exactly the bytes each case needs: what it
sends, keep-alive reuse, bodies by length, chunks and close, a connection cut mid-answer
(what arrived is read first), flow control, TLS, and the refusals."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from gateway.adapters.client import VendorClient
from gateway.adapters.wire import (
    BUFFER_HIGH,
    DRAIN_MAX_BYTES,
    HEADERS_MAX_BYTES,
    BadResponse,
    Connection,
    HttpClientError,
    InvalidHeader,
    ServerDisconnected,
)
from tests.support.certificates import self_signed_context

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A TCP server on 127.0.0.1 whose handler writes raw bytes; it counts connections and
    keeps each request it read (head and body)."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request


def run(scenario: Callable[[], Awaitable[object]], loop: str) -> object:
    """Run a scenario on asyncio's own loop or uvloop (the gateway's), failing it at 10 s."""

    async def bounded() -> object:
        async with asyncio.timeout(10):
            return await scenario()

    if loop == "uvloop":
        return uvloop.run(bounded())
    return asyncio.run(bounded())


LOOPS = pytest.mark.parametrize("loop", ["asyncio", "uvloop"])


async def until_lost(response) -> None:
    """Wait until the client has seen the server close the answer's connection."""
    while not response._conn.lost:
        await asyncio.sleep(0.005)


def answer_with_length(body: bytes) -> bytes:
    return OK_HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@LOOPS
def test_it_sends_one_plain_request_and_reuses_the_connection(loop):
    server: Server

    async def handler(reader, writer):
        while True:
            await server.read_request(reader)
            writer.write(answer_with_length(b'{"ok":true}'))

    async def scenario():
        nonlocal server
        async with Server(handler) as server, VendorClient() as client:
            bodies = []
            for _ in range(3):
                async with client.post(
                    server.url + "/v1/chat/completions?api-version=2024",
                    data=b'{"model":"m"}',
                    headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
                ) as response:
                    bodies.append((response.status, response.headers["content-type"]))
                    bodies.append(await response.read())
            return server.connections, server.requests, bodies

    connections, requests, bodies = run(scenario, loop)

    assert connections == 1
    host = requests[0].split(b"Host: ")[1].split(b"\r\n")[0]
    assert requests[0] == (
        b"POST /v1/chat/completions?api-version=2024 HTTP/1.1\r\nHost: " + host + b"\r\n"
        b"Accept-Encoding: identity\r\nAuthorization: Bearer k\r\n"
        b"Content-Type: application/json\r\nContent-Length: 13\r\n\r\n"
        b'{"model":"m"}'
    )
    assert host.startswith(b"127.0.0.1:")
    assert bodies == [(200, "application/json"), b'{"ok":true}'] * 3


@LOOPS
def test_a_chunked_stream_is_read_as_it_comes_then_its_connection_serves_again(loop):
    server: Server
    go_on = None

    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"data: one\n\n"))
        await go_on.wait()
        writer.write(chunk(b"data: two\n\n") + b"0\r\n\r\n")
        await server.read_request(reader)
        writer.write(answer_with_length(b"again"))

    async def scenario():
        nonlocal server, go_on
        go_on = asyncio.Event()
        async with Server(handler) as server, VendorClient() as client:
            response = await client.post(server.url, data=b"{}", headers={})
            first = await response.readany()
            go_on.set()
            second = await response.readany()
            end = await response.readany()
            response.release()
            async with client.post(server.url, data=b"{}", headers={}) as again:
                reused = await again.read()
            return first, second, end, reused, server.connections

    assert run(scenario, loop) == (b"data: one\n\n", b"data: two\n\n", b"", b"again", 1)


@LOOPS
def test_what_arrived_before_a_cut_is_read_before_the_cut_raises(loop):
    server: Server

    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"data: last\n\n"))
        await writer.drain()
        writer.transport.abort()

    async def scenario():
        nonlocal server
        async with Server(handler) as server, VendorClient() as client:
            async with client.post(server.url, data=b"{}", headers={}) as response:
                await until_lost(response)  # the bytes and the cut are both in
                read = [await response.readany()]
                with pytest.raises(ServerDisconnected):
                    read.append(await response.readany())
            async with client.post(server.url, data=b"{}", headers={}) as second:
                with pytest.raises(ServerDisconnected):
                    await second.read()
            return read, server.connections

    read, connections = run(scenario, loop)

    assert read == [b"data: last\n\n"]
    assert connections == 2  # a cut connection is never handed out again


@LOOPS
def test_a_close_before_the_answer_raises_server_disconnected(loop):
    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")

    async def scenario():
        async with Server(handler) as server, VendorClient() as client:
            with pytest.raises(ServerDisconnected):
                await client.post(server.url, data=b"{}", headers={})
            return server.connections

    assert run(scenario, loop) == 1


@LOOPS
def test_a_body_without_length_ends_when_the_server_closes(loop):
    body = b"x" * 100_000

    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK_HEAD + b"Connection: close\r\n\r\n" + body)
        await writer.drain()

    async def scenario():
        async with (
            Server(handler) as server,
            VendorClient() as client,
            client.post(server.url, data=b"", headers={}) as response,
        ):
            return await response.read()

    assert run(scenario, loop) == body


@LOOPS
def test_an_answer_let_go_whose_end_comes_soon_keeps_its_connection(loop):
    server: Server
    let_go = None

    async def handler(reader, writer):
        for _ in range(2):
            await server.read_request(reader)
            writer.write(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"[DONE]"))
            await let_go.wait()
            let_go.clear()
            writer.write(chunk(b"x" * 8000) + b"0\r\n\r\n")  # the rest, then the end

    async def scenario():
        nonlocal server, let_go
        let_go = asyncio.Event()
        async with Server(handler) as server, VendorClient() as client:
            for _ in range(2):
                async with client.post(server.url, data=b"{}", headers={}) as response:
                    assert await response.readany() == b"[DONE]"
                let_go.set()
                while not client._idle.get(("http", "127.0.0.1", server.port)):
                    await asyncio.sleep(0.005)  # until the rest is read and dropped
            return server.connections

    assert run(scenario, loop) == 1


@LOOPS
@pytest.mark.parametrize("rest", ["never", "too long"])
def test_an_answer_let_go_whose_end_is_late_or_long_closes_its_connection(loop, rest):
    server: Server
    let_go = asyncio.Event()
    closed_by_client: list[asyncio.Event] = []

    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"part"))
        await let_go.wait()
        let_go.clear()
        if rest == "too long":
            writer.write(chunk(b"x" * (DRAIN_MAX_BYTES + 1)))
        await reader.read()  # until the client closes
        closed_by_client[-1].set()

    async def scenario():
        nonlocal server
        # Past the byte cap it closes at once: its timeout alone would outlast the test.
        drain_timeout_s = 0.05 if rest == "never" else 60
        async with (
            Server(handler) as server,
            VendorClient(drain_timeout_s=drain_timeout_s) as client,
        ):
            for _ in range(2):
                closed_by_client.append(asyncio.Event())
                async with client.post(server.url, data=b"{}", headers={}) as response:
                    assert await response.readany() == b"part"
                let_go.set()
                await closed_by_client[-1].wait()
            return server.connections

    assert run(scenario, loop) == 2


@LOOPS
def test_a_stale_or_server_closed_idle_connection_is_not_handed_out(loop):
    server: Server

    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(answer_with_length(b"one"))
        await writer.drain()  # then closes: the client's idle connection is gone

    async def scenario():
        nonlocal server
        async with Server(handler) as server:
            async with VendorClient() as client:
                await (await client.post(server.url, data=b"", headers={})).read()
                (idle,) = client._open
                while not idle.lost:  # until the client sees the server's close
                    await asyncio.sleep(0.005)
                second = await (await client.post(server.url, data=b"", headers={})).read()
            async with VendorClient(keepalive_s=0) as stale:
                await (await stale.post(server.url, data=b"", headers={})).read()
                third = await (await stale.post(server.url, data=b"", headers={})).read()
            return second, third, server.connections

    assert run(scenario, loop) == (b"one", b"one", 4)


@LOOPS
def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(loop):
    async def handler(reader, writer):
        raise AssertionError("nothing should connect")

    async def scenario():
        async with Server(handler) as server, VendorClient() as client:
            for headers in (
                {"Authorization": "Bearer k\r\nX-Injected: 1"},
                {"X-Key": "k\nX-Injected: 1"},
                {"X-Bad\r\nName": "v"},
            ):
                with pytest.raises(InvalidHeader):
                    await client.post(server.url, data=b"", headers=headers)
            return server.connections

    assert run(scenario, loop) == 0


@LOOPS
def test_a_fast_vendor_is_not_read_past_the_buffer_while_the_reader_is_slow(loop):
    size = 4 * 1024 * 1024
    piece = b"y" * 16_384

    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK_HEAD + b"Content-Length: %d\r\n\r\n" % size)
        for _ in range(size // len(piece)):
            writer.write(piece)
            await writer.drain()

    async def scenario():
        async with (
            Server(handler) as server,
            VendorClient() as client,
            client.post(server.url, data=b"", headers={}) as response,
        ):
            total, most_buffered, paused = 0, 0, False
            while data := await response.readany():
                total += len(data)
                most_buffered = max(most_buffered, len(data))
                await asyncio.sleep(0.001)  # a slow reader, so the vendor gets ahead
                paused = paused or response._conn is not None and response._conn._paused
            return total, most_buffered, paused

    total, most_buffered, paused = run(scenario, loop)

    assert total == size
    assert paused
    # Reading stops past BUFFER_HIGH; one socket read (at most 256 KiB) may land on top.
    assert most_buffered <= BUFFER_HIGH + 256 * 1024


@LOOPS
def test_tls_is_verified_and_a_trusted_certificate_serves(loop, tmp_path):
    server_context = self_signed_context(tmp_path)
    trusting = ssl.create_default_context(cafile=tmp_path / "cert.pem")

    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer_with_length(b"secret"))
        await writer.drain()

    async def scenario():
        async with Server(handler, server_context) as server:
            async with VendorClient() as client:
                with pytest.raises(ssl.SSLCertVerificationError):
                    await client.post(server.url, data=b"", headers={})
            async with (
                VendorClient(ssl_context=trusting) as client,
                client.post(server.url, data=b"", headers={}) as response,
            ):
                return await response.read()

    assert run(scenario, loop) == b"secret"


@LOOPS
def test_a_caller_that_gives_host_sends_its_own_and_escapes_stay_as_signed(loop):
    server: Server

    async def handler(reader, writer):
        await server.read_request(reader)
        writer.write(answer_with_length(b""))

    async def scenario():
        nonlocal server
        async with Server(handler) as server, VendorClient() as client:
            url = server.url + "/model/us.anthropic.claude%3A0/converse"
            await (await client.post(url, data=b"", headers={"host": "signed.example"})).read()
            return server.requests[0]

    request = run(scenario, loop)

    assert request.startswith(
        b"POST /model/us.anthropic.claude%3A0/converse HTTP/1.1\r\nAccept-Encoding: identity\r\n"
        b"host: signed.example\r\n"
    )
    assert request.count(b"ost: ") == 1


@LOOPS
def test_a_refused_connection_is_an_os_error(loop):
    async def scenario():
        async with Server(lambda r, w: asyncio.sleep(0)) as server:
            url = server.url
        async with VendorClient() as client:
            with pytest.raises(OSError):
                await client.post(url, data=b"", headers={})

    run(scenario, loop)


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written: the connection is driven by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def start_by_hand(call) -> asyncio.Future:
    """Run a call up to its first wait, right now (before any task the loop has queued)."""
    waited = call.send(None)
    assert isinstance(waited, asyncio.Future)
    return waited


def result_by_hand(call):
    with pytest.raises(StopIteration) as done:
        call.send(None)
    return done.value.value


@LOOPS
@pytest.mark.parametrize("first_call", ["resumes", "is cancelled"])
def test_a_call_that_takes_the_connection_before_the_last_resumes_is_answered(loop, first_call):
    """An answer all in one read puts its connection back in the pool before its call resumes
    (the resumption is queued): the next call may take it in between. The first call, resuming
    or cancelled (its deadline), must leave the second's wait and connection alone."""

    async def scenario():
        async with VendorClient() as client:
            key = ("http", "vendor.test", 80)
            conn = Connection(client, key, asyncio.get_running_loop())
            transport = RecordingTransport()
            conn.connection_made(transport)
            first = asyncio.create_task(conn.exchange(b"one"))
            await asyncio.sleep(0)  # the first call waits for its answer
            conn.data_received(answer_with_length(b"first"))  # all of it: back in the pool
            assert client._idle_connection(key) is conn
            second = conn.exchange(b"two")
            waited = start_by_hand(second)  # before the first call resumes
            if first_call == "resumes":
                assert await (await first).read() == b"first"
            else:
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
            assert not transport.closed
            conn.data_received(answer_with_length(b"second"))
            assert waited.done()
            answer = result_by_hand(second)
            return transport.written, await answer.read()

    assert run(scenario, loop) == ([b"one", b"two"], b"second")


ENDLESS_HEADERS = [OK_HEAD] + [
    b"X-Filler-%d: %s\r\n" % (n, b"f" * 1000) for n in range(HEADERS_MAX_BYTES // 1000 + 1)
]


@LOOPS
@pytest.mark.parametrize(
    "answer",
    [[b"SSH-2.0-OpenSSH_9.2\r\n\r\n"], ENDLESS_HEADERS],
    ids=["not HTTP", "endless headers"],
)
def test_an_answer_that_is_not_one_is_a_bad_response(loop, answer):
    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        for piece in answer:
            writer.write(piece)
            await writer.drain()
        await reader.read()

    async def scenario():
        async with Server(handler) as server, VendorClient() as client:
            with pytest.raises(BadResponse):
                await client.post(server.url, data=b"", headers={})

    run(scenario, loop)


@pytest.mark.parametrize("url", ["ftp://vendor.test/", "http:///v1", "http://vendor.test:99999/"])
def test_a_url_that_is_not_one_to_call_is_refused(url):
    async def scenario():
        async with VendorClient() as client:
            with pytest.raises(HttpClientError):
                await client.post(url, data=b"", headers={})

    run(scenario, "asyncio")
