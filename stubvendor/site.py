"""A few web pages the stub serves at ``GET /_stub/site/...``, for the demo's web actions.

``make run``'s demo tenant scrapes, renders and crawls these (the embedded demo allows the
fetcher to reach 127.0.0.1; production never does). Not vendor calls: not recorded, no faults.

* ``/_stub/site/`` an article linking to ``guide`` and ``faq`` (and ``app``);
* ``/_stub/site/guide``, ``/_stub/site/faq`` pages linking back;
* ``/_stub/site/app`` a page whose content a script writes (the renderer's convention:
  ``document.getElementById("app").innerHTML = <JSON string>;``).
"""

from __future__ import annotations

import json

from aiohttp import web

BASE = "/_stub/site/"


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body>"
        f'<nav><a href="{BASE}">Home</a> <a href="{BASE}guide">Guide</a> '
        f'<a href="{BASE}faq">FAQ</a></nav><main><article><h1>{title}</h1>{body}</article></main>'
        "<footer>Demo site served by the Tollgate stub.</footer></body></html>"
    )


APP_CONTENT = "<h1>Rendered demo</h1><p>This paragraph was written by a script.</p>"
PAGES = {
    "": _page(
        "Tollgate demo site",
        "<p>Tollgate fetches pages behind the same keys, budgets and books as models.</p>"
        "<p>Each page fetched is a unit on the books, priced by the profile that served it.</p>"
        f'<p>Read the <a href="{BASE}guide">guide</a>, the <a href="{BASE}faq">FAQ</a>, '
        f'or the <a href="{BASE}app">app page</a>.</p>',
    ),
    "guide": _page(
        "Guide",
        "<p>Scrape one page, search the web, or crawl a site as a job.</p>"
        "<p>Crawls are rows in the database, claimed by workers one job at a time.</p>",
    ),
    "faq": _page(
        "FAQ",
        "<p>Private addresses are never fetched.</p><p>robots.txt is obeyed by crawls.</p>",
    ),
    "app": (
        "<!doctype html><html><head><title>Demo app</title></head><body>"
        '<div id="app"></div><script>document.getElementById("app").innerHTML = '
        f"{json.dumps(APP_CONTENT)};</script></body></html>"
    ),
}


async def site_page(request: web.Request) -> web.Response:
    page = PAGES.get(request.match_info["tail"].strip("/"))
    if page is None:
        return web.Response(status=404, text="not found", content_type="text/plain")
    return web.Response(text=page, content_type="text/html")
