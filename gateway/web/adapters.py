"""Web adapters: one vendor each (or our own fetcher); they translate and decide nothing.

Each answers a scrape with a PageAnswer or a search with a SearchAnswer, and maps failures
to ProviderError (gateway/adapters/base.py), or WebProviderError for what only the web
path knows. Retries, breakers, units and money are the web orchestrator's.

Wire shapes of the two vendor kinds (the stub speaks them: stubvendor/web.py):
- render_api: POST {base_url}/render {"url", "resolve": {"host", "port", "addresses"},
  "follow_redirects": false} -> {"final_url", "status", "content_type", "html", "rendered",
  "credits"}, or for a redirect {"status": 3xx, "location", ...}; Authorization: Bearer
  <key>. `resolve` pins the URL's host to the addresses we checked (curl's --resolve), so the
  vendor's browser does no lookup of its own that could answer otherwise; `follow_redirects`
  false makes it load that one URL and hand a redirect back, so every hop is ours to check.
- search_api: POST {base_url}/search {"query", "max_results"} -> {"results": [{"url",
  "title", "snippet"}], "credits"}; Authorization: Bearer <key>.
"""

from __future__ import annotations

import re

import aiohttp
import orjson
from yarl import URL

from core.config import tollgate
from gateway.adapters.base import ProviderError, connection_error, error_for_status
from gateway.tracing import outbound_headers
from gateway.web.types import (
    PAGE,
    QUERY,
    RENDERED_PAGE,
    SCRAPE,
    SEARCH,
    PageAnswer,
    SearchAnswer,
    WebProviderError,
    WebTarget,
)
from providers.models import ProviderKind
from webfetch.addresses import Network, allowed_networks
from webfetch.fetcher import (
    REDIRECT_STATUSES,
    Destination,
    FetchRefused,
    destination,
    fetch,
    limits_from_settings,
)

# What the fetcher's refusals mean here: the URL itself may not be fetched (no profile may
# try it), or the site failed in a way worth one more try.
REFUSED_REASONS = frozenset({"scheme", "bad_url", "private_address"})
VENDOR_BODY_MAX = 20_000_000


