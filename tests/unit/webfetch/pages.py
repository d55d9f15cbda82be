"""Realistic pages for the extraction tests and the extractor comparison.

Each page is generated from its parts so the main text and the boilerplate are known:
`MAIN` sentences must come out of an extraction, `BOILERPLATE` sentences should not.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    name: str
    html: str
    main: tuple[str, ...]
    boilerplate: tuple[str, ...]


_NAV = (
    '<header class="site-header"><div class="logo"><a href="/">Daily Ledger</a></div>'
    '<nav class="menu"><ul><li><a href="/world">World news and analysis</a></li>'
    '<li><a href="/business">Business and markets today</a></li>'
    '<li><a href="/sport">Sport results and fixtures</a></li>'
    '<li><a href="/opinion">Opinion columns from our writers</a></li></ul></nav>'
    '<form class="search"><input name="q" placeholder="Search"></form></header>'
)
_NAV_TEXT = ("World news and analysis", "Business and markets today")
_COOKIE = (
    '<div id="cookie-banner" class="cookie-consent"><p>We use cookies to improve your '
    "experience on our site and to show you relevant advertising.</p>"
    "<button>Accept all cookies</button></div>"
)
_COOKIE_TEXT = ("We use cookies to improve your experience on our site",)
_FOOTER = (
    '<footer class="site-footer"><div class="cols"><ul><li><a href="/about">About the '
    'Daily Ledger newsroom</a></li><li><a href="/careers">Careers at our company</a></li>'
    '<li><a href="/privacy">Privacy policy and terms of use</a></li></ul></div>'
    "<p>Copyright 2026 Daily Ledger Media Group. All rights reserved.</p></footer>"
)
_FOOTER_TEXT = (
    "Copyright 2026 Daily Ledger Media Group. All rights reserved.",
    "Privacy policy and terms of use",
)


def _related(titles: tuple[str, ...]) -> str:
    items = "".join(f'<li><a href="/r/{i}">{t}</a></li>' for i, t in enumerate(titles))
    return f'<aside class="related"><h3>Most read</h3><ul>{items}</ul></aside>'


def news_article() -> Page:
    main = (
        "The harbour authority approved the new toll schedule on Tuesday after a long debate.",
        "Freight operators will pay by axle rather than by weight from the first of March.",
        "Critics on the council said the change favours the largest shipping companies.",
        "The mayor replied that small operators would receive a rebate for the first year.",
        "Revenue from the tolls is expected to fund the dredging of the eastern channel.",
        "A final review of the schedule is planned for the autumn session of the council.",
    )
    related = (
        "Ten things to know about the new ferry timetable",
        "Why the bridge repairs are running two years late",
    )
    comments = (
        '<section id="comments" class="comments"><h3>Comments</h3>'
        '<div class="comment"><p>Great reporting, thanks for keeping us informed!</p></div>'
        '<div class="comment"><p>First! Does anyone know when the ferry starts again?</p>'
        "</div></section>"
    )
    paragraphs = "".join(f"<p>{s} {s.split()[0]} officials confirmed it.</p>" for s in main)
    html = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Harbour approves new toll "
        "schedule | Daily Ledger</title><script>window.dataLayer=[];</script>"
        "<style>body{font-family:serif}</style></head><body>"
        f"{_COOKIE}{_NAV}<div class='layout'><main><article class='story'>"
        "<h1>Harbour approves new toll schedule</h1>"
        "<div class='byline'>By Ada Fenwick, harbour correspondent</div>"
        f"{paragraphs}</article>{comments}</main>{_related(related)}</div>{_FOOTER}"
        "<script>trackPageView();</script></body></html>"
    )
    return Page(
        "news",
        html,
        main,
        _NAV_TEXT + _COOKIE_TEXT + _FOOTER_TEXT + related + ("Great reporting, thanks",),
    )


def blog_post() -> Page:
    main = (
        "Caching the toll tables in memory cut the median lookup time from four milliseconds.",
        "The first version read the tables from the database on every single request.",
        "We moved the tables into a dictionary that is rebuilt whenever an operator edits them.",
        "Invalidation travels over a small message bus so every replica drops its copy at once.",
        "The remaining cost is dominated by parsing the request body, not by the lookup.",
    )
    sidebar = (
        '<div class="sidebar widget-area"><div class="widget"><h4>About me</h4>'
        "<p>I write about backend systems, queues and the occasional bicycle repair.</p>"
        '</div><div class="widget"><h4>Archives</h4><ul><li><a href="/2026/01">January '
        '2026 archive</a></li><li><a href="/2025/12">December 2025 archive</a></li></ul>'
        '</div><div class="widget newsletter"><p>Subscribe to the newsletter and never miss '
        "a post.</p></div></div>"
    )
    body = (
        f"<p>{main[0]}</p><p>{main[1]}</p><h2>What we changed</h2><p>{main[2]}</p>"
        "<pre><code>tables = {row.key: row for row in load_tables()}</code></pre>"
        f"<ul><li>{main[3]}</li><li>Readers get the new table on the next request.</li></ul>"
        f"<p>{main[4]}</p>"
    )
    html = (
        "<!doctype html><html><head><title>Caching toll tables - Notes from the backend"
        "</title></head><body><div id='page'><header><h2 class='site-title'><a href='/'>"
        "Notes from the backend</a></h2><nav><a href='/'>Home page</a> <a href='/tags'>All "
        "tags and topics</a></nav></header><div id='content'><div class='post'>"
        f"<h1 class='entry-title'>Caching toll tables</h1><div class='entry-content'>{body}"
        "</div><div class='share'>Share this post on social media</div></div>"
        f"{sidebar}</div><footer>Powered by a static site generator. Theme by Someone."
        "</footer></div></body></html>"
    )
    return Page(
        "blog",
        html,
        main,
        (
            "I write about backend systems, queues and the occasional bicycle repair.",
            "Subscribe to the newsletter and never miss a post.",
            "January 2026 archive",
            "Share this post on social media",
            "Powered by a static site generator.",
        ),
    )


def docs_page() -> Page:
    main = (
        "A toll profile describes one road operator and the prices it charges per vehicle.",
        "Each profile must name a currency and at least one vehicle class.",
        "Prices are stored as integers in the smallest unit of the currency.",
        "Changing a profile takes effect for journeys that start after the change.",
    )
    toc = (
        '<nav class="toc" aria-label="Table of contents"><ul><li><a href="#intro">'
        'Introduction to the guide</a></li><li><a href="#profiles">Toll profiles '
        'reference</a></li><li><a href="#api">Programming interface overview</a></li></ul></nav>'
    )
    table = (
        "<table><thead><tr><th>Field</th><th>Meaning</th></tr></thead><tbody>"
        "<tr><td>currency</td><td>ISO code of the currency</td></tr>"
        "<tr><td>classes</td><td>vehicle classes with their prices</td></tr></tbody></table>"
    )
    html = (
        "<!doctype html><html><head><title>Toll profiles &mdash; Tollroad 3.2 documentation"
        "</title></head><body><div class='wy-grid'><div class='sidebar'>"
        "<div class='version'>Version 3.2 (latest stable release)</div>"
        f"{toc}</div><div role='main' class='document'><div class='section' id='profiles'>"
        f"<h1>Toll profiles</h1><p>{main[0]}</p><p>{main[1]}</p>{table}"
        f"<div class='admonition note'><p>{main[2]}</p></div><p>{main[3]}</p></div>"
        "<div class='footer-nav'><a href='/prev'>Previous: Installing the server</a> "
        "<a href='/next'>Next: Vehicle classes</a></div></div></div>"
        "<footer>&copy; Copyright 2026, The Tollroad authors. Built with a docs tool.</footer>"
        "</body></html>"
    )
    return Page(
        "docs",
        html,
        main,
        (
            "Programming interface overview",
            "Version 3.2 (latest stable release)",
            "Previous: Installing the server",
            "Copyright 2026, The Tollroad authors.",
        ),
    )


def product_page() -> Page:
    main = (
        "The Ledger Pro is a weatherproof booth counter with a battery that lasts a year.",
        "It counts vehicles with an infrared beam and stores every count with its timestamp.",
        "Data is exported over a serial cable or read by a phone over a short-range radio link.",
    )
    reviews = (
        '<div class="reviews"><h3>Customer reviews</h3><div class="review"><p>Works '
        "exactly as described, five stars from me.</p></div></div>"
    )
    html = (
        "<!doctype html><html><head><title>Ledger Pro counter | Booth Supplies Shop</title>"
        "</head><body>"
        f"{_COOKIE}<header><nav><a href='/cart'>Your shopping cart is empty</a> "
        "<a href='/account'>Sign in to your account</a></nav></header>"
        "<div class='breadcrumbs'><a href='/'>Shop</a> / <a href='/counters'>Counters</a></div>"
        "<div class='product'><h1>Ledger Pro counter</h1><div class='price'>EUR 249.00</div>"
        f"<div class='description'><p>{main[0]}</p><p>{main[1]}</p><p>{main[2]}</p></div>"
        f"<button>Add to cart</button></div>{reviews}"
        "<div class='recommendations'><h3>Customers also bought</h3><ul><li>Spare battery "
        "pack for the counter</li><li>Mounting bracket for booth walls</li></ul></div>"
        f"{_FOOTER}</body></html>"
    )
    return Page(
        "product",
        html,
        main,
        _COOKIE_TEXT
        + _FOOTER_TEXT
        + ("Your shopping cart is empty", "Spare battery pack for the counter"),
    )


def all_pages() -> tuple[Page, ...]:
    return (news_article(), blog_post(), docs_page(), product_page())
