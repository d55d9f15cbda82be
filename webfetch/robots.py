"""robots.txt: what a crawl may fetch from one host (RFC 9309).

Why not urllib.robotparser: it applies the first matching rule in file order where RFC 9309
(and every major crawler) applies the longest, it knows neither the `*` nor the `$`
wildcard that most real files use, and it matches user agents by substring. The parser here
is the RFC's, in a page:

* Groups start with one or more `User-agent` lines; the rules of every group naming our
  product token (the user agent up to its first `/`, case-insensitive) apply, else those of
  the `*` groups, else nothing is disallowed.
* A URL's path and query are matched against each `Allow` / `Disallow` pattern (`*` any run,
  a final `$` the end); the longest matching pattern decides, `Allow` winning a tie; an empty
  `Disallow` disallows nothing. `/robots.txt` itself is always allowed.
* `Crawl-delay` (not in the RFC, widely sent) of the chosen groups is kept as seconds.

When the fetch of /robots.txt does not give a file (the usual convention, RFC 9309 2.3.1):
a 4xx answer (or more redirects than the limit) means no rules, so everything is allowed;
a 5xx or 429 answer, or a host that cannot be reached (dns, connect, timeout, TLS, caps),
means everything is disallowed until it can be read. An address the fetcher refuses
(private, scheme, bad URL) is raised: the crawl could not fetch that host anyway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

import aiohttp

from webfetch.fetcher import FetchLimits, FetchRefused, fetch

# RFC 9309 2.5: crawlers must parse at least 500 KiB; what follows is ignored.
MAX_ROBOTS_CHARS = 512 * 1024
_RAISED = frozenset({"private_address", "scheme", "bad_url"})


@dataclass(frozen=True, slots=True)
class _Rule:
    allow: bool
    pattern: str
    regex: re.Pattern[str]


class RobotsRules:
    """The rules of one host for one user agent."""

    def __init__(
        self,
        rules: tuple[_Rule, ...] = (),
        *,
        crawl_delay_s: float | None = None,
        disallow_all: bool = False,
    ) -> None:
        self._rules = rules
        self._disallow_all = disallow_all
        self.crawl_delay_s = crawl_delay_s

    @classmethod
    def allowing_all(cls) -> RobotsRules:
        return cls()

    @classmethod
    def disallowing_all(cls) -> RobotsRules:
        return cls(disallow_all=True)

    def allows(self, url: str) -> bool:
        """Tell whether the crawl may fetch `url` (its path and query; the host is not checked)."""
        parts = urlsplit(url)
        path = _normal_path(parts.path or "/") + (
            f"?{_normal_path(parts.query)}" if parts.query else ""
        )
        if path == "/robots.txt":
            return True
        if self._disallow_all:
            return False
        best: _Rule | None = None
        for rule in self._rules:
            if rule.regex.match(path) is None:
                continue
            if (
                best is None
                or len(rule.pattern) > len(best.pattern)
                or (len(rule.pattern) == len(best.pattern) and rule.allow)
            ):
                best = rule
        return best is None or best.allow


def parse_robots(text: str, *, user_agent: str) -> RobotsRules:
    """Parse a robots.txt for `user_agent` (see the module docstring for the rules)."""
    token = product_token(user_agent)
    groups: list[tuple[list[str], list[tuple[str, str]]]] = []
    in_agents = False
    for raw_line in text[:MAX_ROBOTS_CHARS].splitlines():
        line = raw_line.split("#", 1)[0].strip()
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        key = key.lower()
        if key in ("user-agent", "useragent"):
            if not in_agents:
                groups.append(([], []))
                in_agents = True
            groups[-1][0].append(product_token(value) if value != "*" else "*")
        elif key in ("allow", "disallow", "crawl-delay") and groups:
            in_agents = False
            groups[-1][1].append((key, value))
        else:
            # Sitemap and unknown lines neither end nor start a group.
            continue
    chosen = [lines for agents, lines in groups if token in agents]
    if not chosen:
        chosen = [lines for agents, lines in groups if "*" in agents]
    rules: list[_Rule] = []
    crawl_delay_s: float | None = None
    for lines in chosen:
        for key, value in lines:
            if key == "crawl-delay":
                try:
                    delay = float(value)
                except ValueError:
                    continue
                if delay >= 0 and crawl_delay_s is None:
                    crawl_delay_s = delay
            elif value:
                pattern = _normal_path(value)
                rules.append(_Rule(key == "allow", pattern, _pattern_regex(pattern)))
    return RobotsRules(tuple(rules), crawl_delay_s=crawl_delay_s)


def product_token(user_agent: str) -> str:
    """Return the part of a user agent robots.txt groups name: `TollgateFetch/1.0 (...)` ->
    `tollgatefetch`."""
    return re.split(r"[/\s]", user_agent.strip(), maxsplit=1)[0].lower()


async def robots_for(
    session: aiohttp.ClientSession | None,
    origin_url: str,
    *,
    limits: FetchLimits,
    user_agent: str,
) -> RobotsRules:
    """Fetch and parse the robots.txt of `origin_url`'s scheme, host and port, SSRF-safe."""
    parts = urlsplit(origin_url)
    robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
    try:
        fetched = await fetch(session, robots_url, limits=limits, user_agent=user_agent)
    except FetchRefused as refused:
        if refused.reason in _RAISED:
            raise
        if refused.reason == "too_many_redirects":
            return RobotsRules.allowing_all()
        return RobotsRules.disallowing_all()
    if 200 <= fetched.status < 300:
        return parse_robots(fetched.text(), user_agent=user_agent)
    if 400 <= fetched.status < 500 and fetched.status != 429:
        return RobotsRules.allowing_all()
    return RobotsRules.disallowing_all()


def _normal_path(path: str) -> str:
    """Percent-encode a path the one way, so `/%7Ea` and `/~a` compare equal."""
    return quote(unquote(path), safe="/?=&*$:@!,;+'()~-._")


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    regex = ".*".join(re.escape(piece) for piece in body.split("*"))
    return re.compile(regex + (r"\Z" if anchored else ""))
