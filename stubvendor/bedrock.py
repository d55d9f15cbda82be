"""The stub's AWS Bedrock runtime: ``POST /model/{modelId}/converse`` and
``POST /model/{modelId}/converse-stream`` (any prefix; ``modelId`` URL-encoded, the
model the calls log records).

Signature
---------
Every call must be signed with AWS SigV4 (service ``bedrock``, any region); the stub
recomputes the signature with botocore over the method, the raw path, the query, the
headers the ``Authorization`` header names (``SignedHeaders``) and the body, and refuses:

* no (or a non-SigV4) ``Authorization`` header: 403 ``{"message": "Missing
  Authentication Token"}``;
* an access key id it does not know: 403 ``{"message": "The security token included in
  the request is invalid."}`` (also for a session token other than the one it knows);
* a scope whose service is not ``bedrock``: 403 ``Credential should be scoped to correct
  service: 'bedrock'.``;
* an ``X-Amz-Date`` more than 15 minutes off: 403 ``Signature expired: ...``;
* any other mismatch (a tampered body, path or signed header, a wrong secret, an
  ``X-Amz-Content-SHA256`` that is not the body's): 403 ``{"message": "The request
  signature we calculated does not match the signature you provided. Check your AWS
  Secret Access Key and signing method. Consult the service documentation for details."}``.

The known credentials are ``$STUB_AWS_CREDENTIALS`` (comma separated
``ACCESS_KEY_ID:SECRET[:SESSION_TOKEN]``), by default the one test pair
``TEST_CREDENTIALS`` = ``AKIASTUBTESTKEY00001:stub/Secret+Key/For/Tests/0000000000000``.
Errors carry ``x-amzn-ErrorType`` (``AccessDeniedException``, ``ValidationException``,
``ThrottlingException``, ...).  The call is recorded (``shape: "bedrock"``, ``key``: the
access key id, ``region``: the signing region, ``max_tokens``:
``inferenceConfig.maxTokens``, ``user`` null) before the check, so a refused call shows.

Prompt tokens
-------------
Words (``str.split()``) of every ``text`` block of ``system`` and of the messages (a
``toolResult``'s ``text`` blocks included); +85 per ``image`` block, +100 per
``document`` block; +10 per ``toolConfig.tools`` entry with a ``toolSpec``; minimum 1.
Prompt caching is explicit, as on Bedrock: a ``cachePoint`` block (in ``toolConfig.tools``,
``system`` or a message's ``content``) ends a prefix, in the order tools -> system ->
messages, up to the LAST cache point.  First time (per model and prefix):
``cacheWriteInputTokens`` = its tokens, later ``cacheReadInputTokens``; ``inputTokens`` = the
total minus those.  Both cache fields appear only when the request has a cache point.  The
prefixes live with the app's Anthropic ones (keyed ``bedrock/<model>``), so ``DELETE
/_stub/calls`` clears them.

Answer
------
The rules of answers.py, read from Converse's fields: tool calls when ``toolConfig.tools``
holds ``toolSpec`` tools and the last message is not a user message with a ``toolResult``
block: the tool ``toolChoice.tool.name`` names, else the first two (Converse has no
sequential switch) when two or more are given, else the first; input built from
``inputSchema.json``; ids ``tooluse_stub_<n>_<i>``; 5 output tokens each. Else JSON for
``outputConfig.textFormat`` ``{"type": "json_schema", "structure": {"jsonSchema": {"schema":
"<JSON text>"}}}``: the object built from the schema, compact, in 8-character pieces. Else
the words (``x-stub-words`` as in answers.py), cut by ``inferenceConfig.stopSequences`` then
``maxTokens``.

``{"output": {"message": {"role": "assistant", "content": [{"text"}] | [{"toolUse":
{"toolUseId", "name", "input"}}, ...]}}, "stopReason": "end_turn" | "stop_sequence" |
"max_tokens" | "tool_use", "usage": {"inputTokens", "outputTokens", "totalTokens"[,
"cacheReadInputTokens", "cacheWriteInputTokens"]}, "metrics": {"latencyMs": 0}}``.

ConverseStream answers ``application/vnd.amazon.eventstream`` frames (prelude: total and
headers length, prelude CRC32; headers ``:event-type``, ``:content-type``
``application/json``, ``:message-type`` ``event``; the JSON payload; message CRC32):
``messageStart`` ``{"role": "assistant"}``; for a text answer one ``contentBlockDelta``
``{"contentBlockIndex": 0, "delta": {"text": token}}`` per piece and ``contentBlockStop``; per
tool call i ``contentBlockStart`` ``{"contentBlockIndex": i, "start": {"toolUse":
{"toolUseId", "name"}}}``, two ``contentBlockDelta`` ``{"delta": {"toolUse": {"input":
half}}}`` and ``contentBlockStop``; then ``messageStop`` ``{"stopReason"}`` and ``metadata``
``{"usage", "metrics": {"latencyMs": 0}}``.  ``exception_frame`` builds the exception
messages (``:message-type`` ``exception``, ``:exception-type``).

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

import binascii
import datetime as dt
import hashlib
import hmac
import os
import re
import struct
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from stubvendor.answers import Answer, answer_tokens, compose_answer, json_answer, tool_calls
from stubvendor.prompt import PromptUsage
from stubvendor.rendering import Frames
from stubvendor.state import REFUSAL_KINDS, STATE, StubState, _ids
from stubvendor.tools import pick_tools
from stubvendor.vendor import _answer_words, _hang, _send_message, _send_stream, read_body
from stubvendor.wire import _abort, _answer, _as_list, _canonical

TEST_CREDENTIALS = "AKIASTUBTESTKEY00001:stub/Secret+Key/For/Tests/0000000000000"
SIGNING_SERVICE = "bedrock"
MAX_CLOCK_SKEW = dt.timedelta(minutes=15)
PATH = re.compile(r"/model/([^/]+)/(converse|converse-stream)$")
EVENT_STREAM_HEADERS = {"Content-Type": "application/vnd.amazon.eventstream"}
IMAGE_TOKENS = 85
DOCUMENT_TOKENS = 100
TOOL_DEFINITION_TOKENS = 10
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/"
    r"(?P<service>[^/,\s]+)/aws4_request,\s*SignedHeaders=(?P<headers>[a-z0-9;\-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
MISSING_TOKEN = "Missing Authentication Token"
INVALID_TOKEN = "The security token included in the request is invalid."
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check "
    "your AWS Secret Access Key and signing method. Consult the service documentation for "
    "details."
)
_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_calls": "tool_use",
}
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


# --------------------------------------------------------------------------- signature


def known_credentials() -> dict[str, Credentials]:
    """The credentials the stub accepts, by access key id (``$STUB_AWS_CREDENTIALS``)."""
    raw = os.environ.get("STUB_AWS_CREDENTIALS") or TEST_CREDENTIALS
    known = {}
    for entry in raw.split(","):
        parts = entry.strip().split(":")
        if len(parts) in (2, 3):
            known[parts[0]] = Credentials(*parts)
    return known


def check_signature(request: web.Request, body: bytes) -> tuple[str | None, str | None, str | None]:
    """Return (access key id, region, refusal message or None) for a call's SigV4 signature."""
    match = _AUTHORIZATION.fullmatch(request.headers.get("Authorization", "").strip())
    if match is None:
        return None, None, MISSING_TOKEN
    key, region = match["key"], match["region"]
    credentials = known_credentials().get(key)
    token = request.headers.get("X-Amz-Security-Token")
    if credentials is None or token != credentials.token:
        return key, region, INVALID_TOKEN
    if match["service"] != SIGNING_SERVICE:
        return key, region, f"Credential should be scoped to correct service: '{SIGNING_SERVICE}'."
    stamp = request.headers.get("X-Amz-Date", "")
    try:
        signed_at = dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return key, region, SIGNATURE_MISMATCH
    now = dt.datetime.now(dt.UTC)
    if abs(now - signed_at) > MAX_CLOCK_SKEW:
        return key, region, f"Signature expired: {stamp} is now earlier than the allowed window."
    content_hash = request.headers.get("X-Amz-Content-SHA256")
    if content_hash is not None and content_hash != hashlib.sha256(body).hexdigest():
        return key, region, SIGNATURE_MISMATCH
    names = match["headers"].split(";")
    if any(name not in request.headers for name in names):
        return key, region, SIGNATURE_MISMATCH
    signed = AWSRequest(
        method=request.method,
        url=f"http://{request.host}{request.raw_path}",
        data=body,
        headers={name: request.headers[name] for name in names},
    )
    signed.context["timestamp"] = stamp
    signer = SigV4Auth(credentials, match["service"], region)
    expected = signer.signature(
        signer.string_to_sign(signed, signer.canonical_request(signed)), signed
    )
    if match["date"] != stamp[:8] or not hmac.compare_digest(expected, match["signature"]):
        return key, region, SIGNATURE_MISMATCH
    return key, region, None


