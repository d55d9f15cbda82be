"""The request pipeline: one model request (chat, messages, responses, embeddings,
moderations) from its first byte to its usage record.

`serve` runs the stages below, in this order, each a function further down or, for the
ones a request the gateway makes itself also runs (gateway/subrequests.py), in
gateway/stages.py:

1. `accept`   who calls (a virtual key; or the internal token and a group) -> Principal;
              the body under its size cap, parsed by the endpoint's shape -> ModelRequest;
              the end user's id turned into a caller label. An Idempotency-Key then claims
              its key, or replays the stored answer and ends the request.
2. `plan`     the attempt plan, built once; it calls nothing -> Plan (`plan_request`).
3. `admit`    rate limits and caps in one Redis round trip, which also reads the first
              link's breaker -> Admission, and maybe that link's breaker Ticket.
4. `hold`     the budget hold on group, key and end caller (LM-4001): gateway/holding.py.
5. `execute`  the orchestrator runs the plan; the answer goes out as it comes, past the
              output guardrails (gateway/guard_output.py) -> Ending.
6. `finish`   in one `finally`: the usage record journaled and the admission released (one
              Redis round trip), then the last bytes. Refusals, vendor failures and a client
              leaving all end here, as an Ending; a client leaving is noticed in one place.

The plan comes before the limits (DESIGN lists them the other way round): the admission
reserves the plan's token estimate and the hold its worst case. Building it calls nothing,
so every refusal still comes before any vendor is paid.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import orjson

from core import errors, metrics
from gateway import idempotency, tracing
from gateway.auth import bearer, require_internal
from gateway.breakers import Ticket
from gateway.cache import stage as cache_stage
from gateway.context import ModelContext, RequestContext
from gateway.guard_output import answer_guard, guard_answer
from gateway.guarding import guard_input
from gateway.holding import hold
from gateway.plan import prompt_bound
from gateway.recording import record_and_release, usage_record
from gateway.runtime import runtime
from gateway.shapes import internal as internal_shape
from gateway.shapes.anthropic import ANTHROPIC_SHAPE
from gateway.shapes.embeddings import EMBEDDINGS_SHAPE
from gateway.shapes.internal import INTERNAL_SHAPE
from gateway.shapes.moderations import MODERATIONS_SHAPE
from gateway.shapes.openai import OPENAI_SHAPE
from gateway.shapes.protocols import ClientShape
from gateway.shapes.responses import RESPONSES_SHAPE
from gateway.stages import (
    ACCEPTED,
    ADMITTED,
    CLIENT_CLOSED,
    CRASHED,
    Ending,
    admit,
    deadline_left_s,
    end_books,
    plan_request,
)
from gateway.tags import TAG_HEADER, tag_request
from gateway.tracing import mark
from gateway.types import Chunk, ModelRequest, StreamResult
from usage.pseudonym import caller_label

if TYPE_CHECKING:  # the plumbing hands its exchange in; nothing here builds one
    from gateway.asgi import Exchange

JSON = (b"content-type", b"application/json")
SSE = (b"content-type", b"text/event-stream")
NO_CACHE = (b"cache-control", b"no-cache")
# A client's request id (X-Request-Id, or an internal caller's request_id): a label only.
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
FALLBACK_HEADER = b"x-tollgate-fallback"
BYPASS_HEADER = b"bypass"
CALLER_HEADER = b"x-tollgate-caller"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A route into the pipeline: its name in the books, its shape, who may call it."""

    name: str  # as usage records and metrics name it
    shape: ClientShape
    internal: bool = False  # trusted services: the internal token, a group, their own ids
    stream: bool | None = None  # set by an internal route; None: the client's body says
    cacheable: bool = True  # a public route's answers may be kept (internal ones never are)

    @property
    def cached(self) -> bool:
        """Say whether the response cache serves this route (the public ones that may)."""
        return self.cacheable and not self.internal


CHAT = Endpoint("chat", OPENAI_SHAPE)
MESSAGES = Endpoint("messages", ANTHROPIC_SHAPE)
RESPONSES = Endpoint("responses", RESPONSES_SHAPE)
EMBEDDINGS = Endpoint("embeddings", EMBEDDINGS_SHAPE)  # its shape never streams
# Never cached: a verdict is what the vendor's model says now (and OpenAI's is free).
MODERATIONS = Endpoint("moderations", MODERATIONS_SHAPE, cacheable=False)
INTERNAL_COMPLETE = Endpoint("internal.complete", INTERNAL_SHAPE, internal=True, stream=False)
INTERNAL_STREAM = Endpoint("internal.stream", INTERNAL_SHAPE, internal=True, stream=True)
INTERNAL_DECIDE = Endpoint("internal.decide", INTERNAL_SHAPE, internal=True)


