"""URL normalisation and the scope rules, table-driven (no database)."""

from __future__ import annotations

import pytest

from webfetch.frontier import in_scope, normalise
from webfetch.models import CrawlJob


@pytest.mark.parametrize(
    ("url", "base", "expected"),
    [
        ("http://Example.COM", None, "http://example.com/"),
        ("HTTPS://example.com:443/a?b=1#frag", None, "https://example.com/a?b=1"),
        ("http://example.com:80/x", None, "http://example.com/x"),
        ("http://example.com:8080/x", None, "http://example.com:8080/x"),
        ("https://example.com:80/x", None, "https://example.com:80/x"),
        ("  http://example.com/x  ", None, "http://example.com/x"),
        ("/b/c?q=Ab", "http://example.com/a/", "http://example.com/b/c?q=Ab"),
        ("c", "http://example.com/a/b", "http://example.com/a/c"),
        ("../up", "http://example.com/a/b/", "http://example.com/a/up"),
        ("//other.test/p", "https://example.com/", "https://other.test/p"),
        ("#only-fragment", "http://example.com/page", "http://example.com/page"),
        ("http://[2001:DB8::1]:8080/", None, "http://[2001:db8::1]:8080/"),
        ("http://example.com/Path/Case", None, "http://example.com/Path/Case"),
        ("mailto:someone@example.com", None, None),
        ("ftp://example.com/file", None, None),
        ("javascript:alert(1)", "http://example.com/", None),
        ("http://user:pw@example.com/", None, None),
        ("http:///no-host", None, None),
        ("http://example.com:99999/", None, None),
        ("relative/only", None, None),
    ],
)
def test_normalise_gives_one_spelling_or_none(url, base, expected):
    assert normalise(url, base) == expected


def _job(**fields) -> CrawlJob:
    fields.setdefault("seed_url", "http://site.test/")
    fields.setdefault("max_pages", 10)
    fields.setdefault("max_depth", 2)
    return CrawlJob(**fields)


@pytest.mark.parametrize(
    ("job_fields", "url", "depth", "expected"),
    [
        ({}, "http://site.test/a", 1, None),
        ({}, "http://site.test/a", 2, None),
        ({}, "http://site.test/a", 3, "too_deep"),
        ({}, "http://site.test/a", None, None),
        ({}, "http://other.test/a", 1, "other_host"),
        ({}, "https://site.test:8443/a", 1, None),  # the same host on another port
        ({}, "http://www.site.test/a", 1, "other_host"),
        ({"same_host": False}, "http://other.test/a", 1, None),
        ({"exclude": [r"/private/"]}, "http://site.test/private/1", 1, "excluded"),
        ({"exclude": [r"/private/"]}, "http://site.test/public/1", 1, None),
        ({"include": [r"/docs/"]}, "http://site.test/blog/1", 1, "not_included"),
        ({"include": [r"/docs/"]}, "http://site.test/docs/1", 1, None),
        ({"include": [r"^https://"]}, "http://site.test/docs/1", 1, "not_included"),
        ({"include": [r"/docs/", r"\?page=\d+$"]}, "http://site.test/?page=2", 1, None),
        (
            {"include": [r"/docs/"], "exclude": [r"\.pdf$"]},
            "http://site.test/docs/a.pdf",
            1,
            "excluded",
        ),
        ({"same_host": False, "exclude": ["x"]}, "http://other.test/x", 3, "too_deep"),
        ({}, "mailto:a@site.test", 1, "not_http"),
        ({}, "HTTP://SITE.TEST/a", 1, "not_http"),  # not normalised: the caller's bug, refused
    ],
)
def test_in_scope_names_the_first_rule_that_refuses(job_fields, url, depth, expected):
    assert in_scope(_job(**job_fields), url, depth=depth) == expected


def test_a_backtracking_pattern_times_out_against_the_url():
    catastrophic = r"(x+x+)+y"
    url = "http://site.test/" + "x" * 2000
    assert in_scope(_job(exclude=[catastrophic]), url, depth=1) == "excluded"
    assert in_scope(_job(include=[catastrophic]), url, depth=1) == "not_included"
