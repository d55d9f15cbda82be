"""What the stub's Bedrock runtime (stubvendor/bedrock.py) counts and answers: prompt tokens
and explicit caching, the Converse answer, and ConverseStream's event-stream frames.

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
"""

from __future__ import annotations

import binascii
import hashlib
import struct
from typing import Any

import orjson

from stubvendor.answers import Answer, answer_tokens, compose_answer, json_answer, tool_calls
from stubvendor.prompt import PromptUsage
from stubvendor.rendering import Frames
from stubvendor.state import StubState
from stubvendor.wire import _as_list, _canonical

EVENT_STREAM_HEADERS = {"Content-Type": "application/vnd.amazon.eventstream"}
IMAGE_TOKENS = 85
DOCUMENT_TOKENS = 100
TOOL_DEFINITION_TOKENS = 10


_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_calls": "tool_use",
}


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
    content: list[dict[str, Any]]
    if answer.calls:
        content = [
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.input}} for c in answer.calls
        ]
    else:
        content = [{"text": "".join(answer.pieces)}]
    return {"role": "assistant", "content": content}


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
