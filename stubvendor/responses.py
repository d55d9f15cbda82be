"""The stub's OpenAI Responses API: ``POST .../responses`` (any prefix).

Key ``Authorization: Bearer <key>``; recorded (``max_tokens`` in the calls
log is the body's ``max_output_tokens``), key-checked and refused like the
other vendor routes (server.py's docstring).  Then, still before faults, a
400 for:

* ``messages`` or ``max_tokens`` present (checked in that order), as the real
  API answers: ``Unsupported parameter: 'messages'. In the Responses API,
  this parameter has moved to 'input'. Try again with the new parameter.``
  (``'max_tokens'`` -> ``'max_output_tokens'``), ``param`` the name, ``code``
  ``"unsupported_parameter"``;
* ``input`` neither absent/null, a string nor a list (``param: "input"``);
* a non-integer ``x-stub-words`` header; a ``tool_choice`` ``{"type":
  "function", "name"}`` naming no function tool of ``tools``.

Every other field (``store``, ``metadata``, ``temperature``, ``include``,
``previous_response_id``, ...) is accepted and recorded; the answer echoes
the request fields the SDK's ``Response`` carries (below).

Input and prompt tokens
-----------------------
``input`` a string is one user message; else a list of items: a message
(``type: "message"`` or no ``type``) has ``content`` a string (its words) or
parts: ``input_text`` / ``output_text`` count their ``text``'s words,
``input_image`` +85, ``input_file`` +100, others 0.  A ``function_call_output``
counts its ``output`` the same way (a string or parts).  ``function_call``,
``reasoning`` and any other item: 0.  P = words of ``instructions`` (a string)
+ the items + 10 per entry of ``tools``; minimum 1.

Caching (OpenAI's automatic rule, prompt.py's ``cached_prefix_tokens``): the
prefix units are ``{"instructions": text}`` (when ``instructions`` is a
string) followed by the input items; for every k >= 1 with k < the number of
units, if the first k units equal (canonical JSON) those of an earlier
Responses call to the same model and carry >= 64 tokens (tools not counted),
``input_tokens_details.cached_tokens`` = the tokens of the longest such
prefix, else 0.  These prefixes are kept apart from chat's and cleared by
``DELETE /_stub/calls``.

Answer
------
Chat's rules, read from the Responses fields:

* Tool calls when ``tools`` holds function tools (``{"type": "function",
  "name", "parameters"?}``; other tool types are counted, never called),
  ``tool_choice`` is not ``"none"``, and the last input item is not a
  ``function_call_output``: the tool ``tool_choice`` ``{"type": "function",
  "name"}`` names, else the first two when ``parallel_tool_calls`` is not
  false and two or more are given, else the first.  Arguments: the schema
  rule of answers.py, compact JSON.  5 output tokens each.
* Else JSON for ``text.format`` ``{"type": "json_object"}`` (``{"answer":
  "<the words>"}``) or ``{"type": "json_schema", "schema"}`` (the object
  built from ``schema``): compact, never cut, streamed in 8-character
  pieces, output tokens = pieces.
* Else the words ``Hello from the stub model <model> reply ok`` (``x-stub-words:
  N`` makes N); ``max_output_tokens`` (an int) below the word count cuts to
  that many words and makes the response ``status: "incomplete"``,
  ``incomplete_details: {"reason": "max_output_tokens"}`` (the message item's
  ``status`` is ``"incomplete"`` too).
* Reasoning: a model matching ``^(o\\d|gpt-5)`` or a non-null ``reasoning``
  field adds 16 ``reasoning_tokens`` (on top of the above; max_output_tokens
  caps the words only) and a first output item ``{"type": "reasoning", "id":
  "rs_stub_<n>", "summary": []}``.

Output items, in order: the reasoning item; then either one
``{"type": "function_call", "id": "fc_stub_<n>_<i>", "call_id":
"call_stub_<n>_<i>", "name", "arguments", "status": "completed"}`` per call or
one ``{"type": "message", "id": "msg_stub_<n>", "status", "role":
"assistant", "content": [{"type": "output_text", "text", "annotations": [],
"logprobs": []}]}``.  ``<n>`` is the stub's process-wide counter (state.py).

The response object::

    {"id": "resp_stub_<n>", "object": "response", "created_at": <unix s>,
     "status": "completed" | "incomplete", "error": null,
     "incomplete_details": null | {"reason": "max_output_tokens"},
     "instructions", "max_output_tokens", "previous_response_id", "user"
       (echoed, null when absent),
     "metadata" ({} when absent), "model", "output": [...],
     "parallel_tool_calls" (true unless false), "reasoning" (echoed, else
     {"effort": null, "summary": null}), "store" (true unless false),
     "temperature" / "top_p" (echoed, else 1.0), "text" (echoed, else
     {"format": {"type": "text"}}), "tool_choice" (echoed, else "auto"),
     "tools" (echoed, else []), "truncation" (echoed, else "disabled"),
     "usage": {"input_tokens": P,
               "input_tokens_details": {"cached_tokens": K, "cache_write_tokens": 0},
               "output_tokens": C, "output_tokens_details": {"reasoning_tokens": R},
               "total_tokens": P + C}}

Stream (``"stream": true``): ``event: <type>\\ndata: <json>\\n\\n`` frames, each
``data`` ``{"type": <type>, "sequence_number": 0, 1, ..., ...}``:
``response.created`` and ``response.in_progress`` (the response with
``status: "in_progress"``, ``output: []``, ``usage: null``); then per output
item at ``output_index`` 0, 1, ...:

* reasoning: ``response.output_item.added`` and ``response.output_item.done``
  with the item;
* message: ``response.output_item.added`` (``status: "in_progress"``,
  ``content: []``), ``response.content_part.added`` (``content_index: 0``,
  the part with ``text: ""``), one ``response.output_text.delta`` per piece
  (``delta``: the word tokens ``"Hello"``, ``" from"``, ... or JSON pieces;
  ``logprobs: []``), ``response.output_text.done`` (``text``),
  ``response.content_part.done`` (the part), ``response.output_item.done``
  (the item);
* function call: ``response.output_item.added`` (``arguments: ""``, ``status:
  "in_progress"``), two ``response.function_call_arguments.delta`` (the
  arguments split at len // 2), ``response.function_call_arguments.done``
  (``arguments``), ``response.output_item.done``;

(the delta and done events carry ``item_id`` and ``output_index``), and
finally ``response.completed`` or ``response.incomplete`` with the whole
response.  No ``[DONE]`` line.  Faults count pieces (text deltas and
argument deltas): ``fail_after_tokens`` closes the connection after
``after_tokens`` of them (never sending the final event),
``fail_before_first_token`` after the headers, ``slow`` waits before each
(non-stream: ``delay_ms`` x pieces); status faults and ``hang`` as usual.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from stubvendor.answers import (
    REASONING_TOKENS,
    Answer,
    _halves,
    _reasoning_model,
    answer_tokens,
    compose_answer,
    json_answer,
    tool_calls,
)
from stubvendor.prompt import (
    TOOL_DEFINITION_TOKENS,
    PromptUsage,
    _content_tokens,
    _words,
    cached_prefix_tokens,
)
from stubvendor.rendering import Frames, _event
from stubvendor.state import STATE, StubState, _ids
from stubvendor.tools import pick_tools
from stubvendor.vendor import Incoming, _answer_words, _deliver, _receive
from stubvendor.wire import _answer, _as_list, vendor_error

DIALECT = "responses"  # prompt.py's part-token tables for Responses input parts
# Chat parameters the Responses API refuses, and where they moved.
MOVED_PARAMETERS = {"messages": "input", "max_tokens": "max_output_tokens"}
INCOMPLETE_DETAILS = {"reason": "max_output_tokens"}


def _moved_parameter(body: dict[str, Any], shape: str) -> web.Response | None:
    for name, moved_to in MOVED_PARAMETERS.items():
        if name in body:
            message = (
                f"Unsupported parameter: '{name}'. In the Responses API, this parameter "
                f"has moved to '{moved_to}'. Try again with the new parameter."
            )
            return vendor_error(shape, 400, message, param=name, code="unsupported_parameter")
    return None


def input_items(body: dict[str, Any]) -> list[Any] | None:
    """Return ``input`` as a list of items (a string is one user message); None if malformed."""
    raw = body.get("input")
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return raw if isinstance(raw, list) else None


def _item_tokens(item: Any) -> int:
    if not isinstance(item, dict):
        return 0
    kind = item.get("type", "message")
    if kind == "message":
        return _content_tokens(item.get("content"), DIALECT)
    if kind == "function_call_output":
        return _content_tokens(item.get("output"), DIALECT)
    return 0


def _prefix_units(body: dict[str, Any], items: list[Any]) -> list[tuple[Any, int]]:
    """List (unit, tokens) in prompt order: the instructions, then every input item."""
    instructions = body.get("instructions")
    units = []
    if isinstance(instructions, str):
        units.append(({"instructions": instructions}, _words(instructions)))
    return units + [(item, _item_tokens(item)) for item in items]


def count_input_tokens(body: dict[str, Any], items: list[Any]) -> int:
    """Count a Responses call's prompt tokens (cached ones included; minimum 1)."""
    units = sum(tokens for _, tokens in _prefix_units(body, items))
    return max(units + TOOL_DEFINITION_TOKENS * len(_as_list(body.get("tools"))), 1)


