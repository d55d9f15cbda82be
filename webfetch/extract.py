"""What a fetched page says: its title, main text, a markdown rendering and its links.

Main content comes from trafilatura (fast mode, comments dropped, tables kept), chosen by
measurement against readability-lxml + markdownify, selectolax and inscriptis on fixture
pages (tests/unit/webfetch/compare_extractors.py; the figures are in the README): it kept
every main sentence and let no boilerplate through, at about 1 ms for a small page and
15 ms for a 150 KB one. Title and links are read from the document itself (lxml), because
an extractor keeps only the links inside the main text. When the extractor finds no main
content (a very short page), the page's visible text stands in, so a crawl of small pages
still has something to show.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit

import lxml.html
import trafilatura
from lxml import etree
from trafilatura.xml import xmltotxt

# Below this many characters of readable text a page with scripts is taken as script-written.
MIN_TEXT_CHARS = 200
APP_ROOT_IDS = frozenset({"app", "root", "__next", "__nuxt", "___gatsby", "svelte", "main-app"})
APP_ROOT_ATTRIBUTES = ("data-reactroot", "ng-app", "ng-version", "data-server-rendered")
_INVISIBLE = ("script", "style", "noscript", "template", "head")
_SPACES = re.compile(r"[ \t\r\f\v]+")
_LINES = re.compile(r"\n\s*\n+")


@dataclass(frozen=True, slots=True)
class Extracted:
    title: str
    text: str
    markdown: str
    links: tuple[str, ...]


def extract(html: str, *, url: str) -> Extracted:
    """Extract title, main text, markdown and links (absolute http(s), no fragments, unique)."""
    tree = _parse(html)
    if tree is None:
        return Extracted(title="", text="", markdown="", links=())
    title = _title(tree)
    links = _links(tree, url)
    document = trafilatura.bare_extraction(
        html,
        url=url,
        fast=True,
        include_comments=False,
        include_tables=True,
        include_formatting=True,
    )
    body = getattr(document, "body", None)
    text = xmltotxt(body, False).strip() if body is not None else ""
    if text:
        markdown = xmltotxt(body, True).strip()
    else:
        text = visible_text(tree)
        markdown = text
    return Extracted(title=title, text=text, markdown=markdown, links=links)


def needs_javascript(html: str, extracted: Extracted) -> bool:
    """Tell whether a page's content is written by scripts, so a renderer should load it.

    The rule: the page has fewer than MIN_TEXT_CHARS characters of readable text (the
    extracted text, else the visible text) AND at least one of
      * a <script> element (inline code or a src),
      * an empty application root: an element with an id in APP_ROOT_IDS, or one of
        APP_ROOT_ATTRIBUTES, that has no text,
      * a <noscript> whose text mentions JavaScript.
    A page with enough text is served as it came, whatever scripts it also carries; a short
    page without scripts is simply short.
    """
    tree = _parse(html)
    if tree is None:
        return False
    readable = extracted.text.strip() or visible_text(tree)
    if len(readable) >= MIN_TEXT_CHARS:
        return False
    if tree.xpath("//script[@src or normalize-space(text())]"):
        return True
    for element in tree.iter(etree.Element):
        is_root = element.get("id") in APP_ROOT_IDS or any(
            element.get(name) is not None for name in APP_ROOT_ATTRIBUTES
        )
        if is_root and not element.text_content().strip():
            return True
    return any("javascript" in node.text_content().lower() for node in tree.iter("noscript"))


def text_of(body: bytes, content_type: str, charset: str | None) -> str:
    """Decode a text body (text/*, JSON, XML): BOM, then charset, then UTF-8 with replacement.

    JSON is UTF-8 unless a BOM says otherwise (RFC 8259); an XML body without a charset
    parameter may name its encoding in its declaration. Raises ValueError for a media type
    that is not text.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if not is_text_type(media):
        raise ValueError(f"{media or 'an unnamed type'} is not a text type")
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if body.startswith(bom):
            return body.decode(name, errors="replace")
    encoding = charset
    if encoding is None and (media.endswith("/xml") or media.endswith("+xml")):
        declared = re.match(rb"<\?xml[^>]*encoding=[\"']([A-Za-z0-9._-]+)[\"']", body)
        encoding = declared.group(1).decode("ascii") if declared else None
    if media == "application/json" or media.endswith("+json"):
        encoding = encoding or "utf-8"
    try:
        return body.decode(encoding or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def is_text_type(media_type: str) -> bool:
    """Tell whether a media type is text `text_of` can decode (text/*, JSON, XML, JS)."""
    return (
        media_type.startswith("text/")
        or media_type in ("application/json", "application/xml", "application/javascript")
        or media_type.endswith(("+json", "+xml"))
    )


def visible_text(tree: lxml.html.HtmlElement) -> str:
    """Return the text a reader sees: no scripts, styles or head; blank runs collapsed."""
    body = tree.find("body")
    root = body if body is not None else tree
    parts: list[str] = []
    _collect(root, parts)
    text = _SPACES.sub(" ", "".join(parts))
    return _LINES.sub("\n", "\n".join(line.strip() for line in text.splitlines())).strip()


_BLOCKS = frozenset(
    [
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "nav",
        "aside",
        "li",
        "ul",
        "ol",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "tr",
        "table",
        "pre",
        "blockquote",
        "br",
        "dt",
        "dd",
        "figure",
        "figcaption",
        "form",
    ]
)


def _collect(element: lxml.html.HtmlElement, parts: list[str]) -> None:
    if not isinstance(element.tag, str) or element.tag in _INVISIBLE:
        if element.tail:
            parts.append(element.tail)
        return
    block = element.tag in _BLOCKS
    if block:
        parts.append("\n")
    if element.text:
        parts.append(element.text)
    for child in element:
        _collect(child, parts)
    if block:
        parts.append("\n")
    if element.tail:
        parts.append(element.tail)


def _parse(html: str) -> lxml.html.HtmlElement | None:
    if not html.strip():
        return None
    try:
        return lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return None


def _title(tree: lxml.html.HtmlElement) -> str:
    for path in ("//title", "//h1"):
        for node in tree.xpath(path):
            title = " ".join(node.text_content().split())
            if title:
                return title
    return ""


def _links(tree: lxml.html.HtmlElement, url: str) -> tuple[str, ...]:
    base = url
    for href in tree.xpath("//base/@href"):
        base = urljoin(url, href.strip())
        break
    seen: dict[str, None] = {}
    for href in tree.xpath("//a/@href | //area/@href"):
        try:
            absolute, _ = urldefrag(urljoin(base, href.strip()))
            parts = urlsplit(absolute)
        except ValueError:  # a malformed address (bad IPv6 literal, port) is skipped
            continue
        if parts.scheme in ("http", "https") and parts.netloc:
            seen.setdefault(absolute, None)
    return tuple(seen)
