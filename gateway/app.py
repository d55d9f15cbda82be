"""The proxy hot path: a lean ASGI application for /v1 and /internal (and health, metrics).

`config/asgi.py` mounts it in front of Django's ASGI application, which keeps serving the
admin and the tenant API. One request runs: meter -> auth -> validate -> limits and budget
-> plan -> orchestrator -> settle, the steps below in that order.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

import orjson
from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST

from billing.ledger import CallerBudget
from core import errors, metrics
from gateway import idempotency
from gateway.context import Meter, RequestContext
from gateway.health import readiness
from gateway.limits import Scope as LimitScope
from gateway.orchestrator import fold_stream_chunk
from gateway.plan import build_plan, prompt_bound
from gateway.recording import record_and_release, usage_row
from gateway.runtime import runtime
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.types import ChatRequest, StreamResult
from usage.pseudonym import caller_label, window_id

log = logging.getLogger(__name__)

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

JSON = (b"content-type", b"application/json")
SSE = (b"content-type", b"text/event-stream")
NO_CACHE = (b"cache-control", b"no-cache")
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
FALLBACK_HEADER = b"x-tollgate-fallback"
CALLER_HEADER = b"x-tollgate-caller"


class Exchange:
    """One HTTP exchange: metered receive/send, the request's headers, and replies."""

    __slots__ = (
        "scope",
        "_receive",
        "_send",
        "meter",
        "headers",
        "started",
        "request_id",
        "client_request_id",
        "caller_header",
        "disconnected",
        "_watcher",
        "idem",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.meter = Meter()
        self.headers = dict(scope["headers"])
        self.started = False
        self.disconnected = False
        self._watcher: asyncio.Task | None = None
        self.idem: idempotency.Claim | None = None  # keeps the answer of a keyed request
        # The minted id alone keys the request's books; the client's id is only a label.
        self.request_id = uuid.uuid4().hex
        given = self.headers.get(b"x-request-id", b"").decode("latin-1")
        self.client_request_id = given if REQUEST_ID_OK.match(given) else ""
        self.caller_header: bytes | None = None

    async def read_body(self) -> bytes:
        """Read the body, counting its bytes, refusing past the size cap (LM-2013)."""
        cap = settings.TOLLGATE["MAX_BODY_BYTES"]
        declared = self.headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise errors.BodyTooLarge(f"Request body is over the {cap}-byte cap.")
        parts = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                raise asyncio.CancelledError()
            body = message.get("body", b"")
            size += len(body)
            self.meter.bytes_in += len(body)
            if size > cap:
                raise errors.BodyTooLarge(f"Request body is over the {cap}-byte cap.")
            parts.append(body)
            if not message.get("more_body"):
                return b"".join(parts)

    def watch_disconnect(self, on_disconnect: Callable[[], None]) -> None:
        """Notice a client leaving (after the body was read) without polling."""

        async def watch() -> None:
            while True:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self.disconnected = True
                    on_disconnect()
                    return

        self._watcher = asyncio.create_task(watch())

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        if self.idem is not None:
            self.idem.on_start(status, headers)
        await self._send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    *headers,
                    (b"x-request-id", (self.client_request_id or self.request_id).encode()),
                    (b"x-tollgate-request-id", self.request_id.encode()),
                    *(
                        [(b"x-tollgate-caller-label", self.caller_header)]
                        if self.caller_header
                        else []
                    ),
                ],
            }
        )

    async def body(self, data: bytes, *, more: bool) -> None:
        if self.idem is not None:  # even for a client gone: a non-streamed answer is kept
            await self.idem.on_body(data, more=more)
        if self.disconnected:
            return
        self.meter.bytes_out += len(data)
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def reply(
        self, status: int, data: bytes, headers: list[tuple[bytes, bytes]] = ()
    ) -> None:
        await self.start(status, [JSON, *headers])
        await self.body(data, more=False)

    async def refuse(self, exc: errors.GatewayError) -> None:
        await self.reply(exc.status, exc.body(), exc.headers())


def bearer(headers: dict[bytes, bytes]) -> str | None:
    """Return the credential from `Authorization: Bearer` or `x-api-key`."""
    auth = headers.get(b"authorization")
    if auth is not None:
        scheme, _, value = auth.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    api_key = headers.get(b"x-api-key")
    return api_key.decode("latin-1").strip() if api_key else None


