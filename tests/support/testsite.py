"""A small web site on 127.0.0.1 for the fetcher, the crawl workers and the renderer tests.

    with TestSite() as site:                 # background thread, free port
        fetch(..., site.url + "/", ...)
        assert site.hits == ["/"]            # path and query of each request, in order

Every page is fixed and deterministic (the texts are the constants below):

* ``/`` the article: title ``ARTICLE_TITLE``, the paragraphs ``ARTICLE_SENTENCES`` inside
  ``<main><article>``, a nav and a footer (``BOILERPLATE``), and links, in document order,
  ``/``, ``/a``, ``/b``, ``/c``, ``#top`` (= ``/``), ``/a#again`` (= ``/a``),
  ``https://example.com/x``, ``/private/x``.
* The link graph ``GRAPH`` (path -> the paths it links to): ``/a``, ``/b``, ``/c`` lead on to
  ``/a/1``, ``/a/2``, ``/b/1``, ``/c/1`` and ``/a/1/x`` (three levels below ``/``), with links
  back up; each page's title is ``Page <path>`` and its text ``This is page <path>.``
* ``/private/x`` a page that ``/robots.txt`` disallows for every agent (``ROBOTS_TXT``; no
  Crawl-delay for ``*``, ``Crawl-delay: 2`` and ``Disallow: /`` for ``SlowBot``).
  ``TestSite(robots_status=404)`` (or 503, ...) answers /robots.txt with that status instead;
  ``TestSite(ssl_context=...)`` serves the same pages over TLS (``url`` is then https).
* ``/js`` content written by script: an empty ``<div id="app">`` and one
  ``document.getElementById("app").innerHTML = "<JSON string>";`` assignment.
* ``/redirect?to=URL[&status=302]``, ``/redirect-chain/<n>`` (n hops, then a page),
  ``/redirect-private`` (to http://10.0.0.1/), ``/redirect-metadata``
  (to http://169.254.169.254/latest/meta-data/).
* ``/huge?mb=N[&chunked=1]`` N MiB of ``a`` (with Content-Length unless chunked),
  ``/gzip-bomb[?mb=N]`` gzip of N MiB of zeros (default 1024: about 1 MB on the wire),
  ``/gzip`` and ``/deflate`` the article compressed, ``/slow?s=S`` headers at once, then one
  byte every 0.1 s for S seconds, ``/plain.txt``, ``/data.json``, ``/status/<code>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import struct
import threading
import zlib
from functools import cache
from typing import Self

from aiohttp import web

MIB = 1 << 20

ARTICLE_TITLE = "The toll keeper's ledger"
ARTICLE_SENTENCES = (
    "The toll keeper wrote every crossing into a ledger bound in green cloth.",
    "Each carriage paid four copper coins, and each rider on foot paid one.",
    "In the winter of the long frost the river froze and nobody crossed for nine weeks.",
    "When the thaw came the keeper found the ledger had balanced to the last coin.",
)
BOILERPLATE = (
    "Home",
    "Section A",
    "Section B",
    "Subscribe to our newsletter for weekly updates",
    "Copyright 2026 Tollgate test site. All rights reserved.",
)
PLAIN_TEXT = "A plain text file.\nIt has two lines.\n"
DATA_JSON = {"name": "tollgate", "pages": 8, "ok": True}
JS_PAGE = (
    "<!doctype html><html><head><title>Script page</title></head><body>"
    '<div id="app"></div>'
    '<script>document.getElementById("app").innerHTML = '
    '"<h1>Rendered title</h1><p>Rendered paragraph one.</p>";</script>'
    "</body></html>"
)
ROBOTS_TXT = (
    "# Tollgate test site\n"
    "User-agent: *\n"
    "Disallow: /private/\n"
    "\n"
    "User-agent: SlowBot\n"
    "Crawl-delay: 2\n"
    "Disallow: /\n"
)
GRAPH: dict[str, tuple[str, ...]] = {
    "/a": ("/a/1", "/a/2", "/"),
    "/b": ("/b/1", "/a"),
    "/c": ("/c/1", "/private/x", "/"),
    "/a/1": ("/a/1/x", "/"),
    "/a/2": ("/",),
    "/b/1": ("/b",),
    "/c/1": (),
    "/a/1/x": ("/",),
    "/private/x": ("/",),
}


def article_html() -> str:
    paragraphs = "".join(f"<p>{sentence}</p>" for sentence in ARTICLE_SENTENCES)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{ARTICLE_TITLE} | Tollgate test site</title></head><body>"
        '<header id="top"><nav><a href="/">Home</a> <a href="/a">Section A</a> '
        '<a href="/b">Section B</a></nav></header>'
        f"<main><article><h1>{ARTICLE_TITLE}</h1>{paragraphs}"
        '<p>Read on in <a href="/c">part C</a>, back to <a href="#top">the top</a>, or '
        '<a href="/a#again">section A again</a>.</p></article></main>'
        "<aside><p>Subscribe to our newsletter for weekly updates</p></aside>"
        "<footer><p>Copyright 2026 Tollgate test site. All rights reserved.</p>"
        '<a href="https://example.com/x">Elsewhere</a> <a href="/private/x">Staff</a>'
        "</footer></body></html>"
    )


def graph_html(path: str) -> str:
    links = "".join(f'<li><a href="{target}">{target}</a></li>' for target in GRAPH[path])
    return (
        f"<!doctype html><html><head><title>Page {path}</title></head><body>"
        f"<main><h1>Page {path}</h1><p>This is page {path}.</p><ul>{links}</ul></main>"
        "</body></html>"
    )


@cache
def gzip_bomb_parts(mib: int) -> tuple[bytes, bytes, bytes]:
    """Return (head, repeated piece, tail) of a gzip stream of `mib` MiB of zeros.

    After a full flush deflate starts afresh, so the piece compressing one MiB of zeros is
    the same bytes every time: the stream is head + piece * mib + tail, built in milliseconds.
    """
    block = bytes(MIB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflater.compress(block) + deflater.flush(zlib.Z_FULL_FLUSH)
    piece = deflater.compress(block) + deflater.flush(zlib.Z_FULL_FLUSH)
    assert first == piece
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(block, crc)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03"
    tail = deflater.flush() + struct.pack("<II", crc, (mib * MIB) & 0xFFFFFFFF)
    return head, piece, tail


def make_app(hits: list[str], lock: threading.Lock, robots_status: int = 200) -> web.Application:
    @web.middleware
    async def record(request: web.Request, handler):
        with lock:
            hits.append(request.path_qs)
        return await handler(request)

    async def home(request: web.Request) -> web.Response:
        return web.Response(text=article_html(), content_type="text/html")

    async def graph_page(request: web.Request) -> web.Response:
        if request.path not in GRAPH:
            raise web.HTTPNotFound(text="not found")
        return web.Response(text=graph_html(request.path), content_type="text/html")

    async def robots(request: web.Request) -> web.Response:
        if robots_status != 200:
            return web.Response(status=robots_status, text=f"status {robots_status}")
        return web.Response(text=ROBOTS_TXT, content_type="text/plain")

    async def js(request: web.Request) -> web.Response:
        return web.Response(text=JS_PAGE, content_type="text/html")

    async def redirect(request: web.Request) -> web.Response:
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": request.query["to"]})

    async def redirect_chain(request: web.Request) -> web.Response:
        hops = int(request.match_info["n"])
        if hops <= 0:
            return web.Response(text=graph_html("/c/1"), content_type="text/html")
        raise web.HTTPFound(f"/redirect-chain/{hops - 1}")

    async def redirect_private(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://10.0.0.1/")

    async def redirect_metadata(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    async def huge(request: web.Request) -> web.StreamResponse:
        mib = int(request.query.get("mb", "10"))
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        if request.query.get("chunked") == "1":
            response.enable_chunked_encoding()
        else:
            response.content_length = mib * MIB
        await response.prepare(request)
        block = b"a" * MIB
        with contextlib.suppress(ConnectionResetError):  # the client hung up at its cap
            for _ in range(mib):
                await response.write(block)
            await response.write_eof()
        return response

    async def gzip_bomb(request: web.Request) -> web.StreamResponse:
        mib = int(request.query.get("mb", "1024"))
        head, piece, tail = gzip_bomb_parts(mib)
        response = web.StreamResponse(
            headers={"Content-Type": "text/html", "Content-Encoding": "gzip"}
        )
        response.content_length = len(head) + len(piece) * mib + len(tail)
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the client hung up at its cap
            await response.write(head)
            for _ in range(mib):
                await response.write(piece)
            await response.write(tail)
            await response.write_eof()
        return response

    async def compressed(request: web.Request) -> web.Response:
        html = article_html().encode()
        if request.path == "/gzip":
            deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        else:
            deflater = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS)
        body = deflater.compress(html) + deflater.flush()
        return web.Response(
            body=body,
            headers={
                "Content-Type": "text/html; charset=utf-8",
                "Content-Encoding": request.path.lstrip("/"),
            },
        )

    async def slow(request: web.Request) -> web.StreamResponse:
        seconds = float(request.query.get("s", "5"))
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        with contextlib.suppress(ConnectionResetError):  # the client gave up waiting
            while loop.time() < deadline:
                await response.write(b".")
                await asyncio.sleep(0.1)
            await response.write_eof()
        return response

    async def plain(request: web.Request) -> web.Response:
        return web.Response(text=PLAIN_TEXT, content_type="text/plain", charset="utf-8")

    async def data(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(DATA_JSON), content_type="application/json")

    async def status(request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"status {code}")

    app = web.Application(middlewares=[record])
    app.router.add_get("/", home)
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/js", js)
    app.router.add_get("/redirect", redirect)
    app.router.add_get(r"/redirect-chain/{n:\d+}", redirect_chain)
    app.router.add_get("/redirect-private", redirect_private)
    app.router.add_get("/redirect-metadata", redirect_metadata)
    app.router.add_get("/huge", huge)
    app.router.add_get("/gzip-bomb", gzip_bomb)
    app.router.add_get("/gzip", compressed)
    app.router.add_get("/deflate", compressed)
    app.router.add_get("/slow", slow)
    app.router.add_get("/plain.txt", plain)
    app.router.add_get("/data.json", data)
    app.router.add_get(r"/status/{code:\d{3}}", status)
    app.router.add_get("/{tail:.*}", graph_page)
    return app


class TestSite:
    """Serve the test site in a background thread: ``with TestSite() as site: site.url``."""

    __test__ = False  # not a test class, whatever its name says

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        robots_status: int = 200,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.robots_status = robots_status
        self.ssl_context = ssl_context
        self._hits: list[str] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def hits(self) -> list[str]:
        """The path and query of every request received, in order (a copy)."""
        with self._lock:
            return list(self._hits)

    def clear(self) -> None:
        with self._lock:
            self._hits.clear()

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            runner = loop.run_until_complete(self._start())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    async def _start(self) -> web.AppRunner:
        app = make_app(self._hits, self._lock, self.robots_status)
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(
            runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context
        )
        await site.start()
        self.port = runner.addresses[0][1]
        return runner

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._serve, name="test-site", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test site did not start within 10 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
