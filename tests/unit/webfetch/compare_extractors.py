"""Compare main-content extractors on the fixture pages (run by hand, not collected):

    pip install readability-lxml==0.9 markdownify==1.2.3 selectolax==1.0.2 inscriptis==2.7.6
    python -m tests.unit.webfetch.compare_extractors

(Only trafilatura is a requirement of Tollgate; the others are installed to compare.)

Prints, per extractor, the share of main sentences found, the share of boilerplate
sentences that leaked in, and the median time per page.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable

from tests.support.testsite import ARTICLE_SENTENCES, BOILERPLATE, article_html
from tests.unit.webfetch.pages import Page, all_pages


def _trafilatura(html: str) -> str:
    import trafilatura

    return (
        trafilatura.extract(
            html, output_format="markdown", include_tables=True, include_comments=False
        )
        or ""
    )


def _trafilatura_precision(html: str) -> str:
    import trafilatura

    return (
        trafilatura.extract(
            html, output_format="markdown", favor_precision=True, include_comments=False
        )
        or ""
    )


def _trafilatura_fast(html: str) -> str:
    import trafilatura

    return (
        trafilatura.extract(
            html, output_format="markdown", include_tables=True, include_comments=False, fast=True
        )
        or ""
    )


def _readability(html: str) -> str:
    from markdownify import markdownify
    from readability import Document

    return markdownify(Document(html).summary(html_partial=True))


def _selectolax(html: str) -> str:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    tree.strip_tags(["script", "style", "nav", "header", "footer", "aside", "form"])
    node = tree.css_first("main") or tree.css_first("article") or tree.body
    return node.text(separator=" ") if node else ""


def _inscriptis(html: str) -> str:
    from inscriptis import get_text

    return get_text(html)


EXTRACTORS: dict[str, Callable[[str], str]] = {
    "trafilatura 2.3.1 (markdown)": _trafilatura,
    "trafilatura, favor_precision": _trafilatura_precision,
    "trafilatura, fast (no fallback extractors)": _trafilatura_fast,
    "readability-lxml 0.9 + markdownify 1.2.3": _readability,
    "selectolax 1.0.2 (strip nav/header/footer/aside, main)": _selectolax,
    "inscriptis 2.7.6 (whole page)": _inscriptis,
}


def _normal(text: str) -> str:
    return re.sub(r"[\s*_#`|>-]+", " ", text).strip()


def _bulky(page: Page) -> Page:
    """The page at a size real sites have (about 150 KB): a mega-menu and inline scripts."""
    menu = "".join(f'<li><a href="/m/{i}">Menu entry {i}</a></li>' for i in range(1500))
    script = "<script>var config = " + '{"k": "' + "x" * 60_000 + '"};</script>'
    html = page.html.replace("<body>", f"<body>{script}<nav><ul>{menu}</ul></nav>", 1)
    return Page(page.name + "-bulky", html, page.main, page.boilerplate)


def _pages() -> list[Page]:
    site = Page("testsite", article_html(), ARTICLE_SENTENCES, BOILERPLATE[3:])
    pages = [*all_pages(), site]
    return pages + [_bulky(page) for page in pages]


def main() -> None:
    pages = _pages()
    small, large = pages[: len(pages) // 2], pages[len(pages) // 2 :]
    for name, extractor in EXTRACTORS.items():
        print(name)
        _report(extractor, small, "small pages (1-3 KB)")
        _report(extractor, large, "bulky pages (~150 KB)")


def _report(extractor: Callable[[str], str], pages: list[Page], label: str) -> None:
    if True:
        found = leaked = mains = boiler = 0
        times: list[float] = []
        for page in pages:
            text = _normal(extractor(page.html))
            found += sum(_normal(s) in text for s in page.main)
            leaked += sum(_normal(s) in text for s in page.boilerplate)
            mains += len(page.main)
            boiler += len(page.boilerplate)
            for _ in range(20):
                start = time.perf_counter()
                extractor(page.html)
                times.append(time.perf_counter() - start)
        print(
            f"    {label:22s} main {found}/{mains}  boilerplate {leaked}/{boiler}  "
            f"{statistics.median(times) * 1000:.2f} ms/page"
        )


if __name__ == "__main__":
    main()
