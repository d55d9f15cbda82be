"""A vendor call's way through the stub: dispatch by path, key check, refusals, faults, and
delivery of the answer whole or streamed.

Faults
------
A streamed "piece" is a content token / JSON piece, a tool call's header or
argument half (OpenAI), or a ``content_block_delta`` (Anthropic).

* ``429``: status 429, ``Retry-After: <retry_after, default 1>``, vendor error.
* ``401`` / ``403``: that status, vendor error whose message echoes the key,
  and header ``x-stub-echo-key`` echoing the raw ``Authorization`` /
  ``x-api-key`` header value (deliberately leaky, to test the gateway).
* ``500``: status 500, vendor error.
* ``400`` / ``404`` / ``413`` / ``422``: the vendor refusing the request itself:
  that status, vendor error (OpenAI type ``invalid_request_error``; Anthropic
  ``invalid_request_error``, ``not_found_error``, ``request_too_large``,
  ``invalid_request_error``) whose message is the fault's ``message`` exactly as
  given (any string up to 10,000 characters, control characters included;
  default ``The request was refused (stub fault).``).  On the web routes the
  same status with ``{"error": {"message", "type"}}``.
* ``hang``: never answers (up to 3600 s; ends when the client disconnects).
* ``fail_before_first_token``: stream: 200 headers, then the connection is
  closed mid-body (incomplete chunked body).  Non-stream: connection closed
  without any response.
* ``fail_after_tokens``: stream: ``after_tokens`` (default 2) pieces, then the
  connection is closed (no finish chunk / usage / ``[DONE]`` /
  ``message_stop``).  Non-stream: like ``fail_before_first_token``.
* ``ignore_cap``: a vendor billing past the output cap it was sent: the call
  (chat completions, messages, Responses) is answered as if it carried no
  ``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens`` (the
  calls log still shows what was sent).
* ``slow``: ``delay_ms`` (default 200) before each streamed piece; non-stream
  waits ``delay_ms`` x pieces before answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from stubvendor.answers import (
    MAX_TOKENS_UNSUPPORTED,
    THINKING_BUDGET_TOO_LARGE,
    _reasoning_model,
    _thinking_budget,
    build_answer,
)
from stubvendor.dialect import DIALECT
from stubvendor.prompt import _anthropic_prompt, _openai_prompt, count_prompt_tokens
from stubvendor.rendering import _SSE_HEADERS, OpenAIOptions, Rendered, Reply, _write_stream
from stubvendor.state import REFUSAL_KINDS, STATE, StubState, _ids
from stubvendor.tools import choose_tools
from stubvendor.wire import (
    _abort,
    _answer,
    _extract_key,
    _is_int,
    _json,
    _max_tokens,
    _user,
    vendor_error,
)

HANG_SECONDS = 3600.0
MODELS_BODY = orjson.dumps(
    {
        "object": "list",
        "data": [{"id": "stub-model", "object": "model", "created": 0, "owned_by": "stub"}],
    }
)


# A vendor that bills past the output cap it was sent: the call is answered as if it had
# none (the fields below are dropped from what the answer is built from, not from the log).
UNCAPPED_FIELDS = frozenset({"max_tokens", "max_completion_tokens", "max_output_tokens"})
DROP_KINDS = frozenset({"fail_before_first_token", "fail_after_tokens"})


async def vendor(request: web.Request) -> web.StreamResponse:
    """Dispatch a vendor call by its path suffix (catch-all route)."""
    # Imported here: those modules build on this one.
    from stubvendor.azure import azure_vendor, is_azure_call
    from stubvendor.bedrock import converse, is_bedrock_call
    from stubvendor.embeddings import create_embeddings
    from stubvendor.gemini import google_vendor, is_google_call
    from stubvendor.moderations import create_moderation
    from stubvendor.responses import create_response
    from stubvendor.web import render_page, search

    if is_azure_call(request):
        return await azure_vendor(request)
    if is_google_call(request):
        return await google_vendor(request)
    if is_bedrock_call(request):
        return await converse(request, "bedrock")
    path = request.path
    tail = path.rstrip("/")
    handler: Callable[[web.Request, str], Awaitable[web.StreamResponse]] = _completion
    if tail.endswith("/chat/completions"):
        shape = "openai"
    elif tail.endswith("/responses"):
        shape, handler = "openai", create_response
    elif tail.endswith("/embeddings"):
        shape, handler = "openai", create_embeddings
    elif tail.endswith("/moderations"):
        shape, handler = "openai", create_moderation
    elif tail.endswith("/messages/count_tokens"):
        shape, handler = "anthropic", _count_tokens
    elif tail.endswith("/messages"):
        shape = "anthropic"
    elif tail.endswith("/render"):
        shape, handler = "web", render_page
    elif tail.endswith("/search"):
        shape, handler = "web", search
    elif tail.endswith("/models"):
        if request.method != "GET":
            return vendor_error("openai", 405, f"Method {request.method} not allowed.")
        return await _models(request)
    else:
        return vendor_error("openai", 404, f"Unknown path {path}.")
    if request.method != "POST":
        return vendor_error(shape, 405, f"Method {request.method} not allowed.")
    return await handler(request, shape)


async def _hang(request: web.Request) -> None:
    """Wait up to HANG_SECONDS, returning early once the client is gone."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_SECONDS
    while loop.time() < deadline:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(0.05)