@dataclass(frozen=True, slots=True)
class Accepted:
    request: ModelRequest
    body: bytes  # the raw body, for an Idempotency-Key's fingerprint


C = TypeVar("C", bound=RequestContext)


def request_context(ex: Exchange, endpoint_name: str, kind: type[C]) -> C:
    """Start a request's context: the gateway's id, the client's label, the byte meter, its
    trace (when sampled); its answer will say the gateway's overhead."""
    ex.timed = ctx = kind(
        request_id=ex.request_id,
        client_request_id=ex.client_request_id,
        endpoint=endpoint_name,
        meter=ex.meter,
        started=ex.arrived,
        trace=tracing.begin(ex.headers, ex.arrived),
    )
    return ctx


async def serve(ex: Exchange, endpoint: Endpoint) -> None:
    """Serve one model request: the stages in order, then `finish`, exactly once."""
    ctx = request_context(ex, endpoint.name, ModelContext)
    ending = CRASHED
    replayed = False
    if not endpoint.internal:  # every public answer says; the cache stage may say otherwise
        ex.cache_status = BYPASS_HEADER
    try:
        accepted = await accept(ex, endpoint, ctx)
        # Keyed requests only: no database work for the others.
        if idempotency.HEADER in ex.headers and not endpoint.internal:
            replayed = await idempotency.begin(ex, ctx, accepted.body)
            if replayed:
                return  # the stored answer went out: no slot, no hold, no record
        plan = plan_request(ctx, accepted.request)
        lookup = (
            cache_stage.prepare(runtime.cache, runtime.shared, ex, ctx, endpoint.name)
            if endpoint.cached
            else ()
        )
        mark(ctx, "planned")
        first_ticket = await admit(ctx, plan, also=lookup)
        mark(ctx, "admitted")
        hit = (
            await cache_stage.look_up(runtime.cache, ex, ctx, endpoint.name)
            if endpoint.cached
            else None
        )
        # A client leaving cancels a stream at once; a non-streamed call runs to its answer
        # (its usage is what the vendor bills), but nothing more is sent to the client.
        task = asyncio.current_task()
        assert task is not None  # serve runs in the server's task for the request
        ex.watch_disconnect(task.cancel if accepted.request.stream else _ignore)
        if hit is None:
            await hold(ctx, plan, first_ticket)
        else:  # the hit's price, not the vendor call's worst case
            await hold(ctx, plan, estimate_micro=hit.cost_micro, first=hit.attempt)
            await cache_stage.cover_hit(ctx, hit)
        mark(ctx, "held")
        ending = await execute(ex, ctx, endpoint, first_ticket, hit)
    except errors.GatewayError as exc:
        ending = refusal(ex, exc)
    except asyncio.CancelledError:
        if not ex.disconnected:
            raise
        task = asyncio.current_task()
        assert task is not None  # serve runs in the server's task for the request
        task.uncancel()  # our own watcher's cancel: finish the books
        ending = CLIENT_CLOSED
    finally:
        if not replayed:
            await finish(ex, ctx, ending)
        if ex.idem is not None:
            await ex.idem.release()  # no answer went out (client gone, a crash): free the key


async def decide(ex: Exchange) -> None:
    """Serve /internal/decide: the plan a request would run. It calls and records nothing."""
    ctx = ModelContext(request_id=ex.request_id, endpoint=INTERNAL_DECIDE.name, meter=ex.meter)
    try:
        accepted = await accept(ex, INTERNAL_DECIDE, ctx)
        plan = plan_request(ctx, accepted.request)
    except errors.GatewayError as exc:
        await ex.refuse(exc)
        return
    await ex.reply(200, orjson.dumps({"request_id": ctx.client_request_id, **plan.as_json()}))


# ---------------------------------------------------------------- 1. accept