class WebAdapter:
    """What a web profile can do: the unit each action bills when it succeeds."""

    kind: str
    units: dict[str, str]  # action -> the unit a success bills (SCRAPE/SEARCH -> PAGE/...)
    renders = False  # its pages are rendered with JavaScript (a renderer)
    keyless = False  # needs no key: the platform serves it without a platform key
    # Its failures say something about a provider (its breaker judges them); our own
    # fetcher's are the site's.
    judged = True
    rank = 2  # among scrapers that do not render: our fetcher first, then the fake

    def __init__(self, *, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session

    async def scrape(self, url: str, target: WebTarget) -> PageAnswer:
        raise NotImplementedError

    async def search(self, query: str, max_results: int, target: WebTarget) -> SearchAnswer:
        raise NotImplementedError

    async def _post(self, path: str, body: dict, target: WebTarget) -> dict:
        """POST JSON to the vendor; its JSON answer, or a ProviderError (its body not kept)."""
        headers = {"content-type": "application/json"}
        if target.api_key:
            headers["authorization"] = f"Bearer {target.api_key}"
        try:
            async with self.session.post(
                f"{self.base_url}{path}", data=orjson.dumps(body), headers=outbound_headers(headers)
            ) as resp:
                raw = await _read_capped(resp, VENDOR_BODY_MAX)
                if resp.status != 200:
                    error = error_for_status(resp.status, resp.headers)
                    charged = _credits(raw)
                    if charged:  # the vendor billed the failure: it counts, and ends the tries
                        raise WebProviderError(
                            str(error), retryable=False, billed_units=charged
                        ) from None
                    raise error
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise connection_error(exc) from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ProviderError("upstream answered malformed JSON", retryable=True) from None
        if not isinstance(data, dict):
            raise ProviderError("upstream answered malformed JSON", retryable=True)
        return data


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """Read a vendor's whole answer, or fail past `cap` bytes (a vendor is not trusted either)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > cap:
            raise ProviderError("upstream answer over the size cap", retryable=False)
        parts.append(chunk)
    return b"".join(parts)


def _credits(raw: bytes) -> int:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return 0
    credits = data.get("credits") if isinstance(data, dict) else None
    return credits if isinstance(credits, int) and credits > 0 else 0


class DirectHttp(WebAdapter):
    """Our own fetcher (webfetch/fetcher.py): SSRF-safe, no vendor, no key."""

    kind = ProviderKind.DIRECT_HTTP
    units = {SCRAPE: PAGE}
    keyless = True
    judged = False
    rank = 0

    async def scrape(self, url: str, target: WebTarget) -> PageAnswer:
        try:
            fetched = await fetch(
                self.session,
                url,
                limits=limits_from_settings(target.timeout_s),
                user_agent=tollgate().web_user_agent,
            )
        except FetchRefused as refused:
            if refused.reason in REFUSED_REASONS:
                raise WebProviderError(refused.message, refused=True) from None
            error = WebProviderError(refused.message, retryable=refused.retryable)
            error.timeout = refused.reason == "timeout"
            raise error from None
        return PageAnswer(
            final_url=fetched.final_url,
            status=fetched.status,
            content_type=fetched.content_type,
            body=fetched.body,
            charset=fetched.charset,
        )


class RenderApi(WebAdapter):
    """A JavaScript-rendering vendor: it loads the page in a browser and returns the DOM.

    Its browser may sit inside the operator's network, so it never goes anywhere we have not
    checked first: it is asked for one URL at a time, its host resolved here, every address
    checked and pinned (`resolve`), and told not to follow redirects. A redirect comes back
    to us; its target is checked like a hop of our own fetcher's and, if it may be fetched,
    asked for in a new call (at most TOLLGATE_WEB_MAX_REDIRECTS). A target we refuse ends the
    request (LM-2001, billing nothing) before the renderer is sent there: public -> internal
    -> public bounces stop at the internal hop. A vendor that answers from somewhere other
    than the URL it was asked for (it navigated, despite being told not to) is a vendor fault:
    its page is not served.
    """

    kind = ProviderKind.RENDER_API
    units = {SCRAPE: RENDERED_PAGE}
    renders = True

    async def scrape(self, url: str, target: WebTarget) -> PageAnswer:
        config = tollgate()
        allow = allowed_networks(config.web_allow_nets)
        current = url
        for _hop in range(config.web_max_redirects + 1):
            asked = await _reachable(current, allow)
            data = await self._post("/render", _render_body(current, asked), target)
            status = data.get("status")
            if not isinstance(status, int):
                raise ProviderError("upstream answered without a page", retryable=True)
            location = data.get("location")
            if status in REDIRECT_STATUSES and isinstance(location, str) and location:
                current = _hop_target(current, location)
                continue
            return _rendered_page(current, status, data)
        raise WebProviderError(
            f"more than {config.web_max_redirects} redirects from {url}", retryable=False
        )


def _render_body(url: str, asked: Destination) -> dict:
    return {
        "url": url,
        "resolve": {
            "host": asked.host,
            "port": asked.port,
            "addresses": [str(a) for a in asked.addresses],
        },
        "follow_redirects": False,
    }


def _hop_target(current: str, location: str) -> str:
    """Resolve a redirect's Location against the page that sent it (checked by the next hop)."""
    try:
        return str(URL(current).join(URL(location)).with_fragment(None))
    except (ValueError, TypeError):
        raise WebProviderError("the redirect's target cannot be parsed", refused=True) from None


def _rendered_page(asked: str, status: int, data: dict) -> PageAnswer:
    html = data.get("html")
    if not isinstance(html, str):
        raise ProviderError("upstream answered without a page", retryable=True)
    final_url = str(data.get("final_url") or asked)
    if not _same_page(final_url, asked):
        # It went somewhere unchecked (its own redirect or a script's navigation): whatever
        # it loaded on the way is not ours to serve.
        raise ProviderError("upstream rendered another page than the one asked", retryable=False)
    return PageAnswer(
        final_url=asked,
        status=status,
        content_type=str(data.get("content_type") or "text/html"),
        body=html.encode(),
        charset="utf-8",
        rendered=True,
    )


def _same_page(answered: str, asked: str) -> bool:
    """Whether two URLs name one page, spelling aside (a browser writes `http://a` as `http://a/`)."""
    try:
        return _page_key(URL(answered)) == _page_key(URL(asked))
    except (ValueError, TypeError):
        return False


def _page_key(url: URL) -> tuple:
    return (url.scheme.lower(), (url.host or "").lower(), url.port, url.path or "/", url.query)


async def _reachable(url: str, allow: tuple[Network, ...]) -> Destination:
    """Resolve and check a URL the renderer is to be sent to; refused as our fetcher refuses
    it (a name that does not resolve included: nothing to pin, nothing to judge)."""
    try:
        return await destination(url, allow=allow)
    except FetchRefused as refused:
        raise WebProviderError(refused.message, refused=True) from None


class SearchApi(WebAdapter):
    kind = ProviderKind.SEARCH_API
    units = {SEARCH: QUERY}

    async def search(self, query: str, max_results: int, target: WebTarget) -> SearchAnswer:
        data = await self._post("/search", {"query": query, "max_results": max_results}, target)
        results = data.get("results")
        if not isinstance(results, list):
            raise ProviderError("upstream answered without results", retryable=True)
        return SearchAnswer(results=tuple(_result(r) for r in results[:max_results]))


def _result(item: object) -> dict[str, str]:
    item = item if isinstance(item, dict) else {}
    return {name: str(item.get(name) or "") for name in ("url", "title", "snippet")}


class FakeWeb(WebAdapter):
    """In-process answers for tests and demos: a page for any URL, results for any query."""

    kind = ProviderKind.FAKE
    units = {SCRAPE: PAGE, SEARCH: QUERY}
    keyless = True
    rank = 1

    async def scrape(self, url: str, target: WebTarget) -> PageAnswer:
        html = (
            f"<html><head><title>Fake page</title></head><body><main><p>The fake web "
            f"page of {url}.</p></main></body></html>"
        )
        return PageAnswer(final_url=url, status=200, content_type="text/html", body=html.encode())

    async def search(self, query: str, max_results: int, target: WebTarget) -> SearchAnswer:
        slug = re.sub(r"[^a-z0-9]+", "-", query.lower()).strip("-")
        return SearchAnswer(
            results=tuple(
                {
                    "url": f"https://fake.example/{slug}/{i}",
                    "title": f"{query} - fake result {i}",
                    "snippet": f"Fake result {i} for {query}.",
                }
                for i in range(1, max_results + 1)
            )
        )


WEB_ADAPTERS: dict[str, type[WebAdapter]] = {
    ProviderKind.DIRECT_HTTP: DirectHttp,
    ProviderKind.RENDER_API: RenderApi,
    ProviderKind.SEARCH_API: SearchApi,
    ProviderKind.FAKE: FakeWeb,
}