def _prompt(state: StubState, model: str, body: dict[str, Any], items: list[Any]) -> PromptUsage:
    units = _prefix_units(body, items)
    cached = cached_prefix_tokens(
        state.responses_prefixes, model, [unit for unit, _ in units], [t for _, t in units]
    )
    return PromptUsage(count_input_tokens(body, items), cached=cached)


def choose_function_tools(body: dict[str, Any], items: list[Any]) -> list[tuple[str, Any]] | str:
    """Choose the function tools the answer calls ([] = none), or say why tool_choice is bad."""
    specs = [
        (tool["name"], tool.get("parameters"))
        for tool in _as_list(body.get("tools"))
        if isinstance(tool, dict)
        and tool.get("type") == "function"
        and isinstance(tool.get("name"), str)
    ]
    choice = body.get("tool_choice")
    forced = None
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        forced = name if isinstance(name, str) else None
    last = items[-1] if items else None
    return pick_tools(
        specs,
        allowed=choice != "none",
        forced=forced,
        parallel=body.get("parallel_tool_calls") is not False,
        after_tool_result=isinstance(last, dict) and last.get("type") == "function_call_output",
    )


def _text_format(body: dict[str, Any]) -> tuple[Any, Any]:
    """Read ``text.format`` as (type, schema)."""
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None, None
    return fmt.get("type"), fmt.get("schema")


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