async def _apply_status_fault(
    request: web.Request,
    call: dict[str, Any],
    shape: str,
    fault: dict[str, Any],
    key: str | None,
    raw_key: str | None,
) -> web.StreamResponse | None:
    """Answer a fault that replaces the whole response; return None for the others."""
    kind = fault["kind"]
    if kind == "429":
        retry_after = fault["retry_after"]
        return _answer(
            call,
            vendor_error(
                shape,
                429,
                "Rate limit reached (stub fault).",
                {"Retry-After": str(retry_after)},
            ),
        )
    if kind in ("401", "403"):
        status = int(kind)
        if status == 401:
            message = f"Incorrect API key provided: {key}."
        else:
            message = f"The API key {key} is not allowed to access this resource."
        return _answer(
            call,
            vendor_error(shape, status, message, {"x-stub-echo-key": raw_key or ""}),
        )
    if kind == "500":
        return _answer(call, vendor_error(shape, 500, "The server had an error (stub fault)."))
    if kind in REFUSAL_KINDS:
        return _answer(call, vendor_error(shape, REFUSAL_KINDS[kind], fault["message"]))
    if kind == "hang":
        await _hang(request)
        return _abort(request, web.Response())
    return None


async def _apply_plain_fault(
    request: web.Request,
    call: dict[str, Any],
    shape: str,
    key: str | None,
    raw_key: str | None,
    model: str | None,
) -> web.StreamResponse | None:
    """Faults for a call that answers one small JSON object (models, count_tokens)."""
    fault = request.app[STATE].take_fault(key, model)
    if fault is None:
        return None
    call["fault"] = fault["kind"]
    if fault["credits"]:  # a web vendor that bills the failed call anyway (stubvendor/web.py)
        call["credits"] = fault["credits"]
    resp = await _apply_status_fault(request, call, shape, fault, key, raw_key)
    if resp is not None:
        return resp
    if fault["kind"] in DROP_KINDS:
        return _abort(request, web.Response())
    await asyncio.sleep(fault["delay_ms"] / 1000)
    return None


