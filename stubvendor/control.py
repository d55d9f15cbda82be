"""The stub's control routes, under ``/_stub/``: faults, the calls log, health.

Control routes (a contract other tools rely on)
-----------------------------------------------
* ``POST /_stub/faults`` ``{"faults": [{"kind": K, "retry_after": s,
  "after_tokens": n, "delay_ms": ms, "times": n, "match": {"key": .., "model":
  ..}, "credits": n, "message": "..."}]}`` appends faults to the queue (``credits``,
  web routes only: a status fault's error body says the vendor billed that many credits
  anyway; ``message``, refusal kinds only: the error's message);
  answers ``{"queued": <number of fault entries now queued>}``.  K is one of ``429 401 403 500 hang
  fail_before_first_token fail_after_tokens slow ignore_cap`` or a refusal kind ``400 404 413
  422`` (added later; a refusal is listed with its ``message``).  ``times`` defaults to 1;
  every ``match`` field is optional and must equal the call's key / model.  A
  vendor call consumes the first queued fault that matches it (``times`` is
  decremented, the fault removed at 0).  An invalid fault answers 400 and
  queues nothing.  ``GET /_stub/faults`` lists the queue.
* ``GET /_stub/calls`` -> ``{"calls": [{"seq", "path", "shape", "model",
  "key", "stream", "user", "max_tokens", "fault", "status", "body",
  "traceparent"}]}`` in arrival order (``traceparent``: the call's W3C trace
  context header as received, or null); every vendor call is recorded at
  arrival (rejected ones too);
  ``status`` is filled in when answered and stays null if dropped/hung;
  ``body`` is the parsed JSON request body as received (null if not JSON or
  none, e.g. ``GET .../models``).  ``seq`` starts at 1 after each clear.
* ``DELETE /_stub/calls`` clears the calls, the queued faults AND the prompt
  caches -> ``{"cleared": true}``.
* ``GET /_stub/health`` -> ``{"ok": true}``.
* ``GET /_stub/site/...``: a few demo web pages (``stubvendor/site.py``), for
  ``make run``'s scrape, render and crawl; not vendor calls (not recorded).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from stubvendor.state import (
    FAULT_KINDS,
    REFUSAL_KINDS,
    REFUSAL_MESSAGE,
    REFUSAL_MESSAGE_MAX_CHARS,
    STATE,
)
from stubvendor.wire import _json


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
    credits = raw.get("credits", 0)
    if not (isinstance(credits, int) and not isinstance(credits, bool) and credits >= 0):
        return "credits must be a non-negative integer"
    fault = {
        "credits": credits,
        "kind": kind,
        "retry_after": retry_after,
        "after_tokens": after_tokens,
        "delay_ms": delay_ms,
        "times": times,
        "match": {k: v for k, v in match.items() if v is not None},
    }
    if kind in REFUSAL_KINDS:  # only a refusal carries a message (other kinds list as before)
        message = raw.get("message")
        if message is None:
            message = REFUSAL_MESSAGE
        if not isinstance(message, str) or len(message) > REFUSAL_MESSAGE_MAX_CHARS:
            return f"message must be a string of at most {REFUSAL_MESSAGE_MAX_CHARS} characters"
        fault["message"] = message
    return fault


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