# --------------------------------------------------------------------------- prompt tokens


def _block_tokens(block: Any) -> int:
    if not isinstance(block, dict):
        return 0
    if isinstance(block.get("text"), str):
        return len(block["text"].split())
    if "image" in block:
        return IMAGE_TOKENS
    if "document" in block:
        return DOCUMENT_TOKENS
    result = block.get("toolResult")
    if isinstance(result, dict):
        return sum(_block_tokens(part) for part in _as_list(result.get("content")))
    return 0


def _units(body: dict[str, Any]) -> list[tuple[Any, int, bool]]:
    """(item, tokens, is a cache point) of the prompt, in cache-prefix order."""
    tool_config = body.get("toolConfig")
    tools = _as_list(tool_config.get("tools")) if isinstance(tool_config, dict) else []
    units = [
        (
            {"tool": tool},
            TOOL_DEFINITION_TOKENS if isinstance(tool, dict) and "toolSpec" in tool else 0,
            isinstance(tool, dict) and "cachePoint" in tool,
        )
        for tool in tools
    ]
    for block in _as_list(body.get("system")):
        units.append(({"system": block}, _block_tokens(block), _is_cache_point(block)))
    for index, message in enumerate(_as_list(body.get("messages"))):
        if not isinstance(message, dict):
            continue
        for block in _as_list(message.get("content")):
            item = {"message": index, "role": message.get("role"), "block": block}
            units.append((item, _block_tokens(block), _is_cache_point(block)))
    return units


