"""Stub LLM vendor server: fakes OpenAI and Anthropic for tests and benchmarks.

Start it with ``python manage.py runstub --host 127.0.0.1 --port 8765`` or,
without Django, ``python -m stubvendor.server --host 127.0.0.1 --port 8765``
(``--port 0`` picks a free port; the first stdout line is always
``stub listening on http://HOST:PORT``).  In-process (tests)::

    with StubServer() as stub:        # background thread, free port
        httpx.post(stub.url + "/v1/chat/completions", ...)

Vendor routes
-------------
* ``POST .../chat/completions`` (any prefix): OpenAI chat completions.
  Key: ``Authorization: Bearer <key>``.
* ``POST .../messages`` (any prefix): Anthropic messages.
  Key: ``x-api-key: <key>`` (``Authorization: Bearer <key>`` also accepted).
* ``GET .../models`` (any prefix): ``{"object": "list", "data": [{"id":
  "stub-model", "object": "model", "created": 0, "owned_by": "stub"}]}``.
  Key-checked like the others (OpenAI or Anthropic header), recorded in the
  calls log with ``model: null`` and subject to queued faults (so a fault with
  ``match.model`` is never consumed by it).  Errors use the Anthropic shape
  when the request carries ``x-api-key`` or ``anthropic-version``.

Key check: a missing or empty key answers 401 in the vendor's error shape.  If
``STUB_ACCEPT_KEYS`` (comma separated) is set when the app is built, only those
keys are accepted (others: 401, message echoing the key); otherwise any
non-empty key is accepted.  The key check happens before faults: a rejected
call does not consume a queued fault.  A body that is not a JSON object, or a
missing/empty ``model``, answers 400 (the call is still recorded).

Deterministic content
---------------------
* prompt tokens = number of whitespace-separated words (``str.split()``) over
  every text in the request: OpenAI ``messages[].content``; Anthropic
  ``system`` plus ``messages[].content``.  A content/system value is either a
  string or a list of parts, of which only ``{"type": "text", "text": ...}``
  parts count.  Minimum 1.
* answer words: ``Hello from the stub model <model> reply ok`` (8 words, where
  ``<model>`` is the request's ``model`` string, counted as one word).  Request
  header ``x-stub-words: N`` makes the answer N words long, repeating those 8
  words cyclically.  Streamed tokens are ``"Hello"``, ``" from"``, ``" the"``,
  ... (every word after the first has one leading space); the answer text is
  their concatenation.
* max tokens (OpenAI ``max_completion_tokens``, else ``max_tokens``; Anthropic
  ``max_tokens``): when it is an int smaller than the answer length, only that
  many words are emitted and the finish reason is ``length`` (OpenAI) /
  ``max_tokens`` (Anthropic); otherwise ``stop`` / ``end_turn``.
* completion tokens = number of words emitted.

Responses
---------
* OpenAI: ``{"id": "chatcmpl-stub-<n>", "object": "chat.completion",
  "created", "model", "choices": [{"index": 0, "message": {"role":
  "assistant", "content": text}, "finish_reason": fr}], "usage":
  {"prompt_tokens": P, "completion_tokens": C, "total_tokens": P + C}}``.
  Stream (``"stream": true``): ``data: <chunk>\\n\\n`` lines of
  ``chat.completion.chunk`` objects: a first chunk with delta
  ``{"role": "assistant", "content": ""}``, one chunk per token with delta
  ``{"content": token}``, a chunk with empty delta and ``finish_reason``; with
  ``stream_options.include_usage`` every chunk so far carries ``"usage": null``
  and one more chunk follows with ``"choices": []`` and the usage; finally
  ``data: [DONE]\\n\\n``.
* Anthropic: ``{"id": "msg_stub_<n>", "type": "message", "role": "assistant",
  "model", "content": [{"type": "text", "text": text}], "stop_reason",
  "stop_sequence": null, "usage": {"input_tokens": P, "output_tokens": C}}``.
  Stream: ``event: <name>\\ndata: <json>\\n\\n`` for ``message_start`` (usage
  input P / output 1), ``content_block_start``, ``ping``, one
  ``content_block_delta`` (``text_delta``) per token, ``content_block_stop``,
  ``message_delta`` (stop_reason, ``usage.output_tokens`` C),
  ``message_stop``.
* ``<n>`` is a process-wide counter (never reset).
* Errors: OpenAI ``{"error": {"message", "type", "param": null, "code"}}``,
  Anthropic ``{"type": "error", "error": {"type", "message"}}``.

Control routes (a contract other tools rely on)
-----------------------------------------------
* ``POST /_stub/faults`` ``{"faults": [{"kind": K, "retry_after": s,
  "after_tokens": n, "delay_ms": ms, "times": n, "match": {"key": .., "model":
  ..}}]}`` appends faults to the queue; answers ``{"queued": <number of fault
  entries now queued>}``.  K is one of ``429 401 403 500 hang
  fail_before_first_token fail_after_tokens slow``.  ``times`` defaults to 1;
  every ``match`` field is optional and must equal the call's key / model.  A
  vendor call consumes the first queued fault that matches it (``times`` is
  decremented, the fault removed at 0).  An invalid fault answers 400 and
  queues nothing.  ``GET /_stub/faults`` lists the queue.
* ``GET /_stub/calls`` -> ``{"calls": [{"seq", "path", "shape", "model",
  "key", "stream", "user", "max_tokens", "fault", "status"}]}`` in arrival
  order; every vendor call is recorded at arrival (rejected ones too);
  ``status`` is filled in when answered and stays null if dropped/hung.
  ``seq`` starts at 1 after each clear.
* ``DELETE /_stub/calls`` clears the calls AND the queued faults ->
  ``{"cleared": true}``.
* ``GET /_stub/health`` -> ``{"ok": true}``.

Faults
------
* ``429``: status 429, ``Retry-After: <retry_after, default 1>``, vendor error.
* ``401`` / ``403``: that status, vendor error whose message echoes the key,
  and header ``x-stub-echo-key`` echoing the raw ``Authorization`` /
  ``x-api-key`` header value (deliberately leaky, to test the gateway).
* ``500``: status 500, vendor error.
* ``hang``: never answers (up to 3600 s; ends when the client disconnects).
* ``fail_before_first_token``: stream: 200 headers, then the connection is
  closed mid-body (incomplete chunked body).  Non-stream: connection closed
  without any response.
* ``fail_after_tokens``: stream: ``after_tokens`` (default 2) content tokens,
  then the connection is closed (no finish chunk / usage / ``[DONE]`` /
  ``message_stop``).  Non-stream: like ``fail_before_first_token``.
* ``slow``: ``delay_ms`` (default 200) before each streamed token; non-stream
  waits ``delay_ms`` x tokens before answering.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any, Self

import orjson
from aiohttp import web

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
HANG_SECONDS = 3600.0
MODELS_BODY = orjson.dumps(
    {
        "object": "list",
        "data": [{"id": "stub-model", "object": "model", "created": 0, "owned_by": "stub"}],
    }
)
FAULT_KINDS = frozenset(
    {
        "429",
        "401",
        "403",
        "500",
        "hang",
        "fail_before_first_token",
        "fail_after_tokens",
        "slow",
    }
)
DROP_KINDS = frozenset({"fail_before_first_token", "fail_after_tokens"})
_BASE_WORDS = ("Hello", "from", "the", "stub", "model", None, "reply", "ok")
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_ids = itertools.count(1)


class StubState:
    """Hold one app's calls log and fault queue."""

    def __init__(self, accept_keys: frozenset[str] | None) -> None:
        self.accept_keys = accept_keys
        self.calls: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []

    def record(self, **fields: Any) -> dict[str, Any]:
        call = {"seq": len(self.calls) + 1, **fields, "fault": None, "status": None}
        self.calls.append(call)
        return call

    def take_fault(self, key: str | None, model: str | None) -> dict[str, Any] | None:
        for i, fault in enumerate(self.faults):
            match = fault["match"]
            if "key" in match and match["key"] != key:
                continue
            if "model" in match and match["model"] != model:
                continue
            fault["times"] -= 1
            if fault["times"] <= 0:
                del self.faults[i]
            return fault
        return None

    def clear(self) -> None:
        self.calls.clear()
        self.faults.clear()


