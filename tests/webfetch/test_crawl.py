"""The crawl loop on real PostgreSQL with an in-test page fetcher (a fixed little graph), a
robots check, and a clock that only the loop's sleeps move."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.db import connections
from django.utils import timezone

from accounts.models import Account
from core.db import off_loop
from tests.support.clock import FakeClock
from webfetch.crawl import PageOutcome, StopCrawl, run_job
from webfetch.jobs import cancel_job, claim_job
from webfetch.models import CrawlJob, CrawlPage

pytestmark = pytest.mark.usefixtures("transactional_db")

SITE = {
    "http://site.test/": ["/a", "/b", "http://other.test/x", "/private/1", "/nobots", "/c"],
    "http://site.test/a": ["/a/1", "/b", "/a#top", "mailto:a@site.test"],
    "http://site.test/b": ["/b/1", "/"],
    "http://site.test/a/1": ["/a/1/deep"],
    "http://site.test/b/1": [],
    "http://site.test/nobots": ["/never"],
}
PAGE_COST_MICRO = 1_500


class GraphFetcher:
    """Answer pages from a fixed graph, each billed one unit under the page's request id;
    `on_fetch(url)` runs first and may raise or act (cancel, take the job over)."""

    def __init__(
        self,
        graph: dict[str, list[str]],
        *,
        clock: FakeClock,
        fetch_s: float = 0.0,
        on_fetch: Callable | None = None,
    ) -> None:
        self.graph, self.clock, self.fetch_s, self.on_fetch = graph, clock, fetch_s, on_fetch
        self.fetched: list[str] = []
        self.request_ids: list[str] = []

    async def __call__(self, job: CrawlJob, page: CrawlPage) -> PageOutcome:
        if self.on_fetch is not None:
            await self.on_fetch(job, page)
        self.fetched.append(page.url)
        self.request_ids.append(page.request_id)
        self.clock.advance(self.fetch_s)
        body = f"text of {page.url}"
        return PageOutcome(
            state="fetched",
            status=200,
            final_url=page.url,
            content_type="text/html",
            title=urlsplit(page.url).path,
            text=body,
            markdown=f"# {body}",
            html=f"<p>{body}</p>",
            bytes=len(body),
            provider="test-direct",
            units=1,
            cost_micro=PAGE_COST_MICRO,
            request_id=page.request_id,
            links=tuple(self.graph.get(page.url, [])),
        )


class Robots:
    """robots.txt answers: paths refused, crawl-delays per host; the URLs asked, in order."""

    def __init__(self, disallow: tuple[str, ...] = (), delays: dict | None = None) -> None:
        self.disallow, self.delays = disallow, delays or {}
        self.asked: list[str] = []

    async def __call__(self, url: str) -> tuple[bool, float | None]:
        self.asked.append(url)
        parts = urlsplit(url)
        return (
            not any(parts.path.startswith(prefix) for prefix in self.disallow),
            self.delays.get(parts.hostname),
        )


class Sleeps:
    """The loop's sleep: records each wait and moves the clock by it."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


def run_on_loop(coro):
    """Run the coroutine on a fresh loop whose ORM work (off_loop) runs in one thread, whose
    database connection is closed at the end (the test database is dropped at the end)."""
    executor = ThreadPoolExecutor(max_workers=1)

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(executor)
        try:
            return await coro
        finally:
            await loop.run_in_executor(None, connections.close_all)

    return asyncio.run(main())


def crawl(job_fields: dict, fetcher_for, *, robots=None, host_delay_s=1.0, worker="w1"):
    """Create and claim a job, run it to its end; return (job, fetcher, sleeps)."""
    from tests.webfetch.conftest import make_crawl_tenant
    from webfetch.jobs import create_job

    tenant = make_crawl_tenant()
    job_fields = {"seed_url": "http://site.test/", "max_pages": 50, "max_depth": 3, **job_fields}
    job = create_job(account=tenant.account, group=tenant.group, api_key=None, **job_fields)
    claimed = claim_job(worker=worker)
    assert claimed is not None and claimed.pk == job.pk
    clock = FakeClock(start_s=1_000.0)
    fetcher = fetcher_for(clock)
    sleeps = Sleeps(clock)
    ended = run_on_loop(
        run_job(
            claimed,
            worker=worker,
            fetch_page=fetcher,
            robots=robots,
            host_delay_s=host_delay_s,
            clock=clock,
            sleep=sleeps,
        )
    )
    return ended, fetcher, sleeps


def pages_of(job: CrawlJob) -> dict[str, tuple[str, int, str]]:
    return {
        url: (state, depth, skip_reason)
        for url, state, depth, skip_reason in CrawlPage.objects.filter(job=job).values_list(
            "url", "state", "depth", "skip_reason"
        )
    }