def _is_cache_point(block: Any) -> bool:
    return isinstance(block, dict) and "cachePoint" in block


def prompt_usage(state: StubState, model: str, body: dict[str, Any]) -> PromptUsage:
    """Count the prompt and read / write the cache up to the last cache point."""
    units = _units(body)
    total = max(sum(tokens for _, tokens, _ in units), 1)
    points = [index for index, (_, _, point) in enumerate(units) if point]
    if not points:
        return PromptUsage(total)
    prefix = units[: points[-1] + 1]
    tokens = sum(unit_tokens for _, unit_tokens, _ in prefix)
    digest = hashlib.sha256(_canonical([item for item, _, _ in prefix])).digest()
    key = (f"bedrock/{model}", digest)
    if key in state.anthropic_prefixes:
        return PromptUsage(total, cache_read=tokens)
    state.anthropic_prefixes.add(key)
    return PromptUsage(total, cache_creation=tokens)


def usage_json(prompt: PromptUsage, output_tokens: int, *, cache_fields: bool) -> dict[str, Any]:
    usage = {
        "inputTokens": prompt.total - prompt.cache_creation - prompt.cache_read,
        "outputTokens": output_tokens,
        "totalTokens": prompt.total + output_tokens,
    }
    if cache_fields:
        usage["cacheReadInputTokens"] = prompt.cache_read
        usage["cacheWriteInputTokens"] = prompt.cache_creation
    return usage


# --------------------------------------------------------------------------- answers


def _tool_specs(body: dict[str, Any]) -> list[tuple[str, Any]]:
    tool_config = body.get("toolConfig")
    specs = []
    for tool in _as_list(tool_config.get("tools") if isinstance(tool_config, dict) else None):
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            schema = spec.get("inputSchema")
            specs.append((spec["name"], schema.get("json") if isinstance(schema, dict) else None))
    return specs


def _forced_tool(body: dict[str, Any]) -> str | None:
    tool_config = body.get("toolConfig")
    choice = tool_config.get("toolChoice") if isinstance(tool_config, dict) else None
    tool = choice.get("tool") if isinstance(choice, dict) else None
    name = tool.get("name") if isinstance(tool, dict) else None
    return name if isinstance(name, str) else None


