"""The crawl loop: one worker feeds one claimed job page by page until it ends.

Everything that touches the network is injected: `fetch_page` fetches and bills one page
(it raises `StopCrawl` when the job must end, e.g. its budget is spent), `robots` answers
robots.txt. The loop owns the order, the lease, politeness and the job's ending; all ORM
work runs off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from core.config import tollgate
from core.db import off_loop
from webfetch import jobs
from webfetch.frontier import host_of
from webfetch.models import CrawlJob, CrawlPage

logger = logging.getLogger(__name__)

_OUTCOME_STATES = ("fetched", "failed", "skipped")


@dataclass(frozen=True)
class PageOutcome:
    """What fetching one page came to, as the page fetcher tells it."""

    state: str  # "fetched" | "failed" | "skipped"
    status: int | None = None
    final_url: str = ""
    content_type: str = ""
    title: str = ""
    text: str = ""
    markdown: str = ""
    html: str = ""
    bytes: int = 0
    provider: str = ""
    units: int = 0
    cost_micro: int = 0
    request_id: str = ""  # the usage row that billed the page: `page.request_id` when billed
    error_code: str = ""
    skip_reason: str = ""
    links: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.state not in _OUTCOME_STATES:
            raise ValueError(f"a page outcome is one of {_OUTCOME_STATES}, not {self.state!r}")


class StopCrawl(Exception):
    """Raised by the page fetcher before it fetches: the job ends (e.g. budget_exhausted)."""

    def __init__(self, state: str, stop_reason: str) -> None:
        super().__init__(f"{state}: {stop_reason}")
        self.state = state
        self.stop_reason = stop_reason


class PageFetcher(Protocol):
    """Fetch and bill one page; bill under `page.request_id` (kept across a crash's refetch)."""

    async def __call__(self, job: CrawlJob, page: CrawlPage) -> PageOutcome: ...


class RobotsCheck(Protocol):
    """Say whether robots.txt lets the crawler fetch the URL, and the host's crawl-delay (s)."""

    async def __call__(self, url: str) -> tuple[bool, float | None]: ...


_renew_lease = off_loop(jobs.renew_lease)
_next_page = off_loop(jobs.next_page)
_record_page = off_loop(jobs.record_page)
_release_page = off_loop(jobs.release_page)
_finish_job = off_loop(jobs.finish_job)


@off_loop
def _fresh(job: CrawlJob) -> CrawlJob:
    job.refresh_from_db()
    return job


def _log_failure(job: CrawlJob, page: CrawlPage, what: str, exc: Exception) -> None:
    # Never the message: it may quote the page. The class and the frames are enough.
    logger.error(
        "crawl %s: %s raised %s on page %s\n%s",
        job.public_id,
        what,
        type(exc).__name__,
        page.pk,
        "".join(traceback.format_tb(exc.__traceback__)),
    )


def _internal_failure(page: CrawlPage) -> PageOutcome:
    # The fetcher may have billed before it broke: keep the id its usage row would carry.
    return PageOutcome(state="failed", error_code="internal", request_id=page.request_id)


async def run_job(
    job: CrawlJob,
    *,
    worker: str,
    fetch_page: PageFetcher,
    robots: RobotsCheck | None,
    host_delay_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> CrawlJob:
    """Crawl the claimed job until it ends, is cancelled or taken over; return it as stored.

    Politeness: between the end of one fetch of a host and the start of the next, at least
    max(host_delay_s, the host's robots crawl-delay) passes. Robots-skipped pages fetch
    nothing and wait for nothing. `robots` is given when robots.txt applies: the caller
    decides (the job asks it, or a profile that may serve the job does).
    """
    if host_delay_s is None:
        host_delay_s = tollgate().crawl_host_delay_ms / 1000
    last_fetch_end: dict[str, float] = {}
    while True:
        # Renewal fails when the job was cancelled or taken over: this worker stops.
        if not await _renew_lease(job, worker=worker):
            break
        job = await _fresh(job)
        if job.pages_fetched >= job.max_pages:
            await _finish_job(job, state="done", stop_reason="max_pages reached", worker=worker)
            break
        page = await _next_page(job, worker=worker)
        if page is None:
            await _finish_job(job, state="done", stop_reason="frontier empty", worker=worker)
            break
        crawl_delay_s = None
        if robots is not None:
            try:
                allowed, crawl_delay_s = await robots(page.url)
            except Exception as exc:
                # Unknown is not allowed: the page fails, the crawl goes on.
                _log_failure(job, page, "the robots check", exc)
                await _record_page(page, PageOutcome(state="failed", error_code="robots_error"))
                continue
            if not allowed:
                await _record_page(page, PageOutcome(state="skipped", skip_reason="robots"))
                continue
        host = host_of(page.url)
        delay_s = max(host_delay_s, crawl_delay_s or 0.0)
        if host in last_fetch_end:
            wait_s = last_fetch_end[host] + delay_s - clock()
            if wait_s > 0:
                await sleep(wait_s)
        try:
            outcome = await fetch_page(job, page)
        except StopCrawl as stop:
            await _release_page(page)
            await _finish_job(job, state=stop.state, stop_reason=stop.stop_reason, worker=worker)
            break
        except Exception as exc:
            _log_failure(job, page, "the page fetcher", exc)
            outcome = _internal_failure(page)
        finally:
            last_fetch_end[host] = clock()
        await _record_page(page, outcome)
    return await _fresh(job)
