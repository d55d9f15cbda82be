"""The web routes: scrape and search served through the request pipeline's stages, crawl
jobs queued for the workers, and a job's state and pages read back.

A scrape or search runs the model path's stages with a web plan (gateway/pipeline.py):
accept (a virtual key, or the internal token and a group), plan, admit (rates and caps, one
Redis round trip), hold (the plan's worst case on the budgets, LM-4001), execute (the
acquisition orchestrator under the action's deadline), finish (the usage record journaled
and the admission released). A crawl is a job row (webfetch/jobs.py) whose pages the Celery
workers fetch through the same orchestrator (gateway/web/crawler.py), each page its own
usage row.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson

from core import errors, metrics
from core.config import tollgate
from core.db import off_loop
from gateway.admission import WEB, limit_scopes
from gateway.auth import bearer, require_internal
from gateway.context import RequestContext, WebContext
from gateway.holding import hold
from gateway.pipeline import (
    JSON,
    authenticate,
    finish,
    refusal,
    request_context,
)
from gateway.runtime import runtime
from gateway.shapes.common import split_tags
from gateway.stages import ACCEPTED, ADMITTED, CRASHED, Ending
from gateway.tags import TAG_HEADER, tag_request
from gateway.tracing import mark
from gateway.web import crawler, shape
from gateway.web.adapters import REFUSED_REASONS
from gateway.web.pages import page_is_whole, page_json
from gateway.web.plan import WebPlan, build_web_plan
from gateway.web.types import CRAWL, SCRAPE, SEARCH, PageAnswer, SearchAnswer, WebRequest
from webfetch.addresses import allowed_networks
from webfetch.fetcher import FetchRefused, destination

if TYPE_CHECKING:
    from gateway.asgi import Exchange


@dataclass(frozen=True, slots=True)
class WebEndpoint:
    name: str  # as usage records name it: "web.scrape", "internal.search", ...
    action: str
    internal: bool = False


SCRAPE_ROUTE = WebEndpoint("web.scrape", SCRAPE)
SEARCH_ROUTE = WebEndpoint("web.search", SEARCH)
CRAWL_ROUTE = WebEndpoint("web.crawl", CRAWL)
INTERNAL_SCRAPE = WebEndpoint("internal.scrape", SCRAPE, internal=True)
INTERNAL_SEARCH = WebEndpoint("internal.search", SEARCH, internal=True)
INTERNAL_CRAWL = WebEndpoint("internal.crawl", CRAWL, internal=True)


async def serve(ex: Exchange, endpoint: WebEndpoint) -> None:
    """Serve one scrape, search or crawl request; `finish` closes its books exactly once."""
    ctx = request_context(ex, endpoint.name, WebContext)
    ending = CRASHED
    try:
        req = await accept(ex, endpoint, ctx)
        if req.action == CRAWL:
            ending = await start_crawl(ctx, req)  # queued: each page has its own usage row
            return
        assert ctx.principal is not None, ACCEPTED
        plan = build_web_plan(req, ctx.principal, runtime.catalog, runtime.pools.get)
        ctx.plan = plan
        mark(ctx, "planned")
        await admit(ctx, plan)
        mark(ctx, "admitted")
        await hold(ctx, plan)
        mark(ctx, "held")
        ending = await execute(ctx, endpoint, plan, req)
    except errors.GatewayError as exc:
        ending = refusal(ex, exc)
    finally:
        await finish(ex, ctx, ending)


async def accept(ex: Exchange, endpoint: WebEndpoint, ctx: RequestContext) -> WebRequest:
    _, data = await authenticate(ex, ctx, internal=endpoint.internal, web=True)
    data, body_tags = split_tags(data)  # `metadata.tags`, as on the model routes
    req = shape.parse(endpoint.action, data)
    tag_request(ctx, ex.headers.get(TAG_HEADER), body_tags)
    return req


async def admit(ctx: RequestContext, plan: WebPlan) -> None:
    """Rates and caps (LM-3001 / LM-3003), as for model requests; a web action has no tokens."""
    principal = ctx.principal
    assert principal is not None, ACCEPTED
    ctx.admission = await runtime.limiter.admit(
        request_id=ctx.request_id,
        group_id=principal.group_id,
        scopes=limit_scopes(ctx),
        concurrency=principal.group_concurrency,
        lease_s=tollgate().web_action_timeout_s + 30,
        tokens_estimate=0,
        peek=None,
        bulkhead=WEB,  # web actions' own in-flight cap: slow sites never take chat's slots
    )
    metrics.IN_FLIGHT.inc()


async def execute(ctx: WebContext, endpoint: WebEndpoint, plan: WebPlan, req: WebRequest) -> Ending:
    try:
        async with asyncio.timeout(tollgate().web_action_timeout_s):
            served = await runtime.web.run(ctx, plan, req, keep_page=page_is_whole)
    except TimeoutError:
        raise errors.UpstreamTimeout("The web action passed its deadline.") from None
    # Trusted internal callers get their own id back; a tenant gets ours (its X-Request-Id is
    # echoed as a header, a label only).
    body: dict[str, Any] = {
        "request_id": ctx.client_request_id if endpoint.internal else ctx.request_id
    }
    answer = served.answer
    if req.action == SEARCH:
        assert isinstance(answer, SearchAnswer)  # a search's adapters answer searches
        body |= {"query": req.query, "results": list(answer.results)}
    else:
        assert isinstance(answer, PageAnswer)  # a scrape's adapters answer pages
        body |= await asyncio.to_thread(page_json, req, answer)
    body |= {
        "provider": ctx.web.provider,
        "served_by": ctx.web.served_by,
        "units": shape.units_json(ctx.web),
        "cost_micro": ctx.web.cost_micro,
    }
    assert ctx.admission is not None, ADMITTED
    return Ending(final=orjson.dumps(body), headers=(JSON, *ctx.admission.headers()))


# ---------------------------------------------------------------- crawl jobs


async def start_crawl(ctx: RequestContext, req: WebRequest) -> Ending:
    """Queue a crawl job (202 with its id); refused before queuing when nothing could fetch it
    (LM-2001), no one may pay for its pages (LM-3021), or its seed is a URL a scrape of it would
    refuse (LM-2001, the scrape's message)."""
    principal = ctx.principal
    assert principal is not None, ACCEPTED
    plan = build_web_plan(
        WebRequest(action=SCRAPE, url=req.url, render_js=req.render_js),
        principal,
        runtime.catalog,
        runtime.pools.get,
    )
    if not any(link.attempts for link in plan.links):
        # No one may pay for a page (no team key, platform serving off): each page would be
        # refused LM-3021 as a scrape is, so the job is refused instead of queued.
        names = ", ".join(link.profile.name for link in plan.links)
        raise errors.TeamKeysExhausted(f"No team key for {names} and platform serving is off.")
    await _check_seed(req.url)
    try:
        job = await off_loop(crawler.queue_job)(principal, req, ctx.client_request_id, ctx.tags)
    except ValueError as exc:
        raise errors.InvalidRequest(str(exc)) from None
    return Ending(status=202, final=orjson.dumps(job), headers=(JSON,))


async def _check_seed(url: str) -> None:
    """Resolve the seed and check every address as the fetcher checks a scrape's URL: a job
    whose seed no profile may fetch would fetch nothing. A name that does not resolve now is
    left to the job (a scrape of it is a retryable failure, not a refusal)."""
    try:
        await destination(url, allow=allowed_networks(tollgate().web_allow_nets))
    except FetchRefused as refused:
        if refused.reason in REFUSED_REASONS:
            raise errors.InvalidRequest(refused.message) from None


async def job(ex: Exchange, *, internal: bool) -> None:
    """GET a job (its state and a page of its pages) or DELETE it (cancel)."""
    public_id = ex.scope["path"].rstrip("/").rsplit("/", 1)[-1]
    if internal:
        require_internal(ex.headers, web=True)
        account_id = None
    else:
        principal = await runtime.principals.for_secret(
            bearer(ex.headers), client=ex.scope.get("client")
        )
        account_id = principal.account_id
    query = _query_params(ex)
    if ex.scope["method"] == "DELETE":
        found = await off_loop(crawler.cancel)(public_id, account_id)
    else:
        try:
            after = int(query["after"]) if "after" in query else None
            limit = int(query.get("limit", 20))
        except ValueError:
            raise errors.InvalidRequest("'after' and 'limit' must be integers.") from None
        if not 1 <= limit <= 100:
            raise errors.InvalidRequest("'limit' must be from 1 to 100.")
        found = await off_loop(crawler.read)(public_id, account_id, after=after, limit=limit)
    if found is None:  # another account's job is no job at all
        raise errors.NotFound(f"No crawl job {public_id[:64]!r}.")
    await ex.reply(200, orjson.dumps(found))


def _query_params(ex: Exchange) -> dict[str, str]:
    return dict(parse_qsl(ex.scope.get("query_string", b"").decode("latin-1")))