@dataclass(frozen=True)
class ResponsesReply:
    """Hold everything a Responses answer is rendered from (see the module docstring)."""

    seq: int
    created_at: int
    model: str
    body: dict[str, Any]
    answer: Answer
    prompt: PromptUsage

    @property
    def status(self) -> str:
        return "incomplete" if self.answer.finish == "length" else "completed"

    def output(self) -> list[dict[str, Any]]:
        """Build the finished output items."""
        seq, answer = self.seq, self.answer
        items: list[dict[str, Any]] = []
        if answer.reasoning_tokens:
            items.append({"type": "reasoning", "id": f"rs_stub_{seq}", "summary": []})
        for i, call in enumerate(answer.calls):
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_stub_{seq}_{i}",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "status": "completed",
                }
            )
        if not answer.calls:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_stub_{seq}",
                    "status": self.status,
                    "role": "assistant",
                    "content": [_output_text("".join(answer.pieces))],
                }
            )
        return items

    def usage(self) -> dict[str, Any]:
        prompt, output_tokens = self.prompt, self.answer.output_tokens
        return {
            "input_tokens": prompt.total,
            # The SDK declares cache_write_tokens required; automatic caching writes none.
            "input_tokens_details": {"cached_tokens": prompt.cached, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.answer.reasoning_tokens},
            "total_tokens": prompt.total + output_tokens,
        }

    def response(
        self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Build the ``response`` object, echoing the request's fields."""
        body = self.body
        return {
            "id": f"resp_stub_{self.seq}",
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": INCOMPLETE_DETAILS if status == "incomplete" else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": _or(body.get("metadata"), {}),
            "model": self.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": _or(body.get("reasoning"), {"effort": None, "summary": None}),
            "store": body.get("store") is not False,
            "temperature": _or(body.get("temperature"), 1.0),
            "text": _or(body.get("text"), {"format": {"type": "text"}}),
            "tool_choice": _or(body.get("tool_choice"), "auto"),
            "tools": _as_list(body.get("tools")),
            "top_p": _or(body.get("top_p"), 1.0),
            "truncation": _or(body.get("truncation"), "disabled"),
            "usage": usage,
            "user": body.get("user"),
        }

    def message(self) -> dict[str, Any]:
        return self.response(self.status, self.output(), self.usage())

    def pieces(self) -> int:
        calls = self.answer.calls
        return 2 * len(calls) if calls else len(self.answer.pieces)

    def frames(self) -> Frames:
        numbers = itertools.count()

        def event(name: str, piece: bool = False, **fields: Any) -> tuple[bytes, bool]:
            return _event(name, sequence_number=next(numbers), **fields), piece

        start = self.response("in_progress", [], None)
        body = [
            event("response.created", response=start),
            event("response.in_progress", response=start),
        ]
        for index, item in enumerate(self.output()):
            body.extend(self._item_events(event, index, item))
        last = "response.incomplete" if self.status == "incomplete" else "response.completed"
        tail, _ = event(last, response=self.message())
        return body, [tail]

    def _item_events(
        self, event: Callable[..., tuple[bytes, bool]], index: int, item: dict[str, Any]
    ) -> list[tuple[bytes, bool]]:
        """List the events of one output item, from added to done."""
        kind = item["type"]
        if kind == "reasoning":
            return [
                event("response.output_item.added", output_index=index, item=item),
                event("response.output_item.done", output_index=index, item=item),
            ]
        at = {"item_id": item["id"], "output_index": index}
        if kind == "function_call":
            arguments = item["arguments"]
            started = {**item, "arguments": "", "status": "in_progress"}
            return [
                event("response.output_item.added", output_index=index, item=started),
                *(
                    event("response.function_call_arguments.delta", True, **at, delta=half)
                    for half in _halves(arguments)
                ),
                event("response.function_call_arguments.done", **at, arguments=arguments),
                event("response.output_item.done", output_index=index, item=item),
            ]
        part = item["content"][0]
        started = {**item, "status": "in_progress", "content": []}
        at = {**at, "content_index": 0}
        return [
            event("response.output_item.added", output_index=index, item=started),
            event("response.content_part.added", **at, part=_output_text("")),
            *(
                event("response.output_text.delta", True, **at, delta=piece, logprobs=[])
                for piece in self.answer.pieces
            ),
            event("response.output_text.done", **at, text=part["text"], logprobs=[]),
            event("response.content_part.done", **at, part=part),
            event("response.output_item.done", output_index=index, item=item),
        ]


def _make_reply(
    state: StubState,
    incoming: Incoming,
    items: list[Any],
    n_words: int,
    tools: list[tuple[str, Any]],
) -> ResponsesReply:
    """Read/write the prompt caches and decide the answer (after faults)."""
    body, model = incoming.body, incoming.model
    prompt = _prompt(state, model, body, items)
    seq = next(_ids)
    tokens = answer_tokens(model, n_words)
    reasoning = _reasoning_model(model) or body.get("reasoning") is not None
    answer = compose_answer(
        tokens,
        calls=tool_calls(tools, "call_stub", seq),
        json_text=json_answer(*_text_format(body), tokens),
        max_tokens=body.get("max_output_tokens"),
        stops=frozenset(),
        reasoning_tokens=REASONING_TOKENS if reasoning else 0,
    )
    return ResponsesReply(seq, int(time.time()), model, body, answer, prompt)


async def create_response(request: web.Request, shape: str) -> web.StreamResponse:
    """Answer ``POST .../responses``."""
    incoming = await _receive(request, shape, max_tokens_field="max_output_tokens")
    if not isinstance(incoming, Incoming):
        return incoming
    call, body = incoming.call, incoming.body
    refusal = _moved_parameter(body, shape)
    if refusal is not None:
        return _answer(call, refusal)
    items = input_items(body)
    if items is None:
        message = "input: a string or a list of input items is required."
        return _answer(call, vendor_error(shape, 400, message, param="input"))
    n_words = _answer_words(request)
    if isinstance(n_words, str):
        return _answer(call, vendor_error(shape, 400, n_words))
    tools = choose_function_tools(body, items)
    if isinstance(tools, str):
        return _answer(call, vendor_error(shape, 400, tools))
    state = request.app[STATE]
    return await _deliver(
        request, incoming, shape, lambda: _make_reply(state, incoming, items, n_words, tools)
    )
