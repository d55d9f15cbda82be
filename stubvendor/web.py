"""The stub's web vendors: a JavaScript renderer and a search API (any prefix).

* ``POST .../render``: load a page and "run" its scripts (below).
* ``POST .../search``: answer a query with results recomputable from it.

Both: key ``Authorization: Bearer <key>``, checked like the other vendor
routes (server.py's docstring: missing/empty -> 401, ``STUB_ACCEPT_KEYS``
applies).  Errors are ``{"error": {"message", "type"}}`` with type
``invalid_request_error`` (400), ``authentication_error`` (401),
``permission_error`` (403), ``rate_limit_error`` (429), ``api_error`` (500)
or ``upstream_error`` (502).  Order: record, key check, body check (400),
faults, answer; so a call refused with 401 or 400 consumes no fault, and a
status fault on ``render`` loads no page.  Other methods: 405 (the dispatcher
answers it, in the OpenAI error shape, as for every route).

Every call is recorded in ``GET /_stub/calls`` with ``shape: "web"``,
``model: null``, ``stream: false``, ``user: null``, ``max_tokens: null`` and
the body (null when it is not JSON).  Queued faults apply (``match.key``
picks the call; a fault with ``match.model`` never matches, the model being
null): ``429`` (with ``Retry-After``), ``401``, ``403`` (both with
``x-stub-echo-key``), ``500``, and the refusals ``400``, ``404``, ``413``,
``422`` (with the fault's ``message``; types ``invalid_request_error``,
``not_found_error``, ``request_too_large``, ``invalid_request_error``) answer
that status with the error above;
``hang`` never answers; ``slow`` waits ``delay_ms`` once, then answers;
``fail_before_first_token`` / ``fail_after_tokens`` close the connection
without a response.

Render
------
Body ``{"url": "<http(s) URL with a host>", "wait_ms": <int >= 0, optional,
ignored>, "resolve": <optional pin, below>, "follow_redirects": <bool,
optional, default true>}``; anything else is a 400.  The stub is the vendor,
so it fetches the URL itself (GET, no address rules, 10 s in all, the body
decompressed, at most 5 MB); redirects are followed wherever they lead, as a
browser does, unless ``follow_redirects`` is false: then it loads the asked
URL only, and a redirect (301, 302, 303, 307, 308 with a ``Location``) is
answered as it came, unrendered (below), for the caller to judge and ask
again.  ``resolve`` is ``{"host": <name>, "port":
<1..65535>, "addresses": [<IP address>, ...] (at least one)}``, as curl's
``--resolve``: a connection to that host and port goes to those addresses,
with no lookup; every other host (a redirect's) is looked up as usual.  Then
it parses what it got as an HTML5 document
(whatever the page's type, as a browser shows it) with scripting on.  Then
every ``<script>`` element of the page, in document order, whose whole text
is ::

    document.getElementById("ID").innerHTML = <JSON string literal>;

(whitespace allowed around every token; single or double quotes around ID,
which holds no quote; the literal parsed with ``json.loads``) sets the inner
HTML of the first element whose ``id`` is ID to the parsed string and is
removed.  A matching script that names no element, any other script, and a
script that arrives in inserted HTML are left as they are (a script already
taken out of the document by an earlier assignment does nothing).  The body is
decoded by the page's charset, else UTF-8 (undecodable bytes replaced).
Answer 200::

    {"url": <as asked>, "final_url": <after redirects>, "status": <the page's
     HTTP status, e.g. 404, passed through>, "content_type": <its media type,
     no parameters; application/octet-stream when absent>, "html": <the
     rendered document, serialized>, "rendered": true, "credits": 1}

An unfollowed redirect answers 200 ``{"url", "final_url": <as asked>,
"status": <the 3xx>, "content_type", "location": <its Location, resolved
against the asked URL>, "html": "", "rendered": false, "credits": 1}``.

A page that cannot be loaded (connection refused, DNS, timeout, too many
redirects, a broken body) answers 502 ``could not load the page``; one larger
than 5 MB answers 502 ``the page is larger than 5 MB``.

Search
------
Body ``{"query": "<non-empty string>", "max_results": <int 1..50, default 5
when absent or null>}``; anything else is a 400.  Answer 200::

    {"query": q, "results": [<result 1>, ..., <result max_results>], "credits": 1}

exactly ``max_results`` results; result i (from 1) is ``{"url":
"https://search.example/<slug>/<i>", "title": "<q> — result <i>",
"snippet": "Result <i> for <q>."}`` (an em dash in the title) where slug is
``q`` lowercased, every run of characters outside ``[a-z0-9]`` replaced by
``-`` and ``-`` trimmed from both ends (``search_results`` computes it).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import orjson
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from selectolax.lexbor import LexborHTMLParser, LexborNode
from yarl import URL

from stubvendor.state import STATE
from stubvendor.vendor import _apply_plain_fault, _check_key, read_body
from stubvendor.wire import _ERROR_TYPES, _answer, _extract_key, _is_int, _json

FETCH_TIMEOUT_S = 10.0
MAX_PAGE_BYTES = 5 * 1024 * 1024
MAX_SEARCH_RESULTS = 50
DEFAULT_SEARCH_RESULTS = 5
SEARCH_BASE_URL = "https://search.example"
CREDITS_PER_CALL = 1
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_READ_CHUNK_BYTES = 64 * 1024
# The shared key and fault helpers speak the OpenAI shape; _web_shaped re-dresses them.
_HELPER_SHAPE = "openai"
_NOT_LOADED = "could not load the page"
_TOO_LARGE = "the page is larger than 5 MB"
_ASSIGNMENT = re.compile(
    r"""\s*document\s*\.\s*getElementById\s*\(\s*(?:"(?P<dq>[^"']*)"|'(?P<sq>[^"']*)')\s*\)"""
    r"""\s*\.\s*innerHTML\s*=\s*(?P<literal>"(?:[^"\\]|\\.)*")\s*;\s*""",
    re.DOTALL,
)
_SLUG_SEPARATORS = re.compile(r"[^a-z0-9]+")
Parsed = TypeVar("Parsed")
# A web call names no model and never streams: its calls-log fields that say so.
_FIXED_CALL_FIELDS: dict[str, Any] = {
    "model": None,
    "stream": False,
    "user": None,
    "max_tokens": None,
}


def web_error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    kind: str | None = None,
    credits: int = 0,
) -> web.Response:
    """Build ``{"error": {"message", "type"}}``; the type follows the status unless given.
    ``credits``: the vendor billed the failed call anyway (said in the body)."""
    # The Anthropic column (authentication_error, rate_limit_error, ...): the web vendors' names.
    error_type = kind if kind is not None else _ERROR_TYPES[status][2]
    error: dict[str, Any] = {"error": {"message": message, "type": error_type}}
    if credits:
        error["credits"] = credits
    return _json(status, error, headers)


def _web_shaped(resp: web.StreamResponse, *, credits: int = 0) -> web.StreamResponse:
    """Re-dress a shared helper's OpenAI-shaped error; a dropped or hung call passes through.
    ``credits``: a fault's, the vendor billing the failed call anyway."""
    if not isinstance(resp, web.Response) or resp.status < 400 or not isinstance(resp.body, bytes):
        return resp
    message = orjson.loads(resp.body)["error"]["message"]
    kept = {
        name: value
        for name, value in resp.headers.items()
        if name.lower() not in ("content-type", "content-length")
    }
    return web_error(resp.status, message, kept, credits=credits)


# --------------------------------------------------------------------------- search


def search_slug(query: str) -> str:
    """Return the query's slug: lowercased, non-[a-z0-9] runs -> ``-``, trimmed of ``-``."""
    return _SLUG_SEPARATORS.sub("-", query.lower()).strip("-")


def search_results(query: str, max_results: int) -> list[dict[str, str]]:
    """Return the stub's results for a query (the rule is in the module docstring)."""
    slug = search_slug(query)
    return [
        {
            "url": f"{SEARCH_BASE_URL}/{slug}/{i}",
            "title": f"{query} — result {i}",
            "snippet": f"Result {i} for {query}.",
        }
        for i in range(1, max_results + 1)
    ]


@dataclass(frozen=True)
class SearchRequest:
    query: str
    max_results: int


def _parse_search(body: Any) -> SearchRequest | str:
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    query = body.get("query")
    if not isinstance(query, str) or not query:
        return "query: a non-empty string is required."
    max_results = body.get("max_results")
    if max_results is None:
        max_results = DEFAULT_SEARCH_RESULTS
    elif not (_is_int(max_results) and 1 <= max_results <= MAX_SEARCH_RESULTS):
        return f"max_results: an integer from 1 to {MAX_SEARCH_RESULTS} is required."
    return SearchRequest(query, max_results)


async def _search_answer(search: SearchRequest) -> web.Response:
    results = search_results(search.query, search.max_results)
    return _json(200, {"query": search.query, "results": results, "credits": CREDITS_PER_CALL})


# --------------------------------------------------------------------------- render


@dataclass(frozen=True)
class Pin:
    """A host and port whose connections go to these addresses (curl's ``--resolve``)."""

    host: str
    port: int
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class RenderRequest:
    url: str
    pin: Pin | None = None
    follow_redirects: bool = True


def _parse_render(body: Any) -> RenderRequest | str:
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    url = body.get("url")
    if not isinstance(url, str) or not _is_web_url(url):
        return "url: an http or https URL is required."
    wait_ms = body.get("wait_ms")
    if wait_ms is not None and not (_is_int(wait_ms) and wait_ms >= 0):
        return "wait_ms: a non-negative integer is required."
    follow = body.get("follow_redirects", True)
    if not isinstance(follow, bool):
        return "follow_redirects: true or false is required."
    resolve = body.get("resolve")
    if resolve is None:
        return RenderRequest(url, None, follow)
    pin = _parse_pin(resolve)
    if pin is None:
        return "resolve: {host, port 1..65535, addresses: [IP address, ...]} is required."
    return RenderRequest(url, pin, follow)


def _parse_pin(value: Any) -> Pin | None:
    if not isinstance(value, dict):
        return None
    host, port, addresses = value.get("host"), value.get("port"), value.get("addresses")
    if not isinstance(host, str) or not host or not (_is_int(port) and 0 < port < 65536):
        return None
    if not isinstance(addresses, list) or not addresses:
        return None
    try:
        parsed = tuple(str(ipaddress.ip_address(a)) for a in addresses)
    except (TypeError, ValueError):
        return None
    return Pin(host.lower(), port, parsed)


class _PinningResolver(AbstractResolver):
    """Answer the pinned host and port with its addresses; look every other host up."""

    def __init__(self, pin: Pin) -> None:
        self._pin = pin
        self._others = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if (host.lower(), port) != (self._pin.host, self._pin.port):
            return await self._others.resolve(host, port, family)
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self._pin.addresses
        ]

    async def close(self) -> None:
        await self._others.close()


def _is_web_url(url: str) -> bool:
    try:
        parsed = URL(url)
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


@dataclass(frozen=True)
class LoadedPage:
    final_url: str
    status: int
    content_type: str
    text: str
    location: str | None = None  # an unfollowed redirect's target, absolute


class PageTooLarge(Exception):
    """The page's (decompressed) body is over MAX_PAGE_BYTES."""


async def load_page(url: str, pin: Pin | None = None, *, follow: bool = True) -> LoadedPage:
    """GET the page, following redirects unless told not to; the pinned host's connections
    go to its addresses.

    Raises aiohttp.ClientError or TimeoutError when it cannot be loaded, PageTooLarge.
    """
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    connector = aiohttp.TCPConnector(resolver=_PinningResolver(pin)) if pin else None
    async with (
        aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
        session.get(url, allow_redirects=follow) as resp,
    ):
        location = resp.headers.get("Location")
        if not follow and resp.status in _REDIRECT_STATUSES and location:
            target = str(resp.url.join(URL(location)))
            return LoadedPage(str(resp.url), resp.status, resp.content_type, "", target)
        chunks, size = [], 0
        async for chunk in resp.content.iter_chunked(_READ_CHUNK_BYTES):
            size += len(chunk)
            if size > MAX_PAGE_BYTES:
                raise PageTooLarge(url)
            chunks.append(chunk)
        text = _decode(b"".join(chunks), resp.charset)
        return LoadedPage(str(resp.url), resp.status, resp.content_type, text)


def _decode(raw: bytes, charset: str | None) -> str:
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")


def inner_html_assignment(script_text: str) -> tuple[str, str] | None:
    """Return (element id, HTML) when the script is the convention's one assignment, else None."""
    match = _ASSIGNMENT.fullmatch(script_text)
    if match is None:
        return None
    try:
        html = json.loads(match["literal"])
    except json.JSONDecodeError:
        return None
    element_id = match["dq"] if match["dq"] is not None else match["sq"]
    return element_id, html


def _attached(node: LexborNode) -> bool:
    """Whether the node is still in the document (an assignment may have replaced its parent)."""
    current: LexborNode | None = node
    while current is not None:
        if current.is_document_node:
            return True
        current = current.parent
    return False


def _element_by_id(tree: LexborHTMLParser, element_id: str) -> LexborNode | None:
    """Return the first element in document order whose id is ``element_id``, as a browser does."""
    return next((el for el in tree.css("[id]") if el.attributes.get("id") == element_id), None)


def render_html(html: str) -> str:
    """Apply every inner-HTML assignment script of the page; return the serialized document."""
    tree = LexborHTMLParser(html, scripting=True)
    for script in tree.css("script"):  # the page's own scripts only, in document order
        assignment = inner_html_assignment(script.text(deep=True)) if _attached(script) else None
        if assignment is None:
            continue
        element_id, inner = assignment
        target = _element_by_id(tree, element_id)
        if target is None:
            continue
        script.decompose()
        target.inner_html = inner
    return tree.html or ""


async def _render_answer(render: RenderRequest) -> web.Response:
    try:
        page = await load_page(render.url, render.pin, follow=render.follow_redirects)
    except PageTooLarge:
        return web_error(502, _TOO_LARGE, kind="upstream_error")
    except (aiohttp.ClientError, TimeoutError):
        return web_error(502, _NOT_LOADED, kind="upstream_error")
    if page.location is not None:
        unfollowed = {
            "url": render.url,
            "final_url": page.final_url,
            "status": page.status,
            "content_type": page.content_type,
            "location": page.location,
            "html": "",
            "rendered": False,
            "credits": CREDITS_PER_CALL,
        }
        return _json(200, unfollowed)
    answer = {
        "url": render.url,
        "final_url": page.final_url,
        "status": page.status,
        "content_type": page.content_type,
        "html": render_html(page.text),
        "rendered": True,
        "credits": CREDITS_PER_CALL,
    }
    return _json(200, answer)


# --------------------------------------------------------------------------- the calls


async def _web_call(
    request: web.Request,
    shape: str,
    parse: Callable[[Any], Parsed | str],
    respond: Callable[[Parsed], Awaitable[web.Response]],
) -> web.StreamResponse:
    """Record, key-check, parse, apply faults, then answer (the order in the docstring)."""
    state = request.app[STATE]
    key, raw_key = _extract_key(request, _HELPER_SHAPE)
    _, body = await read_body(request)
    call = state.record(body=body, path=request.path, shape=shape, key=key, **_FIXED_CALL_FIELDS)
    rejected = _check_key(state, _HELPER_SHAPE, key)
    if rejected is not None:
        return _answer(call, _web_shaped(rejected))
    parsed = parse(body)
    if isinstance(parsed, str):
        return _answer(call, web_error(400, parsed))
    faulted = await _apply_plain_fault(request, call, _HELPER_SHAPE, key, raw_key, None)
    if faulted is not None:
        return _web_shaped(faulted, credits=call.get("credits", 0))
    return _answer(call, await respond(parsed))


async def render_page(request: web.Request, shape: str) -> web.StreamResponse:
    """Answer ``POST .../render``."""
    return await _web_call(request, shape, _parse_render, _render_answer)


async def search(request: web.Request, shape: str) -> web.StreamResponse:
    """Answer ``POST .../search``."""
    return await _web_call(request, shape, _parse_search, _search_answer)