# ---------------------------------------------------------------- the chat pipeline


SHAPES = {"chat": openai_shape, "messages": anthropic_shape}


async def chat(ex: Exchange, endpoint: str) -> None:
    """Serve /v1/chat/completions (endpoint "chat") or /v1/messages (endpoint "messages")."""
    ctx = RequestContext(
        request_id=ex.request_id,
        client_request_id=ex.client_request_id,
        endpoint=endpoint,
        meter=ex.meter,
    )
    shape = SHAPES[endpoint]
    try:
        ctx.principal = await runtime.principals.for_secret(
            bearer(ex.headers), client=ex.scope.get("client")
        )
        body = await ex.read_body()
        data = parse_json(body)
        fallback = ex.headers.get(FALLBACK_HEADER)
        req = shape.parse_request(data, fallback_header=fallback.decode() if fallback else None)
        label_caller(ex, ctx, req)
        # Keyed requests only: no database work for the others.
        if idempotency.HEADER in ex.headers and await idempotency.begin(ex, ctx, body):
            return  # a duplicate: the stored answer was replayed
        await serve(ex, ctx, req, shape)
    except errors.GatewayError as exc:
        await fail(ex, ctx, exc)
    except asyncio.CancelledError:
        if not ex.disconnected:
            raise
        asyncio.current_task().uncancel()  # our own watcher's cancel: finish the books
        ctx.status, ctx.error_code = 499, "client_closed"
        await finish(ex, ctx)
    finally:
        if ex.idem is not None:
            await ex.idem.release()  # no answer went out (client gone, a crash): free the key


def label_caller(ex: Exchange, ctx: RequestContext, req: ChatRequest) -> None:
    """Pseudonymise the end user (header first, then the body's field); the raw id stops here."""
    header = ex.headers.get(CALLER_HEADER)
    raw = header.decode("latin-1") if header else req.caller_id
    ctx.caller_label = caller_label(raw)
    if raw:  # never dropped silently: the client is told the label, or that there is none
        ex.caller_header = ctx.caller_label.encode() if ctx.caller_label else b"dropped"