def _after_tool_result(body: dict[str, Any]) -> bool:
    messages = _as_list(body.get("messages"))
    last = messages[-1] if messages else None
    return (
        isinstance(last, dict)
        and last.get("role") == "user"
        and any(isinstance(b, dict) and "toolResult" in b for b in _as_list(last.get("content")))
    )


def _json_schema(body: dict[str, Any]) -> Any:
    """The schema of ``outputConfig.textFormat`` (json_schema), or None."""
    output = body.get("outputConfig")
    fmt = output.get("textFormat") if isinstance(output, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    structure = fmt.get("structure")
    spec = structure.get("jsonSchema") if isinstance(structure, dict) else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    try:
        return orjson.loads(schema) if isinstance(schema, str) else None
    except orjson.JSONDecodeError:
        return None


def build_answer(
    body: dict[str, Any], model: str, n_words: int, seq: int, tools: list[tuple[str, Any]]
) -> Answer:
    inference = body.get("inferenceConfig")
    inference = inference if isinstance(inference, dict) else {}
    schema = _json_schema(body)
    tokens = answer_tokens(model, n_words)
    stops = frozenset(s for s in _as_list(inference.get("stopSequences")) if isinstance(s, str))
    return compose_answer(
        tokens,
        calls=tool_calls(tools, "tooluse_stub", seq),
        json_text=json_answer("json_schema", schema, tokens) if schema is not None else None,
        max_tokens=inference.get("maxTokens"),
        stops=stops,
    )


def converse_message(answer: Answer) -> dict[str, Any]:
    if answer.calls:
        content = [
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.input}} for c in answer.calls
        ]
    else:
        content = [{"text": "".join(answer.pieces)}]
    return {"role": "assistant", "content": content}


# --------------------------------------------------------------------------- event stream


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    # Header value type 7: a string, its length in two bytes.
    return (
        bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
    )


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """Encode one event-stream message: prelude (total length, headers length, CRC32),
    headers, payload, message CRC32."""
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message))


def event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return frame(headers, orjson.dumps(payload))


def exception_frame(exception_type: str, message: str) -> bytes:
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, orjson.dumps({"message": message}))


def _halves(text: str) -> list[str]:
    cut = len(text) // 2
    return [text[:cut], text[cut:]]


class ConverseReply:
    """A Converse answer, whole or as ConverseStream frames."""

    def __init__(self, answer: Answer, prompt: PromptUsage, *, cache_fields: bool) -> None:
        self.answer = answer
        self.prompt = prompt
        self.cache_fields = cache_fields

    def usage(self) -> dict[str, Any]:
        return usage_json(self.prompt, self.answer.output_tokens, cache_fields=self.cache_fields)

    def message(self) -> dict[str, Any]:
        return {
            "output": {"message": converse_message(self.answer)},
            "stopReason": _STOP_REASONS[self.answer.finish],
            "usage": self.usage(),
            "metrics": {"latencyMs": 0},
        }

    def frames(self) -> Frames:
        body: list[tuple[bytes, bool]] = [
            (event_frame("messageStart", {"role": "assistant"}), False)
        ]
        for index, call in enumerate(self.answer.calls):
            start = {"toolUse": {"toolUseId": call.id, "name": call.name}}
            body.append(
                (
                    event_frame("contentBlockStart", {"contentBlockIndex": index, "start": start}),
                    False,
                )
            )
            for half in _halves(call.arguments):
                delta = {"contentBlockIndex": index, "delta": {"toolUse": {"input": half}}}
                body.append((event_frame("contentBlockDelta", delta), True))
            body.append((event_frame("contentBlockStop", {"contentBlockIndex": index}), False))
        if not self.answer.calls:
            for piece in self.answer.pieces:
                delta = {"contentBlockIndex": 0, "delta": {"text": piece}}
                body.append((event_frame("contentBlockDelta", delta), True))
            body.append((event_frame("contentBlockStop", {"contentBlockIndex": 0}), False))
        tail = [
            event_frame("messageStop", {"stopReason": _STOP_REASONS[self.answer.finish]}),
            event_frame("metadata", {"usage": self.usage(), "metrics": {"latencyMs": 0}}),
        ]
        return body, tail

    def pieces(self) -> int:
        return 2 * len(self.answer.calls) if self.answer.calls else len(self.answer.pieces)


# --------------------------------------------------------------------------- route


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
