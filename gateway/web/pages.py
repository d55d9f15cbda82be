"""What a page a profile answered becomes: the scrape answer's fields, and whether a page our
fetcher got is whole or written by scripts (then a renderer is tried). Extraction is CPU
work: callers on the event loop run it in a thread."""

from __future__ import annotations

import asyncio

from gateway.web.types import PageAnswer, WebRequest
from webfetch.extract import extract, needs_javascript, text_of

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/ld+json")


async def page_is_whole(answer: PageAnswer) -> bool:
    """Say whether a fetched page can be the answer (False: scripts write its content)."""
    if answer.rendered or not answer.content_type.startswith(HTML_TYPES):
        return True
    return await asyncio.to_thread(_written_by_hand, answer)  # extraction is CPU: off the loop


def _written_by_hand(answer: PageAnswer) -> bool:
    html = _decoded(answer)
    return not needs_javascript(html, extract(html, url=answer.final_url))


def page_json(req: WebRequest, answer: PageAnswer) -> dict:
    """The scrape answer: where it ended, what it is, its text (and what else was asked)."""
    body = {
        "url": req.url,
        "final_url": answer.final_url,
        "status": answer.status,
        "content_type": answer.content_type,
        "bytes": len(answer.body),
        "title": "",
        "text": "",
    }
    if answer.content_type.startswith(HTML_TYPES):
        html = _decoded(answer)
        extracted = extract(html, url=answer.final_url)
        body |= {"title": extracted.title, "text": extracted.text}
        if "markdown" in req.formats:
            body["markdown"] = extracted.markdown
        if "html" in req.formats:
            body["html"] = html
    elif answer.content_type.startswith(TEXT_TYPES):
        body["text"] = text_of(answer.body, answer.content_type, answer.charset)
    return body


def _decoded(answer: PageAnswer) -> str:
    return answer.body.decode(answer.charset or "utf-8", errors="replace")


def links_of(answer: PageAnswer) -> tuple[str, ...]:
    """Return the links of an HTML page (absolute, http and https), for a crawl's frontier."""
    if not answer.content_type.startswith(HTML_TYPES):
        return ()
    return extract(_decoded(answer), url=answer.final_url).links