def parse_json(body: bytes) -> dict:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.InvalidRequest("Body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise errors.InvalidRequest("Body must be a JSON object.")
    return data


async def serve(ex: Exchange, ctx: RequestContext, req: ChatRequest, shape) -> None:
    """Admit, plan and run one validated request, then settle it."""
    ctx.req = req
    ctx.streamed = req.stream
    ctx.plan = build_plan(req, ctx.principal, runtime.catalog, runtime.pools.get)
    first = ctx.plan.links[0] if ctx.plan.links else None
    admission = await runtime.limiter.admit(
        request_id=ctx.request_id,
        group_id=ctx.principal.group_id,
        scopes=limit_scopes(ctx),
        concurrency=ctx.principal.group_concurrency,
        breaker_key=runtime.breakers.redis_key(first.breaker_key, first.offer.name)
        if first is not None and first.attempts and not first.locked
        else None,
        lease_s=max((link.offer.profile.timeout_s for link in ctx.plan.links), default=60) + 30,
        # Reserved in the token counts until the finish trues it up: a burst cannot pass TPM.
        tokens_estimate=prompt_bound(req)
        + max((link.max_tokens for link in ctx.plan.links), default=0),
    )
    ctx.admission = admission
    # A client leaving cancels a stream at once; a non-streamed call runs to its answer (its
    # usage is what the vendor bills) but nothing more is counted as sent to the client.
    ex.watch_disconnect(asyncio.current_task().cancel if req.stream else lambda: None)
    metrics.IN_FLIGHT.inc()
    try:
        if ctx.principal.has_budget or ctx.caller_budgeted:
            await runtime.escrow.hold_budget(
                ctx, ctx.plan.budget_estimate_micro, caller_budget(ctx)
            )
        if req.stream:
            await stream_answer(ex, ctx, req, shape)
        else:
            try:
                async with asyncio.timeout(deadline_left_s(ctx)):
                    completion = await runtime.orchestrator.complete(ctx)
            except TimeoutError:
                raise errors.UpstreamTimeout("The request passed its deadline.") from None
            ctx.usage = completion.usage
            body = shape.render_completion(completion, request_id=answer_id(ctx, shape))
            await finish(
                ex,
                ctx,
                final=body,
                headers=[JSON, *admission.headers(completion.usage.total_tokens)],
                status=200,
            )
    finally:
        metrics.IN_FLIGHT.dec()
        await release_admission(ctx)  # an error path: before the refusal is sent


def answer_id(ctx: RequestContext, shape) -> str:
    """Return the id an answer names: trusted internal callers get back their own."""
    return ctx.client_request_id if shape is InternalShape else ctx.request_id


def deadline_left_s(ctx: RequestContext) -> float:
    """Return what is left of the request's overall deadline (reservations outlive it)."""
    return ctx.started + settings.TOLLGATE["REQUEST_DEADLINE_S"] - time.monotonic()


async def release_admission(ctx: RequestContext) -> None:
    """Free the request's slots and count its real tokens, once.

    Done before the client sees the end of the answer, so its next request is judged with
    these tokens counted and the slot free (X-Tokens-Remaining says what that one will see).
    """
    admission, ctx.admission = ctx.admission, None
    if admission is not None:
        await runtime.limiter.finish(admission, tokens=ctx.usage.total_tokens)


def caller_budget(ctx: RequestContext) -> CallerBudget | None:
    """Return the end caller's budget bucket for this label window, if the group sets one."""
    if not ctx.caller_budgeted:
        return None
    return CallerBudget(
        group_id=ctx.principal.group_id,
        label=ctx.caller_label,
        period=window_id(),
        budget_max_micro=ctx.principal.caller_budget_max_micro,
    )


def limit_scopes(ctx: RequestContext):
    principal = ctx.principal
    scopes = []
    if principal.api_key_id is not None:
        scopes.append(
            LimitScope(
                f"key:{principal.api_key_id}", principal.key_rpm or 0, principal.key_tpm or 0
            )
        )
    scopes.append(
        LimitScope(
            f"group:{principal.group_id}", principal.group_rpm or 0, principal.group_tpm or 0
        )
    )
    if ctx.caller_label and (principal.caller_rpm or principal.caller_tpm):
        scopes.append(
            LimitScope(
                f"caller:{principal.group_id}:{ctx.caller_label}",
                principal.caller_rpm or 0,
                principal.caller_tpm or 0,
            )
        )
    return tuple(scopes)


async def stream_answer(ex: Exchange, ctx: RequestContext, req: ChatRequest, shape) -> None:
    task = asyncio.current_task()
    try:
        async with asyncio.timeout(deadline_left_s(ctx)):
            stream = await runtime.orchestrator.open_stream(ctx)
    except TimeoutError:
        raise errors.UpstreamTimeout("The request passed its deadline.") from None
    model = ctx.served_model or req.model  # the model that serves, maybe a fallback link
    if shape is openai_shape:
        renderer = openai_shape.StreamRenderer(
            request_id=ctx.request_id, model=model, include_usage=req.include_usage
        )
    else:
        renderer = shape.StreamRenderer(request_id=answer_id(ctx, shape), model=model)
    result = StreamResult(prompt_tokens_estimate=prompt_bound(req))
    await ex.start(200, [SSE, NO_CACHE, *ctx.admission.headers()])
    await ex.body(renderer.start(), more=True)
    try:
        async with asyncio.timeout(deadline_left_s(ctx)):
            async for chunk in stream:
                fold_stream_chunk(result, chunk)
                data = renderer.chunk(chunk)
                if data:
                    await ex.body(data, more=True)
    except TimeoutError:
        stopped = errors.UpstreamTimeout("The stream passed the request deadline.")
        await stream_broke(ex, ctx, result, renderer, stopped)
        return
    except asyncio.CancelledError:
        if not ex.disconnected:
            raise
        task.uncancel()
        ctx.usage = result.usage_or_estimate()
        ctx.status, ctx.error_code = 499, "client_closed"
        await finish(ex, ctx)
        return
    except errors.GatewayError as exc:
        await stream_broke(ex, ctx, result, renderer, exc)
        return
    except Exception as exc:  # ProviderError after the first chunk: end with an error event
        gateway_error = (
            errors.UpstreamTimeout()
            if getattr(exc, "timeout", False)
            else errors.UpstreamFailed("The upstream stream broke.")
        )
        await stream_broke(ex, ctx, result, renderer, gateway_error)
        return
    ctx.usage = result.usage
    await finish(ex, ctx, final=renderer.finish(result.finish_reason or "stop", result.usage))


async def stream_broke(ex, ctx, result: StreamResult, renderer, exc: errors.GatewayError) -> None:
    """Never retry after the first chunk: tell the client in-band and end the stream."""
    ctx.usage = result.usage_or_estimate()
    ctx.status, ctx.error_code = exc.status, exc.code
    await finish(ex, ctx, final=renderer.error(exc))


async def fail(ex: Exchange, ctx: RequestContext, exc: errors.GatewayError) -> None:
    ctx.status, ctx.error_code = exc.status, exc.code
    if ex.started:
        await finish(ex, ctx)
        return
    await finish(ex, ctx, final=exc.body(), headers=[JSON, *exc.headers()], status=exc.status)


async def finish(
    ex: Exchange,
    ctx: RequestContext,
    *,
    final: bytes | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    status: int | None = None,
) -> None:
    """Record the request (before the client sees its end), send the last bytes, settle."""
    ex.stop_watching()
    predicted_out = len(final) if final is not None and not ex.disconnected else 0
    row = usage_row(ctx, bytes_out=ex.meter.bytes_out + predicted_out)
    await record_and_release(runtime, ctx, row)
    try:
        if final is not None:
            if not ex.started:
                await ex.start(status or ctx.status, headers or [JSON])
            await ex.body(final, more=False)
        elif ex.started:
            await ex.body(b"", more=False)
    finally:
        metrics.REQUESTS.labels(ctx.endpoint, str(ctx.status), ctx.error_code or "ok").inc()


# ---------------------------------------------------------------- models, internal, health


async def list_models(ex: Exchange) -> None:
    try:
        principal = await runtime.principals.for_secret(
            bearer(ex.headers), client=ex.scope.get("client")
        )
    except errors.GatewayError as exc:
        await ex.refuse(exc)
        return
    names = [name for name in runtime.catalog.model_names() if principal.may_use(name)]
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "tollgate"} for name in names]
    await ex.reply(200, orjson.dumps({"object": "list", "data": data}))