async def _models(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    headers = request.headers
    shape = "anthropic" if ("x-api-key" in headers or "anthropic-version" in headers) else "openai"
    key, raw_key = _extract_key(request, shape)
    call = state.record(
        path=request.path,
        shape=shape,
        model=None,
        key=key,
        stream=False,
        user=None,
        max_tokens=None,
    )
    rejected = _check_key(state, shape, key)
    if rejected is not None:
        return _answer(call, rejected)
    resp = await _apply_plain_fault(request, call, shape, key, raw_key, None)
    if resp is not None:
        return resp
    return _answer(call, web.Response(body=MODELS_BODY, content_type="application/json"))


def _check_key(state: StubState, shape: str, key: str | None) -> web.Response | None:
    if key is None:
        if shape == "anthropic":
            message = "x-api-key header is required"
        else:
            message = "You didn't provide an API key (Authorization: Bearer <key>)."
        return vendor_error(shape, 401, message)
    if state.accept_keys is not None and key not in state.accept_keys:
        return vendor_error(shape, 401, f"Incorrect API key provided: {key}.")
    return None


async def read_body(request: web.Request) -> tuple[bytes, Any]:
    """Return a call's raw body and its JSON (None when it is not JSON)."""
    raw = await request.read()
    try:
        return raw, orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw, None


@dataclass
class Incoming:
    """A recorded, key-checked vendor call with a JSON object body and a model."""

    call: dict[str, Any]
    body: dict[str, Any]
    model: str
    key: str | None
    raw_key: str | None


async def _receive(
    request: web.Request, shape: str, *, max_tokens_field: str | None = None
) -> Incoming | web.StreamResponse:
    """Read, record and check a vendor call; answer it here when it is refused.

    The record's ``max_tokens`` is the body's ``max_tokens_field`` when given, else
    the chat / messages rule.
    """
    state = request.app[STATE]
    _, body = await read_body(request)
    key, raw_key = _extract_key(request, shape)
    if not isinstance(body, dict):
        call = state.record(
            body=body,
            path=request.path,
            shape=shape,
            model=None,
            key=key,
            stream=False,
            user=None,
            max_tokens=None,
        )
        return _answer(call, vendor_error(shape, 400, "The request body must be a JSON object."))
    dialect = request.get(DIALECT)
    model = dialect.path_model if dialect and dialect.path_model else body.get("model")
    call = state.record(
        body=body,
        path=request.path,
        shape=shape,
        model=model,
        key=key,
        stream=bool(body.get("stream")),
        user=_user(body, shape),
        max_tokens=body.get(max_tokens_field) if max_tokens_field else _max_tokens(body, shape),
        **(dialect.recorded if dialect is not None else {}),
    )
    if dialect is not None:
        rejected = dialect.refuse(state, key, body)
    else:
        rejected = _check_key(state, shape, key)
    if rejected is not None:
        return _answer(call, rejected)
    if not isinstance(model, str) or not model:
        return _answer(call, vendor_error(shape, 400, "model: a non-empty string is required."))
    return Incoming(call, body, model, key, raw_key)


def _refusal(body: dict[str, Any], shape: str, model: str) -> web.Response | None:
    """A 400 the vendor gives for parameters this model/config does not take."""
    if shape == "openai":
        if _reasoning_model(model) and body.get("max_tokens") is not None:
            return vendor_error(
                shape,
                400,
                MAX_TOKENS_UNSUPPORTED,
                param="max_tokens",
                code="unsupported_parameter",
            )
        return None
    budget, max_tokens = _thinking_budget(body), body.get("max_tokens")
    if budget is not None and _is_int(max_tokens) and budget >= max_tokens:
        return vendor_error(shape, 400, THINKING_BUDGET_TOO_LARGE)
    return None


async def _count_tokens(request: web.Request, shape: str) -> web.StreamResponse:
    incoming = await _receive(request, shape)
    if not isinstance(incoming, Incoming):
        return incoming
    call, body = incoming.call, incoming.body
    resp = await _apply_plain_fault(
        request, call, shape, incoming.key, incoming.raw_key, incoming.model
    )
    if resp is not None:
        return resp
    return _answer(call, _json(200, {"input_tokens": count_prompt_tokens(body, shape)}))


def _make_reply(
    state: StubState, incoming: Incoming, shape: str, n_words: int, tools: list[tuple[str, Any]]
) -> Reply:
    """Read/write the prompt caches and decide the answer (after faults: the prompt caches'
    rules in stubvendor/prompt.py's docstring)."""
    body, model = incoming.body, incoming.model
    if shape == "openai":
        prompt, options = _openai_prompt(state, model, body), OpenAIOptions.from_body(body)
    else:
        prompt, options = _anthropic_prompt(state, model, body), OpenAIOptions()
    seq = next(_ids)
    answer = build_answer(body, shape, model, n_words, seq, tools)
    return Reply(shape, seq, model, answer, prompt, options)


def _answer_words(request: web.Request) -> int | str:
    """The answer length: 8, or the ``x-stub-words`` header (or why it is invalid)."""
    header_words = request.headers.get("x-stub-words")
    if header_words is None:
        return 8
    try:
        return max(int(header_words), 0)
    except ValueError:
        return "x-stub-words must be an integer."


async def _completion(request: web.Request, shape: str) -> web.StreamResponse:
    incoming = await _receive(request, shape)
    if not isinstance(incoming, Incoming):
        return incoming
    state = request.app[STATE]
    call, body, model = incoming.call, incoming.body, incoming.model
    refusal = _refusal(body, shape, model)
    if refusal is not None:
        return _answer(call, refusal)
    n_words = _answer_words(request)
    if isinstance(n_words, str):
        return _answer(call, vendor_error(shape, 400, n_words))
    tools = choose_tools(body, shape)
    if isinstance(tools, str):
        return _answer(call, vendor_error(shape, 400, tools))
    return await _deliver(
        request, incoming, shape, lambda: _make_reply(state, incoming, shape, n_words, tools)
    )


async def _deliver(
    request: web.Request, incoming: Incoming, shape: str, make_reply: Callable[[], Rendered]
) -> web.StreamResponse:
    """Apply the call's fault, then send the reply, streamed when the call asked.

    ``make_reply`` runs only when no status fault answered: it reads and writes
    the prompt caches.
    """
    call, key = incoming.call, incoming.key
    fault = request.app[STATE].take_fault(key, incoming.model)
    if fault is not None:
        call["fault"] = fault["kind"]
        resp = await _apply_status_fault(request, call, shape, fault, key, incoming.raw_key)
        if resp is not None:
            return resp
        if fault["kind"] == "ignore_cap":
            incoming.body = {k: v for k, v in incoming.body.items() if k not in UNCAPPED_FIELDS}
    reply = make_reply()
    dialect = request.get(DIALECT)
    if dialect is not None:
        reply = dialect.adjust(reply)
    if call["stream"]:
        return await _send_stream(request, call, reply, fault)
    return await _send_message(request, call, reply, fault)


def _delay(fault: dict[str, Any] | None) -> float:
    return fault["delay_ms"] / 1000 if fault is not None and fault["kind"] == "slow" else 0.0


async def _send_message(
    request: web.Request, call: dict[str, Any], reply: Rendered, fault: dict[str, Any] | None
) -> web.StreamResponse:
    if fault is not None and fault["kind"] in DROP_KINDS:
        return _abort(request, web.Response())
    delay = _delay(fault)
    if delay:
        await asyncio.sleep(delay * reply.pieces())
    return _answer(call, _json(200, reply.message()))


async def _send_stream(
    request: web.Request,
    call: dict[str, Any],
    reply: Rendered,
    fault: dict[str, Any] | None,
    *,
    headers: dict[str, str] = _SSE_HEADERS,  # a vendor framing its streams otherwise says so
) -> web.StreamResponse:
    kind = fault["kind"] if fault is not None else None
    drop = kind in DROP_KINDS
    resp = web.StreamResponse(status=200, headers=headers)
    await resp.prepare(request)  # StreamResponse sends the headers right away
    if kind == "fail_before_first_token":
        return _abort(request, resp)
    if not drop:
        call["status"] = 200
    limit = fault["after_tokens"] if fault is not None and kind == "fail_after_tokens" else None
    try:
        await _write_stream(resp, reply.frames(), _delay(fault), limit, drop)
    except ConnectionError:  # the client went away; aiohttp then finishes quietly
        return resp
    return _abort(request, resp) if drop else resp