async def accept(ex: Exchange, endpoint: Endpoint, ctx: ModelContext) -> Accepted:
    """Authenticate, read and validate the request; the raw end-user id stops here."""
    body, data = await authenticate(ex, ctx, internal=endpoint.internal)
    if endpoint.internal:
        ctx.req = internal_shape.parse_request(data, stream=endpoint.stream)
        tag_request(ctx, ex.headers.get(TAG_HEADER), ctx.req.tags)
    else:
        fallback = ex.headers.get(FALLBACK_HEADER)
        ctx.req = endpoint.shape.parse_request(
            data, fallback_header=fallback.decode() if fallback else None
        )
        tag_request(ctx, ex.headers.get(TAG_HEADER), ctx.req.tags)  # the header's, the body's
        label_caller(ex, ctx, ctx.req)
    ctx.req = await guard_input(ctx, ctx.req)  # before the plan, the hold and the cache key
    return Accepted(ctx.req, body)


async def authenticate(
    ex: Exchange, ctx: RequestContext, *, internal: bool, web: bool = False
) -> tuple[bytes, dict]:
    """Set who calls (a virtual key; or the internal token, web acquisition's with `web`, and
    the group its body names, whose `request_id` becomes the request's label) and return the
    body, raw and parsed."""
    if internal:
        require_internal(ex.headers, web=web)
        body = await ex.read_body()
        data = parse_json(body)
        request_id = data.get("request_id")
        if not isinstance(request_id, str) or not REQUEST_ID_OK.match(request_id):
            raise errors.InvalidRequest("'request_id' is required (1-64 of [A-Za-z0-9._:-]).")
        ex.client_request_id = ctx.client_request_id = request_id  # a label, like X-Request-Id
        ctx.principal = await runtime.principals.for_group(data.get("group"))
        return body, data
    ctx.principal = await runtime.principals.for_secret(
        bearer(ex.headers), client=ex.scope.get("client")
    )
    body = await ex.read_body()
    return body, parse_json(body)