def test_run_job_fetches_each_page_in_scope_once_and_skips_what_robots_refuse():
    robots = Robots(disallow=("/nobots",))
    job, fetcher, sleeps = crawl(
        {
            "max_depth": 2,
            "include": [r"^http://site\.test/(a|b|nobots|private)"],
            "exclude": [r"/private/"],
        },
        lambda clock: GraphFetcher(SITE, clock=clock),
        robots=robots,
    )
    assert fetcher.fetched == [
        "http://site.test/",
        "http://site.test/a",
        "http://site.test/b",
        "http://site.test/a/1",
        "http://site.test/b/1",
    ]
    assert pages_of(job) == {
        "http://site.test/": ("fetched", 0, ""),
        "http://site.test/a": ("fetched", 1, ""),
        "http://site.test/b": ("fetched", 1, ""),
        "http://site.test/nobots": ("skipped", 1, "robots"),
        "http://site.test/a/1": ("fetched", 2, ""),
        "http://site.test/b/1": ("fetched", 2, ""),
    }
    assert robots.asked == [
        "http://site.test/",
        "http://site.test/a",
        "http://site.test/b",
        "http://site.test/nobots",
        "http://site.test/a/1",
        "http://site.test/b/1",
    ]
    # One host, a second between fetches; the robots skip waits for nothing.
    assert sleeps.waits == [1.0, 1.0, 1.0, 1.0]
    assert (job.state, job.stop_reason) == ("done", "frontier empty")
    assert (job.pages_fetched, job.pages_failed, job.pages_skipped) == (5, 0, 1)
    assert (job.units, job.cost_micro) == (5, 5 * PAGE_COST_MICRO)
    assert job.bytes == sum(len(f"text of {url}") for url in fetcher.fetched)
    assert job.finished_at is not None and job.lease_until is None
    assert len(set(fetcher.request_ids)) == 5
    stored = CrawlPage.objects.get(job=job, url="http://site.test/a")
    assert (stored.text, stored.markdown, stored.html) == ("text of http://site.test/a", "", "")
    assert stored.request_id == fetcher.request_ids[1]
    assert CrawlPage.objects.get(job=job, url="http://site.test/nobots").request_id == ""


def test_run_job_waits_per_host_for_the_larger_of_its_delay_and_robots_crawl_delay():
    graph = {
        "http://a.test/": ["http://b.test/", "http://a.test/2", "http://b.test/2"],
    }
    robots = Robots(delays={"b.test": 3.0, "a.test": 0.5})
    job, fetcher, sleeps = crawl(
        {"seed_url": "http://a.test/", "same_host": False},
        lambda clock: GraphFetcher(graph, clock=clock, fetch_s=0.25),
        robots=robots,
    )
    assert fetcher.fetched == [
        "http://a.test/",
        "http://b.test/",
        "http://a.test/2",
        "http://b.test/2",
    ]
    # a/ ends at 0.25; b/ (a first visit) ends at 0.5; a/2 waits 0.25 + 1.0 - 0.5 = 0.75
    # and ends at 1.5; b/2 waits 0.5 + 3.0 (b's crawl-delay) - 1.5 = 2.0.
    assert sleeps.waits == [0.75, 2.0]
    assert (job.state, job.pages_fetched) == ("done", 4)


def test_run_job_fetches_every_page_when_no_robots_check_is_given():
    # The caller gives none when robots.txt does not apply (gateway/web/crawler.py decides).
    job, fetcher, _ = crawl(
        {"max_depth": 1, "respect_robots": False, "include": [r"/(a|b)$"]},
        lambda clock: GraphFetcher(SITE, clock=clock),
        robots=None,
    )
    assert fetcher.fetched == ["http://site.test/", "http://site.test/a", "http://site.test/b"]
    assert (job.state, job.pages_fetched, job.pages_skipped) == ("done", 3, 0)


def test_run_job_stops_at_max_pages_with_the_frontier_bounded():
    graph = {"http://site.test/": [f"/p{i}" for i in range(10)]}
    job, fetcher, _ = crawl(
        {"max_pages": 4}, lambda clock: GraphFetcher(graph, clock=clock), host_delay_s=0.0
    )
    assert fetcher.fetched == ["http://site.test/"] + [f"http://site.test/p{i}" for i in range(3)]
    assert (job.state, job.stop_reason) == ("done", "max_pages reached")
    assert CrawlPage.objects.filter(job=job).count() == 4
    assert (job.pages_fetched, job.units, job.cost_micro) == (4, 4, 4 * PAGE_COST_MICRO)


def test_a_stop_from_the_fetcher_ends_the_job_with_the_page_back_in_the_queue():
    async def stop_at_b(job, page):
        if page.url == "http://site.test/b":
            raise StopCrawl("budget_exhausted", "daily unit budget exhausted")

    job, fetcher, _ = crawl(
        {"max_depth": 1, "include": [r"/(a|b|c)$"]},
        lambda clock: GraphFetcher(SITE, clock=clock, on_fetch=stop_at_b),
    )
    assert fetcher.fetched == ["http://site.test/", "http://site.test/a"]
    assert (job.state, job.stop_reason) == ("budget_exhausted", "daily unit budget exhausted")
    assert pages_of(job)["http://site.test/b"] == ("queued", 1, "")
    assert pages_of(job)["http://site.test/c"] == ("queued", 1, "")
    assert (job.pages_fetched, job.units, job.cost_micro) == (2, 2, 2 * PAGE_COST_MICRO)
    assert job.finished_at is not None


