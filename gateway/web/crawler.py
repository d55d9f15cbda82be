"""Crawl jobs, the worker side: each page fetched and billed like a scrape, by a Celery worker.

A job is a row (webfetch/jobs.py) that a worker claims with SELECT ... FOR UPDATE SKIP
LOCKED; its pages are rows too, unique per (job, URL), so none is fetched twice. The worker
runs this process's gateway parts (gateway/runtime.py) on its own event loop, and each page
goes through the acquisition orchestrator with its own gateway-minted request id: the daily
unit budget, the budget hold and the wallet reservation before the call, a usage row after
(endpoint "web.crawl.page", the job's id as its client label). A page refused for money ends the
job as budget_exhausted; robots.txt is obeyed when the job or any of its profiles says so.

Crawl pages are billed to the job's group (its budget and wallet); a virtual key's own
budget bounds only the requests it makes itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from urllib.parse import urlsplit

from accounts.models import ApiKey, Group
from core import errors
from core.config import tollgate
from core.db import off_loop
from core.ids import time_ordered_id
from gateway import tracing
from gateway.auth import Principal
from gateway.context import Meter, WebContext
from gateway.holding import hold
from gateway.recording import record_and_release, usage_record
from gateway.runtime import runtime
from gateway.tasks import run_crawls
from gateway.web.pages import links_of, page_is_whole, page_json
from gateway.web.plan import build_web_plan
from gateway.web.types import SCRAPE, PageAnswer, WebRequest
from webfetch import jobs, selectors
from webfetch.crawl import PageOutcome, StopCrawl, run_job
from webfetch.fetcher import FetchRefused, limits_from_settings
from webfetch.models import CrawlJob, CrawlPage
from webfetch.robots import RobotsRules, robots_for

log = logging.getLogger(__name__)
PAGE_ENDPOINT = "web.crawl.page"  # a crawl page's usage row ("web.crawl": the job's request)
MONEY_STOPS = {
    errors.DailyUnitsExhausted: "daily unit budget exhausted",
    errors.BudgetExhausted: "budget exhausted",
    errors.WalletInsufficient: "wallet cannot cover",
}


# ---------------------------------------------------------------- the routes' side (sync)


def queue_job(
    principal: Principal, req: WebRequest, client_request_id: str, tags: tuple[str, ...] = ()
) -> dict:
    """Insert a crawl job and hand it to the workers; return its JSON (ValueError: refused)."""
    group = Group.objects.select_related("account").get(pk=principal.group_id)
    api_key = (
        ApiKey.objects.get(pk=principal.api_key_id) if principal.api_key_id is not None else None
    )
    job = jobs.create_job(
        account=group.account,
        group=group,
        api_key=api_key,
        seed_url=req.url,
        max_pages=req.crawl["max_pages"],
        max_depth=req.crawl["max_depth"],
        same_host=req.crawl["same_host"],
        include=req.crawl["include"],
        exclude=req.crawl["exclude"],
        render_js=req.render_js,
        formats=tuple(sorted(req.formats)),
        respect_robots=req.crawl["respect_robots"],
        client_request_id=client_request_id,
        tags=tags,
    )
    try:
        run_crawls.delay()
    except Exception as exc:  # the broker is down: the job waits for beat's next look
        log.warning("crawl %s queued, its hand-off failed (%s)", job.public_id, type(exc).__name__)
    return selectors.job_as_json(job)


def _job(public_id: str, account_id: int | None) -> CrawlJob | None:
    if account_id is None:  # a trusted internal caller
        return CrawlJob.objects.filter(public_id=public_id).first()
    return selectors.job_for_account(public_id, account_id)


def read(public_id: str, account_id: int | None, *, after: int | None, limit: int) -> dict | None:
    job = _job(public_id, account_id)
    if job is None:
        return None
    pages = selectors.job_pages(job, after_id=after, limit=limit)
    return {
        **selectors.job_as_json(job),
        "pages": [selectors.page_as_json(page, job.formats) for page in pages],
        "next_after": pages[-1].pk if len(pages) == limit else None,
    }


def cancel(public_id: str, account_id: int | None) -> dict | None:
    job = _job(public_id, account_id)
    if job is None:
        return None
    return selectors.job_as_json(jobs.cancel_job(job, account=job.account))


# ---------------------------------------------------------------- the worker's side


async def work(*, worker: str | None = None) -> int:
    """Claim and run jobs until none is queued; return how many ran (one worker's turn)."""
    worker = worker or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    await runtime.start()
    done = 0
    try:
        while True:
            job = await off_loop(jobs.claim_job)(worker=worker)
            if job is None:
                return done
            await run_job(
                job,
                worker=worker,
                fetch_page=PageFetcher(job),
                robots=RobotsCheck() if obeys_robots(job) else None,
            )
            done += 1
    finally:
        await runtime.stop()


def obeys_robots(job: CrawlJob) -> bool:
    """The job asks it, or an operator's profile that may serve it does (its setting)."""
    return job.respect_robots or any(
        p.respect_robots for p in runtime.catalog.web.values() if p.unit_for(SCRAPE)
    )


class RobotsCheck:
    """robots.txt per origin, fetched once per job through the SSRF-safe fetcher."""

    def __init__(self) -> None:
        self._rules: dict[str, RobotsRules] = {}

    async def __call__(self, url: str) -> tuple[bool, float | None]:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        rules = self._rules.get(origin)
        if rules is None:
            try:
                rules = await robots_for(
                    runtime.session,
                    origin,
                    limits=limits_from_settings(10.0),
                    user_agent=tollgate().web_user_agent,
                )
            except FetchRefused:
                return False, None  # an origin we may not reach is not crawled
            self._rules[origin] = rules
        return rules.allows(url), rules.crawl_delay_s


class PageFetcher:
    """Fetch and bill one page of a job: a scrape with its own request id and usage row."""

    def __init__(self, job: CrawlJob) -> None:
        self.job = job
        self.formats = frozenset(job.formats or ("text",)) | {"text"}

    async def __call__(self, job: CrawlJob, page: CrawlPage) -> PageOutcome:
        ctx = WebContext(
            request_id=time_ordered_id(),
            client_request_id=job.public_id,
            endpoint=PAGE_ENDPOINT,
            meter=Meter(),
        )
        ctx.trace = tracing.begin({}, ctx.started)  # each page its own trace, as a scrape's
        req = WebRequest(action=SCRAPE, url=page.url, render_js=job.render_js, formats=self.formats)
        try:
            ctx.principal = await runtime.principals.for_group(job.group_id)
            # The crawl request's tags; a job queued before jobs kept them: its group's defaults.
            ctx.tags = tuple(job.tags) or ctx.principal.default_tags
            plan = ctx.plan = build_web_plan(req, ctx.principal, runtime.catalog, runtime.pools.get)
            await hold(ctx, plan)
            async with asyncio.timeout(tollgate().web_action_timeout_s):
                served = await runtime.web.run(ctx, plan, req, keep_page=page_is_whole)
        except TimeoutError:
            ctx.status, ctx.error_code = 504, errors.UpstreamTimeout.code
            ctx.error_message = errors.UpstreamTimeout.default_message
            return self._failed(ctx, errors.UpstreamTimeout.code)
        except errors.GatewayError as exc:
            ctx.status, ctx.error_code, ctx.error_message = exc.status, exc.code, exc.message
            stop = next((why for kind, why in MONEY_STOPS.items() if isinstance(exc, kind)), None)
            if stop is not None:
                raise StopCrawl("budget_exhausted", stop) from None
            return self._failed(ctx, exc.code)
        finally:
            record = usage_record(ctx, bytes_out=0)
            await record_and_release(ctx, record)
            tracing.finished(ctx, record)
        answer = served.answer
        assert isinstance(answer, PageAnswer)  # a scrape is answered with a page
        body = await asyncio.to_thread(page_json, req, answer)
        links = await asyncio.to_thread(links_of, answer)
        return PageOutcome(
            state="fetched",
            status=body["status"],
            final_url=body["final_url"],
            content_type=body["content_type"],
            title=body["title"],
            text=body["text"],
            markdown=body.get("markdown", ""),
            html=body.get("html", ""),
            bytes=body["bytes"],
            provider=ctx.web.provider,
            units=ctx.web.units,
            cost_micro=ctx.web.cost_micro,
            request_id=ctx.request_id,
            error_code="",
            skip_reason="",
            links=links,
        )

    @staticmethod
    def _failed(ctx: WebContext, code: str) -> PageOutcome:
        web = ctx.web
        return PageOutcome(
            state="failed",
            status=None,
            final_url="",
            content_type="",
            title="",
            text="",
            markdown="",
            html="",
            bytes=0,
            provider=web.provider if web else "",
            units=web.units if web else 0,
            cost_micro=web.cost_micro if web else 0,
            request_id=ctx.request_id,
            error_code=code,
            skip_reason="",
            links=(),
        )