STATE = web.AppKey("stub_state", StubState)


# --------------------------------------------------------------------------- helpers


def _json(status: int, obj: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(obj),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _answer(call: dict[str, Any], resp: web.StreamResponse) -> web.StreamResponse:
    call["status"] = resp.status
    return resp


def _abort(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    """Close the connection; whatever was written is flushed, nothing else is.

    Returning the response afterwards makes aiohttp's ``write_eof`` hit the
    closing transport, which it treats as a quiet client disconnect, so the
    client sees a truncated body (or no response at all).
    """
    transport = request.transport
    if transport is not None:
        transport.close()
    return resp


_ERROR_TYPES = {
    # status: (openai type, openai code, anthropic type)
    400: ("invalid_request_error", None, "invalid_request_error"),
    401: ("invalid_request_error", "invalid_api_key", "authentication_error"),
    403: ("permission_error", "permission_denied", "permission_error"),
    404: ("invalid_request_error", "not_found", "not_found_error"),
    405: ("invalid_request_error", "method_not_allowed", "invalid_request_error"),
    429: ("requests", "rate_limit_exceeded", "rate_limit_error"),
    500: ("server_error", None, "api_error"),
}


def vendor_error(
    shape: str, status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    """Build an error response in the vendor's own body shape."""
    oa_type, oa_code, an_type = _ERROR_TYPES[status]
    if shape == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": an_type, "message": message},
        }
    else:
        body = {
            "error": {
                "message": message,
                "type": oa_type,
                "param": None,
                "code": oa_code,
            }
        }
    return _json(status, body, headers)


def _extract_key(request: web.Request, shape: str) -> tuple[str | None, str | None]:
    """Return (key or None, raw header value it came from)."""
    headers = request.headers
    if shape == "anthropic" and (headers.get("x-api-key") or "").strip():
        raw = headers["x-api-key"]
        return raw.strip(), raw
    raw = headers.get("Authorization")
    if raw is None:
        return None, headers.get("x-api-key") if shape == "anthropic" else None
    value = raw.strip()
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "bearer":
        value = token.strip()
    return (value or None), raw


def _text_words(content: Any) -> int:
    if isinstance(content, str):
        return len(content.split())
    n = 0
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    n += len(text.split())
    return n


def count_prompt_tokens(body: dict[str, Any], shape: str) -> int:
    """Count the words over every text the request carries (minimum 1)."""
    n = _text_words(body.get("system")) if shape == "anthropic" else 0
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                n += _text_words(message.get("content"))
    return max(n, 1)


def answer_tokens(model: str, n_words: int) -> list[str]:
    """Return the first ``n_words`` streamed tokens ("Hello", " from", ...)."""
    words = [model if w is None else w for w in _BASE_WORDS]
    return [(words[i % 8] if i == 0 else " " + words[i % 8]) for i in range(n_words)]


def _max_tokens(body: dict[str, Any], shape: str) -> Any:
    if shape == "openai" and body.get("max_completion_tokens") is not None:
        return body["max_completion_tokens"]
    return body.get("max_tokens")


def _user(body: dict[str, Any], shape: str) -> Any:
    if shape == "anthropic":
        meta = body.get("metadata")
        return meta.get("user_id") if isinstance(meta, dict) else None
    return body.get("user")


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
    if kind == "hang":
        await _hang(request)
        return _abort(request, web.Response())
    return None


# --------------------------------------------------------------------------- vendor


async def vendor(request: web.Request) -> web.StreamResponse:
    """Dispatch a vendor call by its path suffix (catch-all route)."""
    path = request.path
    tail = path.rstrip("/")
    if tail.endswith("/chat/completions"):
        shape = "openai"
    elif tail.endswith("/messages"):
        shape = "anthropic"
    elif tail.endswith("/models"):
        if request.method != "GET":
            return vendor_error("openai", 405, f"Method {request.method} not allowed.")
        return await _models(request)
    else:
        return vendor_error("openai", 404, f"Unknown path {path}.")
    if request.method != "POST":
        return vendor_error(shape, 405, f"Method {request.method} not allowed.")
    return await _completion(request, shape)


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
    fault = state.take_fault(key, None)
    if fault is not None:
        call["fault"] = fault["kind"]
        resp = await _apply_status_fault(request, call, shape, fault, key, raw_key)
        if resp is not None:
            return resp
        if fault["kind"] in DROP_KINDS:
            return _abort(request, web.Response())
        await asyncio.sleep(fault["delay_ms"] / 1000)
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


async def _completion(request: web.Request, shape: str) -> web.StreamResponse:
    state = request.app[STATE]
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    key, raw_key = _extract_key(request, shape)
    if isinstance(body, dict):
        model = body.get("model")
        call = state.record(
            path=request.path,
            shape=shape,
            model=model,
            key=key,
            stream=bool(body.get("stream")),
            user=_user(body, shape),
            max_tokens=_max_tokens(body, shape),
        )
    else:
        call = state.record(
            path=request.path,
            shape=shape,
            model=None,
            key=key,
            stream=False,
            user=None,
            max_tokens=None,
        )
        return _answer(call, vendor_error(shape, 400, "The request body must be a JSON object."))
    rejected = _check_key(state, shape, key)
    if rejected is not None:
        return _answer(call, rejected)
    if not isinstance(model, str) or not model:
        return _answer(call, vendor_error(shape, 400, "model: a non-empty string is required."))

    n_words = 8
    header_words = request.headers.get("x-stub-words")
    if header_words is not None:
        try:
            n_words = max(int(header_words), 0)
        except ValueError:
            return _answer(call, vendor_error(shape, 400, "x-stub-words must be an integer."))
    max_tokens = call["max_tokens"]
    truncated = (
        isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens < n_words
    )
    if truncated:
        n_words = max(max_tokens, 0)
    tokens = answer_tokens(model, n_words)
    prompt_tokens = count_prompt_tokens(body, shape)

    fault = state.take_fault(key, model)
    delay = 0.0
    if fault is not None:
        call["fault"] = fault["kind"]
        resp = await _apply_status_fault(request, call, shape, fault, key, raw_key)
        if resp is not None:
            return resp
        if fault["kind"] == "slow":
            delay = fault["delay_ms"] / 1000

    kind = fault["kind"] if fault is not None else None
    if not call["stream"]:
        if kind in DROP_KINDS:
            return _abort(request, web.Response())
        if delay:
            await asyncio.sleep(delay * len(tokens))
        if shape == "openai":
            obj = _openai_message(model, tokens, prompt_tokens, truncated)
        else:
            obj = _anthropic_message(model, tokens, prompt_tokens, truncated)
        return _answer(call, _json(200, obj))

    drop = kind in DROP_KINDS
    if fault is not None and kind == "fail_after_tokens":
        tokens = tokens[: fault["after_tokens"]]
    resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
    await resp.prepare(request)  # StreamResponse sends the headers right away
    if kind == "fail_before_first_token":
        return _abort(request, resp)
    if not drop:
        call["status"] = 200
    if shape == "openai":
        writing = _openai_stream(
            resp,
            model,
            tokens,
            prompt_tokens,
            truncated,
            _include_usage(body),
            delay,
            drop,
        )
    else:
        writing = _anthropic_stream(resp, model, tokens, prompt_tokens, truncated, delay, drop)
    try:
        await writing
    except ConnectionError:  # the client went away; aiohttp then finishes quietly
        return resp
    return _abort(request, resp) if drop else resp


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _openai_message(
    model: str, tokens: list[str], prompt_tokens: int, truncated: bool
) -> dict[str, Any]:
    completion_tokens = len(tokens)
    return {
        "id": f"chatcmpl-stub-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(tokens)},
                "finish_reason": "length" if truncated else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _anthropic_message(
    model: str, tokens: list[str], prompt_tokens: int, truncated: bool
) -> dict[str, Any]:
    return {
        "id": f"msg_stub_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "".join(tokens)}],
        "stop_reason": "max_tokens" if truncated else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": len(tokens)},
    }


async def _openai_stream(
    resp: web.StreamResponse,
    model: str,
    tokens: list[str],
    prompt_tokens: int,
    truncated: bool,
    include_usage: bool,
    delay: float,
    drop: bool,
) -> None:
    head = {
        "id": f"chatcmpl-stub-{next(_ids)}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def event(delta: dict[str, Any], finish_reason: str | None) -> bytes:
        chunk: dict[str, Any] = {
            **head,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if include_usage:
            chunk["usage"] = None
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    await resp.write(event({"role": "assistant", "content": ""}, None))
    for token in tokens:
        if delay:
            await asyncio.sleep(delay)
        await resp.write(event({"content": token}, None))
    if drop:
        return
    await resp.write(event({}, "length" if truncated else "stop"))
    if include_usage:
        completion_tokens = len(tokens)
        usage_chunk = {
            **head,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        await resp.write(b"data: " + orjson.dumps(usage_chunk) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def _anthropic_stream(
    resp: web.StreamResponse,
    model: str,
    tokens: list[str],
    prompt_tokens: int,
    truncated: bool,
    delay: float,
    drop: bool,
) -> None:
    message = {
        "id": f"msg_stub_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 1},
    }
    await resp.write(
        _sse("message_start", {"type": "message_start", "message": message})
        + _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        + _sse("ping", {"type": "ping"})
    )
    for token in tokens:
        if delay:
            await asyncio.sleep(delay)
        await resp.write(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": token},
                },
            )
        )
    if drop:
        return
    await resp.write(
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        + _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "max_tokens" if truncated else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": len(tokens)},
            },
        )
        + _sse("message_stop", {"type": "message_stop"})
    )


# --------------------------------------------------------------------------- control


def _bad(message: str) -> web.Response:
    return _json(400, {"error": message})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _parse_fault(raw: Any) -> dict[str, Any] | str:
    """Normalise one fault spec, or return the reason it is invalid."""
    if not isinstance(raw, dict):
        return "each fault must be an object"
    kind = raw.get("kind")
    if isinstance(kind, int) and not isinstance(kind, bool):
        kind = str(kind)
    if kind not in FAULT_KINDS:
        return f"unknown fault kind {kind!r}; expected one of {sorted(FAULT_KINDS)}"
    retry_after = raw.get("retry_after", 1)
    if retry_after is None:
        retry_after = 1
    if isinstance(retry_after, float) and retry_after.is_integer():
        retry_after = int(retry_after)
    if not (_number(retry_after) or isinstance(retry_after, str)):
        return "retry_after must be a non-negative number"
    after_tokens = raw.get("after_tokens", 2)
    if after_tokens is None:
        after_tokens = 2
    if not (_number(after_tokens) and isinstance(after_tokens, int)):
        return "after_tokens must be a non-negative integer"
    delay_ms = raw.get("delay_ms", 200)
    if delay_ms is None:
        delay_ms = 200
    if not _number(delay_ms):
        return "delay_ms must be a non-negative number"
    times = raw.get("times", 1)
    if times is None:
        times = 1
    if not (isinstance(times, int) and not isinstance(times, bool) and times >= 1):
        return "times must be a positive integer"
    match = raw.get("match") or {}
    if not isinstance(match, dict):
        return "match must be an object"
    unknown = set(match) - {"key", "model"}
    if unknown:
        return f"unknown match fields {sorted(unknown)}"
    return {
        "kind": kind,
        "retry_after": retry_after,
        "after_tokens": after_tokens,
        "delay_ms": delay_ms,
        "times": times,
        "match": {k: v for k, v in match.items() if v is not None},
    }


async def post_faults(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _bad("body must be JSON")
    if not isinstance(body, dict) or not isinstance(body.get("faults"), list):
        return _bad('body must be {"faults": [...]}')
    parsed = []
    for raw in body["faults"]:
        fault = _parse_fault(raw)
        if isinstance(fault, str):
            return _bad(fault)
        parsed.append(fault)
    state.faults.extend(parsed)
    return _json(200, {"queued": len(state.faults)})


async def get_faults(request: web.Request) -> web.Response:
    return _json(200, {"faults": request.app[STATE].faults})


async def get_calls(request: web.Request) -> web.Response:
    return _json(200, {"calls": request.app[STATE].calls})


async def delete_calls(request: web.Request) -> web.Response:
    request.app[STATE].clear()
    return _json(200, {"cleared": True})


async def health(request: web.Request) -> web.Response:
    return _json(200, {"ok": True})


# --------------------------------------------------------------------------- app / running


def _accept_keys_from_env() -> frozenset[str] | None:
    raw = os.environ.get("STUB_ACCEPT_KEYS", "")
    keys = frozenset(k.strip() for k in raw.split(",") if k.strip())
    return keys or None


def make_app(accept_keys: Iterable[str] | None = None) -> web.Application:
    """Build the stub app.  ``accept_keys`` defaults to ``$STUB_ACCEPT_KEYS``."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    keys = frozenset(accept_keys) if accept_keys is not None else _accept_keys_from_env()
    app[STATE] = StubState(keys)
    app.router.add_post("/_stub/faults", post_faults)
    app.router.add_get("/_stub/faults", get_faults)
    app.router.add_get("/_stub/calls", get_calls)
    app.router.add_delete("/_stub/calls", delete_calls)
    app.router.add_get("/_stub/health", health)
    app.router.add_route("*", "/{tail:.*}", vendor)
    return app


async def start_site(
    app: web.Application, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on host:port (0 = any free port); return (runner, bound port)."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    return runner, runner.addresses[0][1]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve the stub in the foreground until interrupted (SIGINT / SIGTERM)."""
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    runner, bound = loop.run_until_complete(start_site(make_app(), host, port))
    print(f"stub listening on http://{host}:{bound}", flush=True)
    try:
        loop.add_signal_handler(signal.SIGTERM, loop.stop)
    except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
        pass
    try:
        loop.run_forever()
    except KeyboardInterrupt:
        pass
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()


class StubServer:
    """Run the stub in a background thread (for tests): ``with StubServer() as s: s.url``."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = 0,
        accept_keys: Iterable[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.app = make_app(accept_keys)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> StubState:
        return self.app[STATE]

    def _serve(self) -> None:
        loop = self._loop = _new_loop()
        asyncio.set_event_loop(loop)
        try:
            runner, self.port = loop.run_until_complete(start_site(self.app, self.host, self.port))
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._serve, name="stub-server", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Stub OpenAI/Anthropic vendor server.")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    run(args.host, args.port)


if __name__ == "__main__":
    main(sys.argv[1:])
