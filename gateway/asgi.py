"""The proxy's ASGI plumbing: the metered exchange, the route table, and the small routes.

`config/asgi.py` mounts `gateway_app` in front of Django's ASGI application, which keeps
serving the admin and the tenant API. The model routes (chat, messages, responses,
embeddings, moderations) hand their exchange to the request pipeline (gateway/pipeline.py);
the rest (models, a stored response, health, metrics, reload) answer here.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from core import errors, metrics
from core.config import tollgate
from core.ids import time_ordered_id
from gateway import count_tokens, pipeline
from gateway.access import model_list
from gateway.auth import bearer, internal_authorized
from gateway.context import Meter, RequestContext
from gateway.health import readiness
from gateway.pipeline import JSON, REQUEST_ID_OK
from gateway.runtime import runtime
from gateway.shapes import anthropic as anthropic_shape
from gateway.tracing import overhead_header
from gateway.web import service as web

log = logging.getLogger(__name__)
# Routes of the Anthropic API: their refusals take its error shape (its SDK reads that).
ANTHROPIC_PATHS = ("/v1/messages",)

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


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
        "cache_status",
        "cache_age",
        "disconnected",
        "_watcher",
        "idem",
        "arrived",
        "timed",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.arrived = time.monotonic()
        self.meter = Meter()
        self.headers = dict(scope["headers"])
        self.started = False
        self.disconnected = False
        self._watcher: asyncio.Task | None = None
        self.idem = None  # an idempotency.Claim: keeps the answer of a keyed request
        # The minted id alone keys the request's books; the client's id is only a label.
        self.request_id = time_ordered_id()
        given = self.headers.get(b"x-request-id", b"").decode("latin-1")
        self.client_request_id = given if REQUEST_ID_OK.match(given) else ""
        self.caller_header: bytes | None = None
        # The response cache's word on this answer (gateway/cache/stage.py), on its routes.
        self.cache_status: bytes | None = None
        self.cache_age: int | None = None
        # A proxied request's context: its answer says the gateway's overhead (gateway/tracing).
        self.timed: RequestContext | None = None

    async def read_body(self) -> bytes:
        """Read the body, counting its bytes, refusing past the size cap (LM-2013).

        A client leaving meanwhile cancels the request (asyncio.CancelledError), like a
        client leaving later does.
        """
        cap = tollgate().max_body_bytes
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

    def watch_disconnect(self, on_disconnect: Callable[[], object]) -> None:
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
        # Let go of the watcher as it is cancelled: its CancelledError's traceback holds
        # `watch`'s frame, which holds this exchange; kept here, that would make a cycle of
        # the request's whole object graph, freed only by the cyclic collector.
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()

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
                    # Anthropic's SDK reads its `_request_id` here: our own id, as the books.
                    *(
                        [(b"request-id", self.request_id.encode())]
                        if self.scope["path"].startswith(ANTHROPIC_PATHS)
                        else []
                    ),
                    *(
                        [(b"x-tollgate-caller-label", self.caller_header)]
                        if self.caller_header
                        else []
                    ),
                    *(
                        [(b"x-tollgate-cache", self.cache_status)]
                        if self.cache_status is not None
                        else []
                    ),
                    *([(b"age", b"%d" % self.cache_age)] if self.cache_age is not None else []),
                    *([overhead_header(self.timed)] if self.timed is not None else []),
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
        self, status: int, data: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        await self.start(status, [JSON, *headers])
        await self.body(data, more=False)

    def error_body(self, exc: errors.GatewayError) -> bytes:
        """Return a refusal in the error shape of the API asked: Anthropic's on its routes."""
        if self.scope["path"].startswith(ANTHROPIC_PATHS):
            return anthropic_shape.error_body(exc)
        return exc.body()

    async def refuse(self, exc: errors.GatewayError) -> None:
        await self.reply(exc.status, self.error_body(exc), exc.headers())


# ---------------------------------------------------------------- the small routes


async def list_models(ex: Exchange) -> None:
    """List the canonical models and aliases the key may call, sorted by id, each with its
    `kind` ("chat", "embedding" or "moderation": which routes it answers); an alias with `alias_of`
    naming its model. The list is gateway/access.py's, the one enforcement refuses by; in
    Anthropic's shape when the request says `anthropic-version` (its SDK always does).
    """
    try:
        principal = await runtime.principals.for_secret(
            bearer(ex.headers), client=ex.scope.get("client")
        )
    except errors.GatewayError as exc:
        await ex.refuse(exc)
        return
    body = model_list(
        principal.access, runtime.catalog, anthropic=b"anthropic-version" in ex.headers
    )
    await ex.reply(200, orjson.dumps(body))


async def stored_response(ex: Exchange) -> None:
    """Answer `GET` / `DELETE /v1/responses/{id}`: Tollgate keeps no responses (its vendors
    are always sent `store: false`), so every id is unknown, whoever asks."""
    try:
        await runtime.principals.for_secret(bearer(ex.headers), client=ex.scope.get("client"))
    except errors.GatewayError as exc:
        await ex.refuse(exc)
        return
    response_id = ex.scope["path"][len(STORED_RESPONSES) :].split("/", 1)[0]
    await ex.refuse(
        errors.NotFound(
            f"No response {response_id[:64]!r}: Tollgate keeps no responses (store is false)."
        )
    )


