"""The stub's AWS Bedrock runtime: ``POST /model/{modelId}/converse`` and
``POST /model/{modelId}/converse-stream`` (any prefix; ``modelId`` URL-encoded, the
model the calls log records).

The signature check is stubvendor/bedrock_signing.py's, what a call counts and answers (and
the event-stream framing) stubvendor/bedrock_answers.py's; each docstring holds its rules.

Faults
------
The fault queue (control.py), matched on the access key id and the model: 429
(``ThrottlingException``, ``Retry-After``), 401 / 403 (``UnrecognizedClientException`` /
``AccessDeniedException``, message echoing the access key id), 500
(``InternalServerException``), the refusal kinds (``ValidationException`` /
``ResourceNotFoundException`` ..., the fault's message), ``hang``, ``slow``, and the stream
cuts ``fail_before_first_token`` / ``fail_after_tokens`` (a piece: a text or tool-input
``contentBlockDelta``), all after the signature check.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web

from stubvendor.bedrock_answers import (
    EVENT_STREAM_HEADERS,
    ConverseReply,
    _after_tool_result,
    _forced_tool,
    _tool_specs,
    _units,
    build_answer,
    prompt_usage,
)
from stubvendor.bedrock_signing import check_signature
from stubvendor.state import REFUSAL_KINDS, STATE, _ids
from stubvendor.tools import pick_tools
from stubvendor.vendor import _answer_words, _hang, _send_message, _send_stream, read_body
from stubvendor.wire import _abort, _answer

PATH = re.compile(r"/model/([^/]+)/(converse|converse-stream)$")


_ERROR_TYPES = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    413: "ValidationException",
    422: "ValidationException",
    429: "ThrottlingException",
    500: "InternalServerException",
}


def bedrock_error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """Build an error as Bedrock's REST JSON protocol writes it."""
    return web.Response(
        body=orjson.dumps({"message": message}),
        status=status,
        content_type="application/json",
        headers={
            "x-amzn-ErrorType": _ERROR_TYPES.get(status, "ValidationException"),
            **(headers or {}),
        },
    )


def _path_match(request: web.Request) -> re.Match[str] | None:
    # The raw path: a model id (an ARN) may hold an encoded slash.
    return PATH.search(request.raw_path.split("?", 1)[0].rstrip("/"))


def is_bedrock_call(request: web.Request) -> bool:
    """Say whether a call is for the Bedrock runtime (server.vendor dispatches on it)."""
    return _path_match(request) is not None


async def converse(request: web.Request, shape: str) -> web.StreamResponse:
    """Answer ``POST .../model/{modelId}/converse[-stream]`` (the module docstring)."""
    if request.method != "POST":
        return bedrock_error(400, f"Method {request.method} not allowed.")
    state = request.app[STATE]
    match = _path_match(request)
    assert match is not None  # server.vendor dispatched on it
    model, stream = unquote(match[1]), match[2] == "converse-stream"
    raw, body = await read_body(request)
    key, region, refusal = check_signature(request, raw)
    inference = body.get("inferenceConfig") if isinstance(body, dict) else None
    call = state.record(
        body=body,
        path=request.path,
        shape=shape,
        model=model,
        key=key,
        region=region,
        stream=stream,
        user=None,
        max_tokens=inference.get("maxTokens") if isinstance(inference, dict) else None,
    )
    if refusal is not None:
        return _answer(call, bedrock_error(403, refusal))
    if not isinstance(body, dict):
        return _answer(call, bedrock_error(400, "The request body must be a JSON object."))
    n_words = _answer_words(request)
    if isinstance(n_words, str):
        return _answer(call, bedrock_error(400, n_words))
    specs = _tool_specs(body)
    tools = pick_tools(
        specs,
        allowed=True,
        forced=_forced_tool(body),
        parallel=True,
        after_tool_result=_after_tool_result(body),
    )
    if isinstance(tools, str):
        return _answer(call, bedrock_error(400, tools))
    fault = state.take_fault(key, model)
    if fault is not None:
        call["fault"] = fault["kind"]
        response = await _status_fault(request, call, fault, key)
        if response is not None:
            return response
    prompt = prompt_usage(state, model, body)
    seq = _next_seq()
    reply = ConverseReply(
        build_answer(body, model, n_words, seq, tools),
        prompt,
        cache_fields=any(point for _, _, point in _units(body)),
    )
    if not stream:
        return await _send_message(request, call, reply, fault)
    return await _send_stream(request, call, reply, fault, headers=EVENT_STREAM_HEADERS)


def _next_seq() -> int:
    return next(_ids)


async def _status_fault(
    request: web.Request, call: dict[str, Any], fault: dict[str, Any], key: str | None
) -> web.StreamResponse | None:
    kind = fault["kind"]
    if kind == "429":
        retry_after = {"Retry-After": str(fault["retry_after"])}
        return _answer(
            call,
            bedrock_error(429, "Too many requests, please wait before trying again.", retry_after),
        )
    if kind == "401":
        return _answer(
            call, bedrock_error(401, f"The access key {key} is not recognized (stub fault).")
        )
    if kind == "403":
        return _answer(
            call,
            bedrock_error(
                403, f"The access key {key} is not allowed to invoke this model (stub fault)."
            ),
        )
    if kind == "500":
        return _answer(call, bedrock_error(500, "The server had an error (stub fault)."))
    if kind in REFUSAL_KINDS:
        return _answer(call, bedrock_error(REFUSAL_KINDS[kind], fault["message"]))
    if kind == "hang":
        await _hang(request)
        return _abort(request, web.Response())
    return None
