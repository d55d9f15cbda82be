"""Web acquisition's own values: the request, what a profile answered, and the units billed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.adapters.base import ProviderError

SCRAPE = "scrape"
SEARCH = "search"
CRAWL = "crawl"

# The billable units, each priced per profile (providers: page_micro, ...).
PAGE = "page"  # a page our direct fetcher (or a fake) fetched
RENDERED_PAGE = "rendered_page"  # a page a rendering vendor rendered with JavaScript
QUERY = "query"  # a search query
UNITS = (PAGE, RENDERED_PAGE, QUERY)

FORMATS = frozenset({"text", "markdown", "html"})


@dataclass(frozen=True, slots=True)
class WebRequest:
    """A validated scrape, search or crawl request (webfetch's shape, gateway/web/shape.py)."""

    action: str  # SCRAPE, SEARCH or CRAWL
    url: str = ""
    render_js: bool = False
    formats: frozenset[str] = frozenset({"text"})
    query: str = ""
    max_results: int = 0
    crawl: dict[str, Any] = field(default_factory=dict)  # a crawl's limits, as validated


@dataclass(frozen=True, slots=True)
class PageAnswer:
    """A page as a profile answered it: the document, before extraction."""

    final_url: str
    status: int
    content_type: str
    body: bytes  # the document (a renderer's: its rendered HTML, UTF-8)
    charset: str | None = None
    rendered: bool = False  # scripts ran: the renderer's DOM, not the page's bytes


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    results: tuple[dict[str, str], ...]  # each: url, title, snippet


class WebProviderError(ProviderError):
    """A web profile failed, beyond what any vendor failure says (gateway/adapters/base.py).

    `billed_units`: what the vendor says it charged for the failure anyway (a try that
    recorded a billable unit is never retried). `refused`: the request itself is refused (a
    URL that may not be fetched), so no other profile is tried either.
    """

    def __init__(
        self, message: str, *, retryable: bool = False, billed_units: int = 0, refused: bool = False
    ) -> None:
        super().__init__(message, retryable=retryable)
        self.message = message  # ours (the fetcher's verdict), safe to show the client
        self.billed_units = billed_units
        self.refused = refused


@dataclass(frozen=True, slots=True)
class WebTarget:
    """One call's destination: the profile's vendor and the key it carries."""

    api_key: str | None
    timeout_s: float


@dataclass(slots=True)
class WebBill:
    """What a web request used and owes, filled in as its tries run (the usage record's)."""

    url: str = ""  # the page asked for (a scrape's, a crawl page's); empty for a search
    provider: str = ""  # the profile that served (or the last that billed)
    served_by: str = ""  # plan.TEAM or plan.PLATFORM
    pages: int = 0
    rendered_pages: int = 0
    queries: int = 0
    cost_micro: int = 0  # platform-served units only: team-served units cost 0
    reservation_id: int | None = None
    prices: dict[str, int] = field(default_factory=dict)  # each billed unit's price (receipts)

    def add(self, unit: str, count: int, *, price_micro: int, platform: bool) -> None:
        if unit == PAGE:
            self.pages += count
        elif unit == RENDERED_PAGE:
            self.rendered_pages += count
        else:
            self.queries += count
        if platform:
            self.cost_micro += count * price_micro
            self.prices[f"{unit}_micro"] = price_micro

    @property
    def units(self) -> int:
        return self.pages + self.rendered_pages + self.queries
