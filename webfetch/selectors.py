"""Reads of crawl jobs for the jobs route, scoped to the caller's account, and their JSON."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from webfetch.jobs import FORMATS
from webfetch.models import CrawlJob, CrawlPage

PAGE_LIMIT_MAX = 100


def job_for_account(public_id: str, account_id: int) -> CrawlJob | None:
    """Return the account's job; None for another account's (the route answers 404)."""
    return CrawlJob.objects.filter(public_id=public_id, account_id=account_id).first()


def job_pages(job: CrawlJob, *, after_id: int | None, limit: int) -> list[CrawlPage]:
    """Return up to `limit` (1..PAGE_LIMIT_MAX) pages of the job after page id `after_id`,
    in id order: the last page's id is the next call's cursor."""
    limit = max(1, min(limit, PAGE_LIMIT_MAX))
    pages = CrawlPage.objects.filter(job=job)
    if after_id is not None:
        pages = pages.filter(id__gt=after_id)
    return list(pages.order_by("id")[:limit])


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def job_as_json(job: CrawlJob) -> dict:
    return {
        "id": job.public_id,
        "state": job.state,
        "stop_reason": job.stop_reason or None,
        "seed_url": job.seed_url,
        "client_request_id": job.client_request_id or None,
        "limits": {
            "max_pages": job.max_pages,
            "max_depth": job.max_depth,
            "same_host": job.same_host,
            "include": list(job.include),
            "exclude": list(job.exclude),
            "render_js": job.render_js,
            "formats": list(job.formats),
            "respect_robots": job.respect_robots,
        },
        "counters": {
            "pages_fetched": job.pages_fetched,
            "pages_failed": job.pages_failed,
            "pages_skipped": job.pages_skipped,
            "bytes": job.bytes,
        },
        "units": job.units,
        "cost_micro": job.cost_micro,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }


def page_as_json(page: CrawlPage, formats: Iterable[str]) -> dict:
    """Return the page's JSON with the content formats asked for (of text, markdown, html)."""
    body = {
        "id": page.pk,
        "url": page.url,
        "final_url": page.final_url or None,
        "depth": page.depth,
        "state": page.state,
        "skip_reason": page.skip_reason or None,
        "error_code": page.error_code or None,
        "status": page.status,
        "content_type": page.content_type or None,
        "title": page.title or None,
        "bytes": page.bytes,
        "provider": page.provider or None,
        "units": page.units,
        "cost_micro": page.cost_micro,
    }
    asked = set(formats)
    for name in FORMATS:
        if name in asked:
            body[name] = getattr(page, name)
    return body
