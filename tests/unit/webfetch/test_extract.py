from __future__ import annotations

import json

import pytest

from tests.support.testsite import (
    ARTICLE_SENTENCES,
    ARTICLE_TITLE,
    BOILERPLATE,
    DATA_JSON,
    JS_PAGE,
    PLAIN_TEXT,
    article_html,
    graph_html,
)
from tests.unit.webfetch.pages import all_pages
from webfetch.extract import Extracted, extract, needs_javascript, text_of

SITE = "http://127.0.0.1:8000"


def test_article_text_has_the_article_and_not_the_chrome():
    page = extract(article_html(), url=SITE + "/")
    assert page.title == f"{ARTICLE_TITLE} | Tollgate test site"
    for sentence in ARTICLE_SENTENCES:
        assert sentence in page.text
        assert sentence in page.markdown
    for chrome in BOILERPLATE:
        assert chrome not in page.text
    assert page.markdown.startswith(f"# {ARTICLE_TITLE}\n\n{ARTICLE_SENTENCES[0]}")


def test_links_are_absolute_unique_without_fragments_in_document_order():
    page = extract(article_html(), url=SITE + "/")
    assert page.links == (
        SITE + "/",
        SITE + "/a",
        SITE + "/b",
        SITE + "/c",
        "https://example.com/x",
        SITE + "/private/x",
    )


def test_links_resolve_against_base_href_and_skip_other_schemes():
    html = (
        "<html><head><base href='https://cdn.example.org/docs/'></head><body>"
        "<a href='guide#part'>guide</a> <a href='/top'>top</a> <a href='mailto:a@b.c'>m</a> "
        "<a href='javascript:void(0)'>j</a> <a href='ftp://x/y'>f</a> <a href='guide'>again</a>"
        "<a href='http://[::1'>broken</a> <a href='//other.example/p'>other</a></body></html>"
    )
    assert extract(html, url="http://site.example/x/y").links == (
        "https://cdn.example.org/docs/guide",
        "https://cdn.example.org/top",
        "https://other.example/p",
    )


def test_small_page_without_main_content_keeps_its_visible_text():
    page = extract(graph_html("/a"), url=SITE + "/a")
    assert page.title == "Page /a"
    assert "This is page /a." in page.text
    assert page.links == (SITE + "/a/1", SITE + "/a/2", SITE + "/")


@pytest.mark.parametrize("page", all_pages(), ids=lambda page: page.name)
def test_fixture_page_gives_its_main_text_without_boilerplate(page):
    text = " ".join(extract(page.html, url="https://news.example/story").text.split())
    assert [s for s in page.main if s not in text] == []
    assert [s for s in page.boilerplate if s in text] == []


def test_empty_document_extracts_to_nothing():
    assert extract("", url=SITE) == Extracted(title="", text="", markdown="", links=())
    assert extract("   \n", url=SITE) == Extracted(title="", text="", markdown="", links=())


def test_script_written_page_needs_javascript():
    assert needs_javascript(JS_PAGE, extract(JS_PAGE, url=SITE + "/js"))


def test_article_page_does_not_need_javascript():
    html = article_html()
    assert not needs_javascript(html, extract(html, url=SITE + "/"))


@pytest.mark.parametrize(
    "html",
    [
        # An empty application root, the bundle loaded from elsewhere.
        "<html><body><div id='root'></div><script src='/bundle.js'></script></body></html>",
        "<html><body><div id='__next'></div></body></html>",
        "<html><body><app-root ng-version='17.0.0'></app-root></body></html>",
        "<html><body><noscript>You need to enable JavaScript to run this app.</noscript>"
        "</body></html>",
    ],
)
def test_page_with_little_text_and_an_app_shell_needs_javascript(html):
    assert needs_javascript(html, extract(html, url=SITE))


@pytest.mark.parametrize(
    "html",
    [
        # Short but complete: no script, no app root.
        graph_html("/c/1"),
        # Enough text: served as it came, whatever its scripts.
        article_html().replace("</body>", "<script src='/analytics.js'></script></body>"),
        "<html><body><div id='app'>" + "Server-rendered content. " * 20 + "</div></body></html>",
    ],
)
def test_page_with_its_text_in_the_html_does_not_need_javascript(html):
    assert not needs_javascript(html, extract(html, url=SITE))


def test_plain_text_and_json_decode_with_their_charset():
    assert text_of(PLAIN_TEXT.encode(), "text/plain", "utf-8") == PLAIN_TEXT
    assert json.loads(text_of(json.dumps(DATA_JSON).encode(), "application/json", None)) == (
        DATA_JSON
    )
    assert text_of("café".encode("latin-1"), "text/plain", "iso-8859-1") == "café"


def test_text_of_reads_a_bom_and_an_xml_declaration():
    assert text_of(b"\xef\xbb\xbfhello", "text/plain", None) == "hello"
    assert text_of("hé".encode("utf-16"), "text/plain", None) == "hé"
    xml = '<?xml version="1.0" encoding="ISO-8859-1"?><a>café</a>'.encode("latin-1")
    assert text_of(xml, "application/rss+xml", None).endswith("<a>café</a>")


def test_text_of_replaces_undecodable_bytes_and_refuses_binary_types():
    assert text_of(b"caf\xe9", "text/plain", None) == "caf\ufffd"
    assert text_of(b"ok", "text/plain", "no-such-charset") == "ok"
    with pytest.raises(ValueError, match="image/png is not a text type"):
        text_of(b"\x89PNG", "image/png", None)