def internal_authorized(headers: dict[bytes, bytes]) -> bool:
    token = settings.GATEWAY_INTERNAL_TOKEN
    given = bearer(headers)
    return (
        bool(token)
        and given is not None
        and hmac.compare_digest(given.encode("latin-1"), token.encode())
    )


async def internal(ex: Exchange, action: str) -> None:
    """Serve /internal/complete, /internal/stream and /internal/decide for trusted services."""
    ctx = RequestContext(request_id=ex.request_id, endpoint=f"internal.{action}", meter=ex.meter)
    try:
        if not internal_authorized(ex.headers):
            raise errors.Unauthorized("Missing or wrong internal token.")
        data = parse_json(await ex.read_body())
        request_id = data.get("request_id")
        if not isinstance(request_id, str) or not REQUEST_ID_OK.match(request_id):
            raise errors.InvalidRequest("'request_id' is required (1-64 of [A-Za-z0-9._:-]).")
        ex.client_request_id = ctx.client_request_id = request_id  # a label, like X-Request-Id
        ctx.principal = await runtime.principals.for_group(data.get("group"))
        req = openai_shape.parse_request(
            {k: v for k, v in data.items() if k not in ("group", "request_id")}
        )
        if action == "decide":
            plan = build_plan(req, ctx.principal, runtime.catalog, runtime.pools.get)
            await ex.reply(200, orjson.dumps({"request_id": request_id, **plan.as_json()}))
            return
        if action == "stream":
            req = _replace_stream(req, True)
            await serve(ex, ctx, req, InternalShape)
        else:
            req = _replace_stream(req, False)
            await serve(ex, ctx, req, InternalShape)
    except errors.GatewayError as exc:
        if ctx.principal is None:
            await ex.refuse(exc)
        else:
            await fail(ex, ctx, exc)


def _replace_stream(req: ChatRequest, stream: bool) -> ChatRequest:
    return replace(req, stream=stream)