def parse_json(body: bytes) -> dict:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.InvalidRequest("Body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise errors.InvalidRequest("Body must be a JSON object.")
    return data


def label_caller(ex: Exchange, ctx: RequestContext, req: ModelRequest) -> None:
    """Pseudonymise the end user (header first, then the body's field)."""
    header = ex.headers.get(CALLER_HEADER)
    raw = header.decode("latin-1") if header else req.caller_id
    ctx.caller_label = caller_label(raw)
    if raw:  # never dropped silently: the client is told the label, or that there is none
        ex.caller_header = ctx.caller_label.encode() if ctx.caller_label else b"dropped"


# ---------------------------------------------------------------- 2-4. plan, admit, hold
# gateway/stages.py (plan_request, admit) and gateway/holding.py (hold).


# ---------------------------------------------------------------- 5. execute


async def execute(
    ex: Exchange,
    ctx: ModelContext,
    endpoint: Endpoint,
    first_ticket: Ticket | None,
    hit: cache_stage.Hit | None = None,
) -> Ending:
    """Run the plan (or replay a cache hit) and send the answer as it comes; vendor failures
    arrive as GatewayError."""
    req, admission = ctx.req, ctx.admission
    assert req is not None, ACCEPTED
    assert admission is not None, ADMITTED
    if req.stream:
        if hit is not None:
            return await stream(ex, ctx, endpoint, cache_stage.hit_arrivals(hit, ctx))
        try:
            async with asyncio.timeout(deadline_left_s(ctx)):
                chunks = await runtime.orchestrator.open_stream(ctx, first_ticket=first_ticket)
        except TimeoutError:
            raise errors.UpstreamTimeout("The request passed its deadline.") from None
        return await stream(ex, ctx, endpoint, chunks)
    if hit is not None:
        completion = cache_stage.hit_completion(hit, req)
    else:
        try:
            async with asyncio.timeout(deadline_left_s(ctx)):
                completion = await runtime.orchestrator.complete(ctx, first_ticket=first_ticket)
        except TimeoutError:
            raise errors.UpstreamTimeout("The request passed its deadline.") from None
        if ctx.cache is not None:
            ctx.cache.completion = completion
    ctx.usage = completion.usage  # billed even when a guardrail blocks the answer
    completion = await guard_answer(ctx, completion)
    tracing.answered(ctx, completion.finish_reason, completion.text)
    return Ending(
        final=endpoint.shape.render_completion(
            completion, request_id=answer_id(ctx, endpoint), req=req
        ),
        headers=(
            JSON,
            *admission.headers(completion.usage.total_tokens, anthropic=endpoint is MESSAGES),
        ),
    )


async def stream(
    ex: Exchange, ctx: ModelContext, endpoint: Endpoint, chunks: AsyncIterator[list[Chunk]]
) -> Ending:
    """Stream the answer; once its first chunk is out, a failure is told in-band, not retried.
    The output guardrails see it first (gateway/guard_output.py)."""
    req, admission = ctx.req, ctx.admission
    assert req is not None, ACCEPTED
    assert admission is not None, ADMITTED
    served = ctx.served
    assert served is not None  # an open stream has its served attempt (the orchestrator's)
    renderer = endpoint.shape.stream_renderer(
        req, request_id=answer_id(ctx, endpoint), model=served.model
    )
    result = ctx.stream = StreamResult(prompt_tokens_estimate=prompt_bound(req))
    kept = cache_stage.collect_stream(ctx)  # the arrivals, when the answer is to be cached
    await ex.start(200, [SSE, NO_CACHE, *admission.headers(anthropic=endpoint is MESSAGES)])
    mark(ctx, "streaming")
    texts = tracing.answer_sink(ctx)  # the answer's text, only when the trace captures it
    guard = answer_guard(ctx)
    if guard is not None:
        chunks = guard.checked(chunks)
    try:
        async with asyncio.timeout(deadline_left_s(ctx)):
            async for arrived in chunks:
                if kept is not None:
                    kept.append(tuple(arrived))
                # What arrived together leaves together: one write, not one per chunk.
                out = []
                for chunk in arrived:
                    result.fold(chunk)
                    if texts is not None:
                        texts.append(chunk.text)
                    out.append(renderer.chunk(chunk))
                data = b"".join(out)
                if data:
                    await ex.body(data, more=True)
                if not ex.disconnected:  # a client that left is billed only what it was sent
                    result.delivered()
    except TimeoutError:
        broke = errors.UpstreamTimeout("The stream passed the request deadline.")
        return Ending.of_error(broke, final=renderer.error(broke))
    except errors.GatewayError as broke:
        return Ending.of_error(broke, final=renderer.error(broke))
    finally:
        if guard is not None:  # however it ended: a cut stream says it was not all seen
            guard.note(ctx)
    result.finished = True
    return Ending(final=renderer.finish(result.finish_reason or "stop", result.usage))


def answer_id(ctx: RequestContext, endpoint: Endpoint) -> str:
    """Return the id an answer names: trusted internal callers get back their own."""
    return ctx.client_request_id if endpoint.internal else ctx.request_id


def refusal(ex: Exchange, exc: errors.GatewayError) -> Ending:
    """End with our error body, or, when the answer already started, just end it."""
    if ex.started:
        return Ending.of_error(exc)
    return Ending.of_error(exc, final=ex.error_body(exc), headers=(JSON, *exc.headers()))


def _ignore() -> None:
    return None


# ---------------------------------------------------------------- 6. finish


async def finish(ex: Exchange, ctx: RequestContext, ending: Ending) -> None:
    """Record the request and release what it holds (before the client sees its end), then
    send its last bytes. The one place a request's books are closed."""
    ex.stop_watching()
    mark(ctx, "settling")
    await end_books(ctx, ending)
    final = ending.final
    predicted_out = len(final) if final is not None and not ex.disconnected else 0
    record = usage_record(ctx, bytes_out=ex.meter.bytes_out + predicted_out)
    kept = (
        cache_stage.answer_to_keep(
            runtime.cache, ctx, ok=ending.status == 200 and not ending.error_code
        )
        if isinstance(ctx, ModelContext) and ctx.cache is not None
        else None
    )
    # A kept answer rides with the usage journal when the cache shares its Redis.
    rides = (
        kept.command() if kept is not None and runtime.cache.rides_with(runtime.shared) else None
    )
    replies = await record_and_release(ctx, record, also=(rides,) if rides else ())
    mark(ctx, "settled")
    if kept is not None:  # stored before the client sees the end: the next request hits
        await cache_stage.keep(runtime.cache, kept, reply=replies[0] if replies else None)
    try:
        if final is not None:
            if not ex.started:
                await ex.start(ending.status, list(ending.headers) or [JSON])
            await ex.body(final, more=False)
        elif ex.started:
            await ex.body(b"", more=False)
    finally:
        metrics.labeled(
            metrics.REQUESTS, ctx.endpoint, str(ctx.status), ctx.error_code or "ok"
        ).inc()
        tracing.finished(ctx, record)  # its spans, built after its last byte went out
