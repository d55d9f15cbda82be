"""The web routes' JSON: requests validated into WebRequest, answers rendered.

Scrape `{"url", "render_js"?, "formats"?: ["text", "markdown", "html"]}`; search `{"query",
"max_results"?}`; crawl `{"url", "max_pages"?, "max_depth"?, "same_host"?, "include"?,
"exclude"?, "render_js"?, "formats"?, "respect_robots"?}`. A URL is checked here only for
its form and for a host that is a non-public address literal (any encoding), which no
profile may be sent; the direct fetcher checks what names resolve to, and every redirect, and
the renderer's adapter the same before each of its calls, one per redirect hop (adapters.py);
a crawl's seed is resolved and checked when the job is submitted (service.py).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from core.config import tollgate
from core.errors import InvalidRequest
from gateway.web.types import CRAWL, FORMATS, SCRAPE, SEARCH, WebRequest
from webfetch.addresses import allowed_networks, literal_host, refusal

MAX_URL = 2048
MAX_QUERY = 500
DEFAULT_RESULTS = 5
CRAWL_DEFAULTS = {"max_pages": 10, "max_depth": 2}


def parse(action: str, data: dict[str, Any]) -> WebRequest:
    """Validate a web request body (LM-2001 naming the field)."""
    if action == SEARCH:
        return WebRequest(action=SEARCH, query=_query(data), max_results=_max_results(data))
    url = checked_url(data.get("url"))
    render_js = _flag(data, "render_js", False)
    formats = _formats(data)
    if action == SCRAPE:
        return WebRequest(action=SCRAPE, url=url, render_js=render_js, formats=formats)
    crawl = {
        "max_pages": _int(data, "max_pages", CRAWL_DEFAULTS["max_pages"], 1),
        "max_depth": _int(data, "max_depth", CRAWL_DEFAULTS["max_depth"], 0),
        "same_host": _flag(data, "same_host", True),
        "include": _patterns(data, "include"),
        "exclude": _patterns(data, "exclude"),
        "respect_robots": _flag(data, "respect_robots", True),
    }
    return WebRequest(action=CRAWL, url=url, render_js=render_js, formats=formats, crawl=crawl)


def checked_url(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("'url' is required: an http or https URL.")
    url = value.strip()
    if len(url) > MAX_URL:
        raise InvalidRequest(f"'url' is over {MAX_URL} characters.")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise InvalidRequest("'url' is not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidRequest("'url' must be an http or https URL with a host.")
    if parts.username or parts.password:
        raise InvalidRequest("'url' may not carry a user name or password.")
    try:
        address = literal_host(host)
    except ValueError:
        raise InvalidRequest("'url' has a malformed address.") from None
    if address is not None:
        why = refusal(address, allow=allowed_networks(tollgate().web_allow_nets))
        if why:
            raise InvalidRequest(f"'url' points at a non-public address ({why}).")
    elif _local_name(host) and not tollgate().web_allow_nets:
        raise InvalidRequest("'url' points at a non-public host.")
    return url


def _local_name(host: str) -> bool:
    return host == "localhost" or host.endswith((".localhost", ".internal", ".local"))


def _query(data: dict) -> str:
    query = data.get("query")
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequest("'query' is required: a non-empty string.")
    if len(query) > MAX_QUERY:
        raise InvalidRequest(f"'query' is over {MAX_QUERY} characters.")
    return query.strip()


def _max_results(data: dict) -> int:
    cap = tollgate().web_max_results
    value = data.get("max_results", min(DEFAULT_RESULTS, cap))
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
        raise InvalidRequest(f"'max_results' must be an integer from 1 to {cap}.")
    return value


def _flag(data: dict, name: str, default: bool) -> bool:
    value = data.get(name, default)
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be true or false.")
    return value


def _int(data: dict, name: str, default: int, low: int) -> int:
    value = data.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidRequest(f"'{name}' must be an integer >= {low}.")
    return value


def _formats(data: dict) -> frozenset[str]:
    value = data.get("formats", ["text"])
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise InvalidRequest("'formats' must be a list of 'text', 'markdown', 'html'.")
    unknown = set(value) - FORMATS
    if unknown:
        raise InvalidRequest(f"'formats' has {sorted(unknown)[0]!r}: use text, markdown, html.")
    return frozenset(value) | {"text"}


def _patterns(data: dict, name: str) -> tuple[str, ...]:
    value = data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise InvalidRequest(f"'{name}' must be a list of regular expressions.")
    return tuple(value)


def units_json(bill) -> dict[str, int]:
    return {"page": bill.pages, "rendered_page": bill.rendered_pages, "query": bill.queries}