class InternalShape:
    """The internal routes' own answer shape: JSON, or SSE `token` events then `done`."""

    @staticmethod
    def render_completion(c, *, request_id: str) -> bytes:
        return orjson.dumps(
            {
                "request_id": request_id,
                "model": c.model,
                "content": c.text,
                "finish_reason": c.finish_reason,
                "usage": {
                    "input_tokens": c.usage.input_tokens,
                    "output_tokens": c.usage.output_tokens,
                },
            }
        )

    class StreamRenderer:
        def __init__(self, *, request_id: str, model: str, **_: object) -> None:
            self._request_id, self._model = request_id, model

        def start(self) -> bytes:
            return b""

        def chunk(self, chunk) -> bytes:
            if not chunk.text:
                return b""
            return b"event: token\ndata: " + orjson.dumps({"text": chunk.text}) + b"\n\n"

        def finish(self, finish_reason: str, usage) -> bytes:
            return (
                b"event: done\ndata: "
                + orjson.dumps(
                    {
                        "request_id": self._request_id,
                        "model": self._model,
                        "finish_reason": finish_reason,
                        "usage": {
                            "input_tokens": usage.input_tokens,
                            "output_tokens": usage.output_tokens,
                        },
                    }
                )
                + b"\n\n"
            )

        def error(self, exc) -> bytes:
            return b"event: error\ndata: " + exc.body() + b"\n\n"


async def reload_config(ex: Exchange) -> None:
    """Reload provider config and pools and drop cached callers now (operators, tests)."""
    if not internal_authorized(ex.headers):
        await ex.refuse(errors.Unauthorized("Missing or wrong internal token."))
        return
    runtime.principals.clear()
    await runtime.reload()
    await ex.reply(200, orjson.dumps({"reloaded": True, "models": runtime.catalog.model_names()}))


async def healthz(ex: Exchange) -> None:
    await ex.reply(200, b'{"status":"ok"}')


async def readyz(ex: Exchange) -> None:
    checks = await readiness(runtime)
    ok = all(checks.values())
    await ex.reply(200 if ok else 503, orjson.dumps({"ready": ok, "checks": checks}))


async def metrics_endpoint(ex: Exchange) -> None:
    """Serve every worker's metrics, behind TOLLGATE_METRICS_TOKEN when it is set."""
    token = settings.TOLLGATE["METRICS_TOKEN"]
    given = bearer(ex.headers) if token else None
    # Bytes: compare_digest refuses non-ASCII str, and a header may carry any latin-1.
    if token and (given is None or not hmac.compare_digest(given.encode(), token.encode())):
        await ex.refuse(errors.Unauthorized("Missing or wrong metrics token."))
        return
    body = await asyncio.to_thread(metrics.exposition)  # merging workers' files reads disk
    await ex.start(200, [(b"content-type", CONTENT_TYPE_LATEST.encode())])
    await ex.body(body, more=False)


ROUTES: dict[tuple[str, str], Callable[[Exchange], Awaitable[None]]] = {
    ("POST", "/v1/chat/completions"): lambda ex: chat(ex, "chat"),
    ("POST", "/v1/messages"): lambda ex: chat(ex, "messages"),
    ("GET", "/v1/models"): list_models,
    ("POST", "/internal/complete"): lambda ex: internal(ex, "complete"),
    ("POST", "/internal/stream"): lambda ex: internal(ex, "stream"),
    ("POST", "/internal/decide"): lambda ex: internal(ex, "decide"),
    ("POST", "/internal/reload"): reload_config,
    ("GET", "/healthz"): healthz,
    ("GET", "/readyz"): readyz,
    ("GET", "/metrics"): metrics_endpoint,
}
GATEWAY_PREFIXES = ("/v1/", "/internal/")
GATEWAY_PATHS = frozenset(path for _, path in ROUTES)


def serves(path: str) -> bool:
    return path in GATEWAY_PATHS or path.startswith(GATEWAY_PREFIXES)


async def gateway_app(scope: Scope, receive: Receive, send: Send) -> None:
    await runtime.start()
    ex = Exchange(scope, receive, send)
    handler = ROUTES.get((scope["method"], scope["path"].rstrip("/") or "/"))
    if handler is None:
        await ex.refuse(errors.InvalidRequest(f"No route {scope['method']} {scope['path']}."))
        return
    try:
        await handler(ex)
    except errors.GatewayError as exc:
        if not ex.started:
            await ex.refuse(exc)
    except Exception:
        log.exception("unhandled error on %s (request %s)", scope["path"], ex.request_id)
        if not ex.started:
            await ex.refuse(errors.GatewayError("Internal error."))
    finally:
        ex.stop_watching()