def test_cancelling_mid_run_stops_the_loop_after_the_page_in_flight():
    @off_loop
    def cancel(job):
        cancel_job(job.public_id, account=Account.objects.get(pk=job.account_id))

    async def cancel_at_a(job, page):
        if page.url == "http://site.test/a":
            await cancel(job)

    job, fetcher, _ = crawl(
        {"max_depth": 2}, lambda clock: GraphFetcher(SITE, clock=clock, on_fetch=cancel_at_a)
    )
    assert fetcher.fetched == ["http://site.test/", "http://site.test/a"]
    assert (job.state, job.stop_reason) == ("cancelled", "cancelled")
    # The page in flight was billed, so it is recorded and counted.
    assert pages_of(job)["http://site.test/a"] == ("fetched", 1, "")
    assert (job.pages_fetched, job.cost_micro) == (2, 2 * PAGE_COST_MICRO)


def test_a_worker_whose_job_was_taken_over_stops_and_leaves_it_to_the_new_holder():
    async def take_over_at_a(job, page):
        if page.url == "http://site.test/a":
            expire = CrawlJob.objects.filter(pk=job.pk).update
            await off_loop(expire)(lease_until=timezone.now() - timedelta(seconds=1))
            assert (await off_loop(claim_job)(worker="w2")).pk == job.pk

    job, fetcher, _ = crawl(
        {"max_depth": 2}, lambda clock: GraphFetcher(SITE, clock=clock, on_fetch=take_over_at_a)
    )
    assert fetcher.fetched == ["http://site.test/", "http://site.test/a"]
    assert (job.state, job.worker, job.finished_at) == ("running", "w2", None)


SECRET_TEXT = "<p>" + "secret page text" + "</p>"  # not on the raising line: tracebacks quote it


def test_an_unexpected_fetcher_error_fails_the_page_and_the_crawl_goes_on(caplog):
    async def break_at_a(job, page):
        if page.url == "http://site.test/a":
            raise RuntimeError(SECRET_TEXT)

    with caplog.at_level(logging.ERROR, logger="webfetch.crawl"):
        job, fetcher, _ = crawl(
            {"max_depth": 1, "include": [r"/(a|b)$"]},
            lambda clock: GraphFetcher(SITE, clock=clock, on_fetch=break_at_a),
        )
    assert fetcher.fetched == ["http://site.test/", "http://site.test/b"]
    failed = CrawlPage.objects.get(job=job, url="http://site.test/a")
    assert (failed.state, failed.error_code) == ("failed", "internal")
    assert len(failed.request_id) == 32  # the id its usage row would carry, if it was billed
    assert (job.state, job.pages_fetched, job.pages_failed) == ("done", 2, 1)
    assert "RuntimeError" in caplog.text and job.public_id in caplog.text
    assert "secret page text" not in caplog.text


def test_a_broken_robots_check_fails_the_page_unfetched_and_the_crawl_goes_on(caplog):
    class BrokenRobots(Robots):
        async def __call__(self, url):
            if url.endswith("/a"):
                raise OSError(SECRET_TEXT)
            return await super().__call__(url)

    with caplog.at_level(logging.ERROR, logger="webfetch.crawl"):
        job, fetcher, _ = crawl(
            {"max_depth": 1, "include": [r"/(a|b)$"]},
            lambda clock: GraphFetcher(SITE, clock=clock),
            robots=BrokenRobots(),
        )
    assert fetcher.fetched == ["http://site.test/", "http://site.test/b"]
    failed = CrawlPage.objects.get(job=job, url="http://site.test/a")
    assert (failed.state, failed.error_code, failed.units) == ("failed", "robots_error", 0)
    assert (job.state, job.pages_fetched, job.pages_failed) == ("done", 2, 1)
    assert "the robots check raised OSError" in caplog.text
    assert "secret page text" not in caplog.text


def test_run_job_on_a_job_it_does_not_hold_fetches_nothing():
    from tests.webfetch.conftest import make_crawl_tenant
    from webfetch.jobs import create_job

    tenant = make_crawl_tenant()
    create_job(
        account=tenant.account,
        group=tenant.group,
        api_key=None,
        seed_url="http://site.test/",
        max_pages=5,
        max_depth=1,
    )
    job = claim_job(worker="holder")
    clock = FakeClock()
    fetcher = GraphFetcher(SITE, clock=clock)
    ended = run_on_loop(
        run_job(job, worker="intruder", fetch_page=fetcher, robots=None, clock=clock)
    )
    assert fetcher.fetched == []
    assert (ended.state, ended.worker) == ("running", "holder")