async def reload_config(ex: Exchange) -> None:
    """Reload provider config and pools and drop cached principals now (operators, tests)."""
    if not internal_authorized(ex.headers):
        await ex.refuse(errors.Unauthorized("Missing or wrong internal token."))
        return
    runtime.principals.clear()
    # Django's cached content type ids too: a test's database flush makes them anew, and the
    # admin's history (LogEntry) written by this process would name ones gone.
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()
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
    token = tollgate().metrics_token
    given = bearer(ex.headers) if token else None
    # Bytes: compare_digest refuses non-ASCII str, and a header may carry any latin-1.
    if token and (given is None or not hmac.compare_digest(given.encode(), token.encode())):
        await ex.refuse(errors.Unauthorized("Missing or wrong metrics token."))
        return
    body = await asyncio.to_thread(metrics.exposition)  # merging workers' files reads disk
    await ex.start(200, [(b"content-type", CONTENT_TYPE_LATEST.encode())])
    await ex.body(body, more=False)


ROUTES: dict[tuple[str, str], Callable[[Exchange], Awaitable[None]]] = {
    ("POST", "/v1/chat/completions"): lambda ex: pipeline.serve(ex, pipeline.CHAT),
    ("POST", "/v1/messages"): lambda ex: pipeline.serve(ex, pipeline.MESSAGES),
    ("POST", "/v1/messages/count_tokens"): count_tokens.serve,
    ("POST", "/v1/responses"): lambda ex: pipeline.serve(ex, pipeline.RESPONSES),
    ("POST", "/v1/embeddings"): lambda ex: pipeline.serve(ex, pipeline.EMBEDDINGS),
    ("POST", "/v1/moderations"): lambda ex: pipeline.serve(ex, pipeline.MODERATIONS),
    ("GET", "/v1/models"): list_models,
    ("POST", "/internal/complete"): lambda ex: pipeline.serve(ex, pipeline.INTERNAL_COMPLETE),
    ("POST", "/internal/stream"): lambda ex: pipeline.serve(ex, pipeline.INTERNAL_STREAM),
    ("POST", "/internal/decide"): pipeline.decide,
    ("POST", "/internal/reload"): reload_config,
    ("POST", "/v1/web/scrape"): lambda ex: web.serve(ex, web.SCRAPE_ROUTE),
    ("POST", "/v1/web/search"): lambda ex: web.serve(ex, web.SEARCH_ROUTE),
    ("POST", "/v1/web/crawl"): lambda ex: web.serve(ex, web.CRAWL_ROUTE),
    ("POST", "/internal/scrape"): lambda ex: web.serve(ex, web.INTERNAL_SCRAPE),
    ("POST", "/internal/search"): lambda ex: web.serve(ex, web.INTERNAL_SEARCH),
    ("POST", "/internal/crawl"): lambda ex: web.serve(ex, web.INTERNAL_CRAWL),
    ("GET", "/healthz"): healthz,
    ("GET", "/readyz"): readyz,
    ("GET", "/metrics"): metrics_endpoint,
}
GATEWAY_PREFIXES = ("/v1/", "/internal/")
STORED_RESPONSES = "/v1/responses/"  # + an id: what a stored response would be read at
# + a crawl job's id: its state and pages (GET) or its cancellation (DELETE)
JOB_ROUTES = {"/v1/web/jobs/": False, "/internal/jobs/": True}
GATEWAY_PATHS = frozenset(path for _, path in ROUTES)


def serves(path: str) -> bool:
    return path in GATEWAY_PATHS or path.startswith(GATEWAY_PREFIXES)


def lacks_v1(path: str) -> bool:
    """Whether `path` is a gateway route without its /v1: an SDK given the bare host."""
    return ("/v1" + (path.rstrip("/") or "/")) in GATEWAY_PATHS


def base_urls(ex: Exchange) -> str:
    """Which base URL each SDK takes, on the host the client used."""
    # A client's Host header labels a message, nothing more: kept short and printable.
    host = ex.headers.get(b"host", b"").decode("latin-1")[:100]
    host = "".join(ch for ch in host if ch.isprintable()) or "this-gateway"
    scheme = "https" if ex.scope.get("scheme") == "https" else "http"
    return sdk_base_urls(f"{scheme}://{host}")


def sdk_base_urls(origin: str) -> str:
    """Which base URL each SDK takes on the gateway at `origin` (scheme://host[:port])."""
    return (
        f"Point the OpenAI SDK at base URL {origin}/v1 and the Anthropic SDK at "
        f"{origin} (it adds /v1 itself); the models are listed at GET /v1/models."
    )


def no_route(ex: Exchange) -> str:
    """No route here: say so, and which base URL the client most likely meant."""
    method, path = ex.scope["method"], ex.scope["path"]
    said = f"No route {method} {path[:200]}."
    if lacks_v1(path):
        return f"{said} The base URL is missing /v1. {base_urls(ex)}"
    if path.startswith("/v1/v1/"):
        return f"{said} The base URL ends in /v1 and the SDK added another. {base_urls(ex)}"
    return said


async def gateway_app(scope: Scope, receive: Receive, send: Send) -> None:
    await runtime.start()
    ex = Exchange(scope, receive, send)
    path = scope["path"].rstrip("/") or "/"
    handler = ROUTES.get((scope["method"], path))
    if (
        handler is None
        and path.startswith(STORED_RESPONSES)
        and scope["method"] in ("GET", "DELETE")
    ):
        handler = stored_response
    if handler is None and scope["method"] in ("GET", "DELETE"):
        for prefix, internal in JOB_ROUTES.items():
            if path.startswith(prefix) and path.count("/") == prefix.count("/"):
                handler = partial(web.job, internal=internal)
    if handler is None:
        await ex.refuse(errors.InvalidRequest(no_route(ex)))
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
