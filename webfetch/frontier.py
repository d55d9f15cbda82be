"""The crawl frontier's rules: one spelling per URL, and which URLs a job may visit.

Include and exclude patterns are tenants' regular expressions run by a worker: they go
through the `regex` module (re-compatible syntax) with a time limit, so a pattern that
backtracks catastrophically drops the URL instead of pinning a worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit, urlunsplit

import regex

if TYPE_CHECKING:
    from webfetch.models import CrawlJob

PATTERNS_MAX = 20
PATTERN_MAX_CHARS = 200
MATCH_TIMEOUT_S = 0.05
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalise(url: str, base: str | None = None) -> str | None:
    """Return the URL absolute and in one spelling, or None when it is not a web page's.

    Scheme and host lowercase, default ports dropped, fragment removed, an empty path "/".
    URLs with credentials are refused: a crawl would store and show them.
    """
    url = url.strip()
    try:
        if base is not None:
            url = urljoin(base, url)
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a malformed port or IPv6 literal
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host or parts.username is not None:
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def validate_patterns(patterns: Iterable[str], *, name: str) -> list[str]:
    """Return the patterns as a list; ValueError naming the field when one cannot be used."""
    if isinstance(patterns, str):
        raise ValueError(f"{name} must be a list of regular expressions, not a string")
    checked = list(patterns)
    if len(checked) > PATTERNS_MAX:
        raise ValueError(f"{name} takes at most {PATTERNS_MAX} patterns, got {len(checked)}")
    for index, pattern in enumerate(checked):
        if not isinstance(pattern, str):
            raise ValueError(f"{name}[{index}] must be a string")
        if len(pattern) > PATTERN_MAX_CHARS:
            raise ValueError(f"{name}[{index}] is longer than {PATTERN_MAX_CHARS} characters")
        try:
            regex.compile(pattern)
        except regex.error as exc:
            raise ValueError(f"{name}[{index}] is not a valid regular expression: {exc}") from None
    return checked


def _matches(pattern: str, url: str, *, on_timeout: bool) -> bool:
    try:
        return regex.search(pattern, url, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        return on_timeout


def in_scope(job: CrawlJob, url: str, *, depth: int | None = None) -> str | None:
    """Return None when the job may visit the (normalised) URL, else the reason it may not.

    `depth` is the depth the URL would have; None skips the depth rule.
    """
    if depth is not None and depth > job.max_depth:
        return "too_deep"
    if normalise(url) != url:
        return "not_http"
    if job.same_host and host_of(url) != host_of(job.seed_url):
        return "other_host"
    # A pattern that times out counts against the URL: excluded, or not included.
    if any(_matches(pattern, url, on_timeout=True) for pattern in job.exclude):
        return "excluded"
    if job.include and not any(_matches(p, url, on_timeout=False) for p in job.include):
        return "not_included"
    return None
