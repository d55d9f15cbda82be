"""Stub vendor server: fakes OpenAI, Anthropic and two web vendors for tests and benchmarks.

Start it with ``python manage.py runstub --host 127.0.0.1 --port 8765`` or,
without Django, ``python -m stubvendor.server --host 127.0.0.1 --port 8765``
(``--port 0`` picks a free port; the first stdout line is always
``stub listening on http://HOST:PORT``).  In-process (tests)::

    with StubServer() as stub:        # background thread, free port
        httpx.post(stub.url + "/v1/chat/completions", ...)

Everything below is deterministic; the official SDKs (openai, anthropic) parse
every answer, streamed or not, including their parse/stream helpers.

Vendor routes
-------------
* ``POST .../chat/completions`` (any prefix): OpenAI chat completions.
  Key: ``Authorization: Bearer <key>``.
* ``POST .../messages`` (any prefix): Anthropic messages.
  Key: ``x-api-key: <key>`` (``Authorization: Bearer <key>`` also accepted).
* ``POST .../messages/count_tokens`` (any prefix): Anthropic token counting,
  ``{"input_tokens": N}`` with N the prompt tokens a messages call with that
  body would report as ``input_tokens`` + both cache fields (tools, images,
  documents included).  Recorded, key-checked, JSON-object body and
  ``model`` required, and subject to faults like messages (status faults and
  ``hang`` as usual; the drop kinds close the connection without a response;
  ``slow`` waits ``delay_ms`` once).  No answer tokens; it neither reads nor
  writes the prompt caches.
* ``POST .../responses`` (any prefix): the OpenAI Responses API, answered by
  the rules below (tools, JSON, reasoning, words, prompt tokens, caching,
  faults) read from its own fields; the contract is in
  ``stubvendor/responses.py``'s docstring.  Key: ``Authorization: Bearer <key>``.
* ``POST .../embeddings`` (any prefix): OpenAI embeddings, deterministic
  vectors (``embeddings.embedding_vector``); the contract is in
  ``stubvendor/embeddings.py``'s docstring.  Key: ``Authorization: Bearer <key>``.
* ``POST .../moderations`` (any prefix): OpenAI moderations, deterministic
  verdicts (``moderations.moderation_result``: the words ``violent`` and
  ``hateful`` flag, ``rude`` scores without flagging); the contract is in
  ``stubvendor/moderations.py``'s docstring.  Key: ``Authorization: Bearer <key>``.
* Azure OpenAI (``stubvendor/azure.py``, whose docstring is the contract):
  ``POST .../openai/deployments/{deployment}/chat/completions`` and
  ``.../embeddings`` and ``POST .../openai/responses``, each with an
  ``api-version`` query parameter (without it: Azure's 404 ``{"error":
  {"code": "404", "message": "Resource not found"}}``), and ``POST
  .../openai/v1/chat/completions``, ``/responses``, ``/embeddings`` when signed
  with ``api-key`` (or given an ``api-version``; otherwise they are OpenAI's
  routes above).  Served by the OpenAI handlers here (answers, tokens,
  streaming, tools, faults); key ``api-key: <key>`` (missing/empty: 401 in
  Azure's shape); the deployment is the call's ``model``; the calls log adds
  ``api_version``.  Content filter: a body containing ``FILTERME`` answers
  Azure's 400 ``content_filter`` refusal; a chat body containing
  ``FILTERANSWER`` ends with ``finish_reason: "content_filter"``.
* AWS Bedrock (``stubvendor/bedrock.py``, whose docstring is the contract):
  ``POST .../model/{modelId}/converse`` and ``.../converse-stream`` (the
  stream in AWS event-stream framing), each checked for a SigV4 signature by
  the test credentials (``$STUB_AWS_CREDENTIALS``; 403 ``{"message"}`` when
  it does not match); the word and token rules here, Converse's fields and
  explicit ``cachePoint`` caching; faults as below, in Bedrock's error shape.
* ``GET .../models`` (any prefix): ``{"object": "list", "data": [{"id":
  "stub-model", "object": "model", "created": 0, "owned_by": "stub"}]}``.
  Key-checked like the others (OpenAI or Anthropic header), recorded in the
  calls log with ``model: null`` and subject to queued faults (so a fault with
  ``match.model`` is never consumed by it).  Errors use the Anthropic shape
  when the request carries ``x-api-key`` or ``anthropic-version``.
* ``POST .../v1beta/models/{model}:generateContent`` / ``:streamGenerateContent``
  (the Gemini API, key ``x-goog-api-key``), the same under ``.../v1/projects/{p}/
  locations/{l}/publishers/google/models/{model}`` (Vertex AI, a bearer token from
  ``POST /_stub/google/token``, the JWT-bearer grant), and ``POST
  /_stub/google/keys``: Google's shapes, errors and OAuth; the contract is in
  ``stubvendor/gemini.py``'s docstring.
* ``POST .../render`` and ``POST .../search`` (any prefix): the web vendors, a
  JavaScript renderer (the stub loads the page and applies its inner-HTML
  assignment scripts) and a search API (results recomputable from the
  query); recorded with ``shape: "web"`` and ``model: null``, key-checked,
  subject to faults, errors ``{"error": {"message", "type"}}``; the contract
  is in ``stubvendor/web.py``'s docstring.  Key: ``Authorization: Bearer <key>``.

Key check: a missing or empty key answers 401 in the vendor's error shape.  If
``STUB_ACCEPT_KEYS`` (comma separated) is set when the app is built, only those
keys are accepted (others: 401, message echoing the key); otherwise any
non-empty key is accepted.  The key check happens before faults: a rejected
call does not consume a queued fault.  A body that is not a JSON object, or a
missing/empty ``model``, answers 400 (the call is still recorded).  So do, also
before faults: a reasoning model's ``max_tokens`` and a too-large thinking
budget (see Answer), a ``tool_choice`` naming a tool that is not in a given
``tools``, and a non-integer ``x-stub-words`` header.

Every other request field (``seed``, ``temperature``, ``presence_penalty``,
``frequency_penalty``, ``logit_bias``, ``metadata``, ``top_k``,
``service_tier``, ``user``, ``store``, ...) is accepted, ignored, and visible in
the recorded body.

Prompt tokens
-------------
* Words (``str.split()``) over every text: OpenAI ``messages[].content``
  (tool results, role ``tool``, included); Anthropic ``system`` plus
  ``messages[].content``.  A content/system value is a string or a list of
  parts/blocks: ``text`` parts count their words; an Anthropic
  ``tool_result`` block counts its ``content`` the same way (string, or text /
  image / document blocks); other parts (tool_use, thinking, input_audio, ...)
  count 0.
* Each OpenAI ``image_url`` part and Anthropic ``image`` block: +85.  Each
  OpenAI ``file`` part and Anthropic ``document`` block: +100.
* Each entry of ``tools``: +10.
* Minimum 1.  This total (P) is what OpenAI reports as ``prompt_tokens``
  (cached tokens included) and what Anthropic splits into ``input_tokens`` +
  ``cache_creation_input_tokens`` + ``cache_read_input_tokens``.

Prompt caching
--------------
* Anthropic (explicit): a ``cache_control`` key (not null) on an entry of
  ``tools``, a ``system`` block or a top-level ``messages[].content`` block
  marks a prefix: everything in the order tools -> system -> messages up to and
  including the LAST marked block.  Its key is (model, canonical JSON of that
  prefix with those blocks' ``cache_control`` removed; a message block carries
  its message's index and role).  First time: ``cache_creation_input_tokens``
  = the prefix's prompt tokens, and the key is remembered; later:
  ``cache_read_input_tokens`` = those tokens.  ``input_tokens`` = P minus the
  prefix's tokens.  No marked block: both fields 0, ``input_tokens`` = P.
* OpenAI (automatic): for every k >= 1 with k < len(messages), if the first k
  messages are the same (canonical JSON) as the first k messages of an earlier
  call to the same model and carry >= 64 prompt tokens (tools not counted),
  ``prompt_tokens_details.cached_tokens`` = the prompt tokens of the longest
  such prefix, else 0.  Every call's prefixes (k = 1..len, the whole list
  included) are remembered.
* The caches belong to the app (one per stub process); ``DELETE /_stub/calls``
  clears them.  A call answered by a status fault or ``hang``, or refused with
  400/401, neither reads nor writes them (a call dropped by ``fail_*`` does).

Answer
------
An answer is tool calls, a JSON text or the usual words, in that order of
precedence.

* Words: ``Hello from the stub model <model> reply ok`` (8 words, where
  ``<model>`` is the request's ``model`` string, counted as one word).  Request
  header ``x-stub-words: N`` makes the answer N words long, repeating those 8
  words cyclically.  Streamed tokens are ``"Hello"``, ``" from"``, ``" the"``,
  ... (every word after the first has one leading space); the answer text is
  their concatenation.
* Stop (OpenAI ``stop``: a string or a list; Anthropic ``stop_sequences``):
  the answer ends before the first word whose stripped text equals a stop
  string; finish reason ``stop`` / Anthropic ``stop_reason: "stop_sequence"``
  with ``stop_sequence`` set to that string (otherwise null).
* Max tokens (OpenAI ``max_completion_tokens``, else ``max_tokens``; Anthropic
  ``max_tokens``): when it is an int smaller than the number of words left,
  only that many words are emitted and the finish reason is ``length``
  (OpenAI) / ``max_tokens`` (Anthropic; ``stop_sequence`` null); otherwise
  ``stop`` / ``end_turn`` (or the stop sequence).
* Tool calls: when ``tools`` is given, ``tool_choice`` does not disable them
  (OpenAI ``"none"``, Anthropic ``{"type": "none"}``), and the last message is
  not a tool result (OpenAI: role ``tool``; Anthropic: a user message whose
  content list holds a ``tool_result`` block), the answer calls: the tool
  ``tool_choice`` names (OpenAI ``{"type": "function", "function": {"name"}}``,
  Anthropic ``{"type": "tool", "name"}``); else the first TWO tools when
  parallel calls are allowed (OpenAI ``parallel_tool_calls`` not false,
  Anthropic ``disable_parallel_tool_use`` not true) and at least two are
  given; else the first tool.  ``"auto"`` / ``"required"`` / ``"any"`` /
  absent all call.  Callable tools: OpenAI ``{"type": "function", "function":
  {"name", "parameters"?}}``; Anthropic any tool with a ``name``
  (``input_schema``).  Ids: OpenAI ``call_stub_<n>_<i>``, Anthropic
  ``toolu_stub_<n>_<i>`` (``<n>`` as in the response id, ``i`` the call index
  from 0).  Max tokens and stop do not apply.  Finish: OpenAI ``tool_calls``
  (message ``content`` null), Anthropic ``tool_use``.
* Arguments / input = the value built from the tool's JSON schema: ``$ref``
  (local, ``#/...``) is resolved; ``enum`` -> its first value; ``const`` -> its
  value; by ``type`` (a list: its first non-``"null"`` entry; none but
  ``properties``/``required`` present: ``object``): string -> ``"stub"``,
  integer -> 1, number -> 1.5, boolean -> true, array -> [], object -> every
  name in ``required`` (in that order) built from ``properties[name]``;
  anything else (``anyOf``, no schema, a missing property) -> null.  A
  result that is not an object becomes ``{}``.  OpenAI ``arguments`` is it
  serialized compactly (``{"city":"stub","days":1}``).
* JSON mode (OpenAI ``response_format``): ``{"type": "json_object"}`` ->
  content ``{"answer":"<the x-stub-words answer text>"}``;
  ``{"type": "json_schema", "json_schema": {"schema": ...}}`` -> the object
  built from ``schema`` by the arguments rule; both serialized compactly,
  never cut by max tokens or stop (finish ``stop``).  ``{"type": "text"}``
  changes nothing.  Streamed in pieces of 8 characters (the last may be
  shorter).
* Anthropic ``thinking: {"type": "enabled", "budget_tokens": B}``: the
  content starts with ``{"type": "thinking", "thinking": "Stub thinking about
  it.", "signature": "stub-signature"}``; with an int ``max_tokens`` <= B the
  call answers 400 ``max_tokens must be greater than
  thinking.budget_tokens``.
* OpenAI reasoning: a model matching ``^(o\\d|gpt-5)`` given a non-null
  ``max_tokens`` answers 400 ``{"error": {"message": "Unsupported parameter:
  'max_tokens' is not supported with this model. Use 'max_completion_tokens'
  instead.", "type": "invalid_request_error", "param": "max_tokens", "code":
  "unsupported_parameter"}}``.  Such a model, or any model given a non-null
  ``reasoning_effort``, reports 16 reasoning tokens per choice, spent from
  the output cap first (as OpenAI counts them): with a cap C, min(16, C)
  reasoning tokens and at most C minus those words.
* OpenAI ``n`` (an int >= 1, else 1): n identical choices (index 0..n-1, the
  same tool call ids).
* OpenAI ``logprobs: true``: each choice carries ``logprobs: {"content":
  [<entry per content piece>], "refusal": null}`` (tool calls: ``[]``), an
  entry being ``{"token", "logprob": -0.5, "bytes": <its UTF-8 bytes>,
  "top_logprobs": [{"token", "logprob": -1.5, "bytes"} x top_logprobs]}``
  (same token; ``top_logprobs`` default 0).  ``logprobs`` present but not true:
  ``"logprobs": null``; absent: no ``logprobs`` key (as before).

Output tokens
-------------
Per choice: words emitted; a JSON answer: its number of 8-character pieces; a
tool-call answer: 5 per call.  Plus 4 when Anthropic thinking is on (the
thinking block's words), plus the reasoning tokens for OpenAI reasoning (chat
completions: within the cap, see Answer; the Responses API: on top of the
emitted words).  OpenAI
``completion_tokens`` = n x that, ``completion_tokens_details.reasoning_tokens``
= n x 16 (or 0).

Responses
---------
* OpenAI: ``{"id": "chatcmpl-stub-<n>", "object": "chat.completion",
  "created", "model", "choices": [{"index": i, "message": {"role":
  "assistant", "content": text}, "finish_reason": fr}], "usage":
  {"prompt_tokens": P, "completion_tokens": C, "total_tokens": P + C,
  "prompt_tokens_details": {"cached_tokens": K}, "completion_tokens_details":
  {"reasoning_tokens": R}}}``; a tool-call message is ``{"role": "assistant",
  "content": null, "tool_calls": [{"id", "type": "function", "function":
  {"name", "arguments"}}]}``; a choice has ``logprobs`` as above.
  Stream (``"stream": true``): ``data: <chunk>\\n\\n`` lines of
  ``chat.completion.chunk`` objects.  For each choice in turn: a first chunk
  with delta ``{"role": "assistant", "content": ""}`` (tool calls: ``"content":
  null``), then one chunk per piece: delta ``{"content": token}`` for words
  and JSON pieces; for each tool call i a chunk with delta ``{"tool_calls":
  [{"index": i, "id", "type": "function", "function": {"name", "arguments":
  ""}}]}`` and two with ``{"tool_calls": [{"index": i, "function":
  {"arguments": half}}]}`` (the arguments split at len // 2).  Then one chunk
  per choice with empty delta and ``finish_reason``.  Each chunk's choice
  carries its ``index`` (and, when the request has ``logprobs``, ``logprobs``:
  the piece's entry on content chunks, else null).  With
  ``stream_options.include_usage`` every chunk so far carries ``"usage":
  null`` and one more chunk follows with ``"choices": []`` and the usage;
  finally ``data: [DONE]\\n\\n``.
* Anthropic: ``{"id": "msg_stub_<n>", "type": "message", "role": "assistant",
  "model", "content": [...], "stop_reason", "stop_sequence", "usage":
  {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
  "output_tokens"}}``; content is the thinking block (if on), then either
  ``{"type": "text", "text": text}`` or one ``{"type": "tool_use", "id",
  "name", "input"}`` per call.  Stream: ``event: <name>\\ndata: <json>\\n\\n``
  for ``message_start`` (the usage with output 1), then per content block at
  index 0, 1, ...: ``content_block_start``, (after the first one only)
  ``ping``, its ``content_block_delta``s, ``content_block_stop``; then
  ``message_delta`` (stop_reason, stop_sequence, ``usage: {"output_tokens":
  C}``), ``message_stop``.  Blocks: thinking starts as ``{"type": "thinking",
  "thinking": "", "signature": ""}`` with one ``thinking_delta`` per word
  (``"Stub"``, ``" thinking"``, ...) and one ``signature_delta``; text starts
  as ``{"type": "text", "text": ""}`` with one ``text_delta`` per token;
  tool_use starts as ``{"type": "tool_use", "id", "name", "input": {}}`` with
  two ``input_json_delta``s (``partial_json``: the compact input JSON split
  at len // 2).
* ``<n>`` is a process-wide counter (never reset).
* Errors: OpenAI ``{"error": {"message", "type", "param", "code"}}`` (param
  null unless said above), Anthropic ``{"type": "error", "error": {"type",
  "message"}}``.

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

import argparse
import asyncio
import contextvars
import hashlib
import itertools
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol, Self

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
# Refusals of the request itself (the vendor's 4xx a client can fix): kind -> status.
REFUSAL_KINDS = {"400": 400, "404": 404, "413": 413, "422": 422}
REFUSAL_MESSAGE = "The request was refused (stub fault)."
REFUSAL_MESSAGE_MAX_CHARS = 10_000
FAULT_KINDS = frozenset(
    {
        "429",
        "401",
        "403",
        "500",
        *REFUSAL_KINDS,
        "hang",
        "fail_before_first_token",
        "fail_after_tokens",
        "slow",
        "ignore_cap",
    }
)
# A vendor that bills past the output cap it was sent: the call is answered as if it had
# none (the fields below are dropped from what the answer is built from, not from the log).
UNCAPPED_FIELDS = frozenset({"max_tokens", "max_completion_tokens", "max_output_tokens"})
DROP_KINDS = frozenset({"fail_before_first_token", "fail_after_tokens"})
_BASE_WORDS = ("Hello", "from", "the", "stub", "model", None, "reply", "ok")
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_ids = itertools.count(1)

# Token accounting (see the module docstring).
IMAGE_TOKENS = 85
DOCUMENT_TOKENS = 100
TOOL_DEFINITION_TOKENS = 10
TOOL_CALL_TOKENS = 5
REASONING_TOKENS = 16
JSON_PIECE_CHARS = 8
OPENAI_CACHE_MIN_TOKENS = 64
REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")
THINKING_WORDS = ("Stub", "thinking", "about", "it.")
THINKING_SIGNATURE = "stub-signature"
LOGPROB = -0.5
TOP_LOGPROB = -1.5
MAX_TOKENS_UNSUPPORTED = (
    "Unsupported parameter: 'max_tokens' is not supported with this model. "
    "Use 'max_completion_tokens' instead."
)
THINKING_BUDGET_TOO_LARGE = "max_tokens must be greater than thinking.budget_tokens"
# Per content dialect ("responses": the Responses API's input parts): the part types
# whose ``text`` counts its words, and the part types with a fixed count.
_TEXT_PART_TYPES = {
    "openai": frozenset({"text"}),
    "anthropic": frozenset({"text"}),
    "responses": frozenset({"input_text", "output_text"}),
}
_FIXED_PART_TOKENS = {
    "openai": {"image_url": IMAGE_TOKENS, "file": DOCUMENT_TOKENS},
    "anthropic": {"image": IMAGE_TOKENS, "document": DOCUMENT_TOKENS},
    "responses": {"input_image": IMAGE_TOKENS, "input_file": DOCUMENT_TOKENS},
}


class StubState:
    """Hold one app's calls log, fault queue and prompt caches."""

    def __init__(self, accept_keys: frozenset[str] | None) -> None:
        self.accept_keys = accept_keys
        self.calls: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        # (model, digest of a message prefix) seen by earlier OpenAI calls
        self.openai_prefixes: set[tuple[str, bytes]] = set()
        # the same for Responses API input items (apart: they are not chat messages)
        self.responses_prefixes: set[tuple[str, bytes]] = set()
        # (model, digest of a cache_control prefix) written by earlier Anthropic calls
        self.anthropic_prefixes: set[tuple[str, bytes]] = set()
        # Gemini / Vertex (stubvendor/gemini.py): content prefixes seen (cleared like the
        # others); tokens issued (token -> (service account, expiry)) and public keys
        # registered by email, both kept across clears (a gateway keeps its token).
        self.gemini_prefixes: set[tuple[str, bytes]] = set()
        self.google_tokens: dict[str, tuple[str, float]] = {}
        self.google_keys: dict[str, dict[str, Any]] = {}

    def record(self, body: Any = None, **fields: Any) -> dict[str, Any]:
        call = {
            "seq": len(self.calls) + 1,
            **fields,
            "fault": None,
            "status": None,
            "body": body,
            "traceparent": INBOUND_TRACEPARENT.get(),
        }
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
        self.openai_prefixes.clear()
        self.responses_prefixes.clear()
        self.anthropic_prefixes.clear()
        self.gemini_prefixes.clear()


STATE = web.AppKey("stub_state", StubState)


class Dialect(Protocol):
    """A vendor that speaks OpenAI's bodies on paths and headers of its own (Azure:
    stubvendor/azure.py): the OpenAI handlers serve its calls and ask it these."""

    key_header: str  # the header that carries the key
    path_model: str | None  # the model its path names (a deployment); None: the body's
    recorded: dict[str, Any]  # what the calls log keeps of a call beyond the usual fields

    def refuse(
        self, state: StubState, key: str | None, body: dict[str, Any]
    ) -> web.Response | None:
        """Refuse a recorded call in the dialect's own error shape (its key check too)."""
        ...

    def adjust(self, reply: Rendered) -> Rendered:
        """Return the reply as the dialect sends it."""
        ...


DIALECT = web.RequestKey("stub_dialect", Dialect)


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
    413: ("invalid_request_error", "request_too_large", "request_too_large"),
    422: ("invalid_request_error", None, "invalid_request_error"),
    429: ("requests", "rate_limit_exceeded", "rate_limit_error"),
    500: ("server_error", None, "api_error"),
}
# Google's canonical status names, for the Gemini and Vertex error shape (stubvendor/gemini.py).
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
}
GOOGLE_SHAPES = frozenset({"gemini", "vertex"})


def vendor_error(
    shape: str,
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> web.Response:
    """Build an error response in the vendor's own body shape.

    ``param`` / ``code`` override the OpenAI fields (default null / the status's code).
    """
    oa_type, oa_code, an_type = _ERROR_TYPES[status]
    if shape in GOOGLE_SHAPES:
        google = {"code": status, "message": message, "status": _GOOGLE_STATUS[status]}
        return _json(status, {"error": google}, headers)
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
                "param": param,
                "code": code if code is not None else oa_code,
            }
        }
    return _json(status, body, headers)


def _extract_key(request: web.Request, shape: str) -> tuple[str | None, str | None]:
    """Return (key or None, raw header value it came from)."""
    headers = request.headers
    dialect = request.get(DIALECT)
    if dialect is not None:
        raw = headers.get(dialect.key_header)
        return (raw.strip() or None) if raw is not None else None, raw
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def _max_tokens(body: dict[str, Any], shape: str) -> Any:
    if shape == "openai" and body.get("max_completion_tokens") is not None:
        return body["max_completion_tokens"]
    return body.get("max_tokens")


def _user(body: dict[str, Any], shape: str) -> Any:
    if shape == "anthropic":
        meta = body.get("metadata")
        return meta.get("user_id") if isinstance(meta, dict) else None
    return body.get("user")


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


# --------------------------------------------------------------------------- prompt tokens


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def _part_tokens(part: Any, shape: str) -> int:
    """Tokens of one content part / block: text words, a fixed count for media, else 0."""
    if not isinstance(part, dict):
        return 0
    kind = part.get("type")
    if kind in _TEXT_PART_TYPES[shape]:
        return _words(part.get("text"))
    if shape == "anthropic" and kind == "tool_result":
        return _content_tokens(part.get("content"), shape)
    return _FIXED_PART_TOKENS[shape].get(kind, 0)


def _content_tokens(content: Any, shape: str) -> int:
    """Tokens of a content value: a string (its words) or a list of parts."""
    if isinstance(content, str):
        return _words(content)
    return sum(_part_tokens(part, shape) for part in _as_list(content))


def _message_tokens(message: Any, shape: str) -> int:
    return _content_tokens(message.get("content"), shape) if isinstance(message, dict) else 0


class _Unit(NamedTuple):
    """One piece of an Anthropic prompt, in cache-prefix order (tools, system, messages)."""

    item: Any  # what identifies it in a cache key (cache_control removed)
    tokens: int
    marked: bool  # carries cache_control


def _without_cache_control(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


def _anthropic_units(body: dict[str, Any]) -> list[_Unit]:
    units = [
        _Unit({"tool": _without_cache_control(t)}, TOOL_DEFINITION_TOKENS, _marked(t))
        for t in _as_list(body.get("tools"))
    ]
    system = body.get("system")
    if isinstance(system, str):
        units.append(_Unit({"system": system}, _words(system), False))
    for block in _as_list(system):
        units.append(
            _Unit(
                {"system": _without_cache_control(block)},
                _part_tokens(block, "anthropic"),
                _marked(block),
            )
        )
    for i, message in enumerate(_as_list(body.get("messages"))):
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if not isinstance(content, list):
            units.append(
                _Unit({"message": i, "role": role, "content": content}, _words(content), False)
            )
            continue
        for block in content:
            item = {"message": i, "role": role, "block": _without_cache_control(block)}
            units.append(_Unit(item, _part_tokens(block, "anthropic"), _marked(block)))
    return units


def count_prompt_tokens(body: dict[str, Any], shape: str) -> int:
    """Count the request's prompt tokens (cached ones included; minimum 1).

    Words over every text (message contents, Anthropic ``system``, tool
    results), plus fixed counts for images, documents and tool definitions.
    """
    if shape == "anthropic":
        return max(sum(unit.tokens for unit in _anthropic_units(body)), 1)
    messages = sum(_message_tokens(m, shape) for m in _as_list(body.get("messages")))
    tools = TOOL_DEFINITION_TOKENS * len(_as_list(body.get("tools")))
    return max(messages + tools, 1)


@dataclass(frozen=True)
class PromptUsage:
    """A call's prompt tokens: ``total`` includes every cached token."""

    total: int
    cached: int = 0  # OpenAI prompt_tokens_details.cached_tokens
    cache_creation: int = 0  # Anthropic cache_creation_input_tokens
    cache_read: int = 0  # Anthropic cache_read_input_tokens


def cached_prefix_tokens(
    seen: set[tuple[str, bytes]], model: str, items: list[Any], tokens: list[int]
) -> int:
    """OpenAI's automatic caching over ``items`` (each with its ``tokens``).

    Return the tokens of the longest proper prefix of >= 64 tokens that ``seen``
    holds for ``model``, else 0; then remember every prefix in ``seen``.
    """
    cached = running = 0
    digest = b""
    keys = []
    for k, (item, item_tokens) in enumerate(zip(items, tokens, strict=True), 1):
        running += item_tokens
        digest = hashlib.sha256(digest + _canonical(item)).digest()
        key = (model, digest)
        if k < len(items) and running >= OPENAI_CACHE_MIN_TOKENS and key in seen:
            cached = running
        keys.append(key)
    seen.update(keys)
    return cached


def _openai_prompt(state: StubState, model: str, body: dict[str, Any]) -> PromptUsage:
    """Automatic caching: the longest earlier-seen proper message prefix of >= 64 tokens."""
    messages = _as_list(body.get("messages"))
    tokens = [_message_tokens(m, "openai") for m in messages]
    cached = cached_prefix_tokens(state.openai_prefixes, model, messages, tokens)
    return PromptUsage(count_prompt_tokens(body, "openai"), cached=cached)


def _anthropic_prompt(state: StubState, model: str, body: dict[str, Any]) -> PromptUsage:
    """Explicit caching: the prefix up to the last block carrying ``cache_control``."""
    units = _anthropic_units(body)
    total = max(sum(unit.tokens for unit in units), 1)
    marks = [i for i, unit in enumerate(units) if unit.marked]
    if not marks:
        return PromptUsage(total)
    prefix = units[: marks[-1] + 1]
    tokens = sum(unit.tokens for unit in prefix)
    key = (model, hashlib.sha256(_canonical([unit.item for unit in prefix])).digest())
    if key in state.anthropic_prefixes:
        return PromptUsage(total, cache_read=tokens)
    state.anthropic_prefixes.add(key)
    return PromptUsage(total, cache_creation=tokens)


# --------------------------------------------------------------------------- schemas, tools


_SCHEMA_MAX_DEPTH = 32


def _resolve_ref(root: Any, ref: str) -> Any:
    """Resolve a local JSON pointer (``#/$defs/Name``) against the root schema."""
    if not ref.startswith("#"):
        return None
    node = root
    for raw in ref[1:].split("/")[1:]:
        name = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
    return node


def _object_example(schema: dict[str, Any], root: Any, depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    return {
        name: example_from_schema(properties.get(name), root, depth + 1)
        for name in _as_list(schema.get("required"))
        if isinstance(name, str)
    }


_EXAMPLES: dict[str, Callable[[dict[str, Any], Any, int], Any]] = {
    "string": lambda s, r, d: "stub",
    "integer": lambda s, r, d: 1,
    "number": lambda s, r, d: 1.5,
    "boolean": lambda s, r, d: True,
    "array": lambda s, r, d: [],
    "object": _object_example,
}


def _schema_type(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and ("properties" in schema or "required" in schema):
        kind = "object"
    return kind


def example_from_schema(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """Build the deterministic value a JSON schema asks for (see the module docstring)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > _SCHEMA_MAX_DEPTH:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return example_from_schema(_resolve_ref(root, ref), root, depth + 1)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "const" in schema:
        return schema["const"]
    build = _EXAMPLES.get(_schema_type(schema))
    return build(schema, root, depth) if build is not None else None


def tool_arguments(schema: Any) -> dict[str, Any]:
    """Arguments for a tool call (or a json_schema answer): an object, ``{}`` at least."""
    value = example_from_schema(schema)
    return value if isinstance(value, dict) else {}


def _tool_specs(body: dict[str, Any], shape: str) -> list[tuple[str, Any]]:
    """(name, parameter schema) of every callable tool, in request order."""
    specs = []
    for tool in _as_list(body.get("tools")):
        if not isinstance(tool, dict):
            continue
        if shape == "anthropic":
            if isinstance(tool.get("name"), str):
                specs.append((tool["name"], tool.get("input_schema")))
            continue
        function = tool.get("function")
        if (
            tool.get("type", "function") == "function"
            and isinstance(function, dict)
            and isinstance(function.get("name"), str)
        ):
            specs.append((function["name"], function.get("parameters")))
    return specs


def _tool_choice(body: dict[str, Any], shape: str) -> tuple[bool, str | None, bool]:
    """Return (tools may be called, forced tool name or None, parallel calls allowed)."""
    choice = body.get("tool_choice")
    if shape == "openai":
        forced = None
        if isinstance(choice, dict) and choice.get("type") == "function":
            function = choice.get("function")
            forced = function.get("name") if isinstance(function, dict) else None
        parallel = body.get("parallel_tool_calls") is not False
        return choice != "none", forced if isinstance(forced, str) else None, parallel
    choice = choice if isinstance(choice, dict) else {}
    kind = choice.get("type")
    forced = choice.get("name") if kind == "tool" else None
    parallel = choice.get("disable_parallel_tool_use") is not True
    return kind != "none", forced if isinstance(forced, str) else None, parallel


def _last_is_tool_result(body: dict[str, Any], shape: str) -> bool:
    messages = _as_list(body.get("messages"))
    last = messages[-1] if messages else None
    if not isinstance(last, dict):
        return False
    if shape == "openai":
        return last.get("role") == "tool"
    return last.get("role") == "user" and any(
        isinstance(block, dict) and block.get("type") == "tool_result"
        for block in _as_list(last.get("content"))
    )


def pick_tools(
    specs: list[tuple[str, Any]],
    *,
    allowed: bool,
    forced: str | None,
    parallel: bool,
    after_tool_result: bool,
) -> list[tuple[str, Any]] | str:
    """Choose the tools the answer calls ([] = answer text), or say why tool_choice is bad."""
    if not specs or not allowed:
        return []
    if forced is not None:
        chosen = [spec for spec in specs if spec[0] == forced][:1]
        if not chosen:
            return f"tool_choice names a tool that is not in tools: {forced!r}."
    elif parallel and len(specs) >= 2:
        chosen = specs[:2]
    else:
        chosen = specs[:1]
    return [] if after_tool_result else chosen


def choose_tools(body: dict[str, Any], shape: str) -> list[tuple[str, Any]] | str:
    """Choose the tools of a chat / messages answer (see ``pick_tools``)."""
    allowed, forced, parallel = _tool_choice(body, shape)
    return pick_tools(
        _tool_specs(body, shape),
        allowed=allowed,
        forced=forced,
        parallel=parallel,
        after_tool_result=_last_is_tool_result(body, shape),
    )


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]
    arguments: str  # ``input`` as compact JSON


@dataclass
class Answer:
    """One choice's answer, independent of the vendor shape."""

    pieces: list[str] = field(default_factory=list)  # streamed content pieces
    calls: list[ToolCall] = field(default_factory=list)
    finish: str = "stop"  # stop | length | stop_sequence | tool_calls
    stop_sequence: str | None = None
    thinking: bool = False  # Anthropic: a thinking block comes first
    reasoning_tokens: int = 0  # OpenAI: hidden reasoning tokens

    @property
    def output_tokens(self) -> int:
        visible = TOOL_CALL_TOKENS * len(self.calls) if self.calls else len(self.pieces)
        thinking = len(THINKING_WORDS) if self.thinking else 0
        return visible + thinking + self.reasoning_tokens


def _spaced(words: Iterable[str]) -> list[str]:
    return [word if i == 0 else " " + word for i, word in enumerate(words)]


def answer_tokens(model: str, n_words: int) -> list[str]:
    """Return the first ``n_words`` streamed tokens ("Hello", " from", ...)."""
    words = [model if w is None else w for w in _BASE_WORDS]
    return _spaced(words[i % 8] for i in range(n_words))


def _stop_strings(body: dict[str, Any], shape: str) -> frozenset[str]:
    raw = body.get("stop" if shape == "openai" else "stop_sequences")
    if isinstance(raw, str):
        return frozenset({raw})
    return frozenset(s for s in _as_list(raw) if isinstance(s, str))


def _text_answer(tokens: list[str], max_tokens: Any, stops: frozenset[str]) -> Answer:
    """Cut at the first word equal to a stop string, then at max tokens."""
    answer = Answer(tokens)
    for i, token in enumerate(tokens):
        if token.strip() in stops:
            answer = Answer(tokens[:i], finish="stop_sequence", stop_sequence=token.strip())
            break
    if _is_int(max_tokens) and max_tokens < len(answer.pieces):
        return Answer(answer.pieces[: max(max_tokens, 0)], finish="length")
    return answer


def json_answer(kind: Any, schema: Any, tokens: list[str]) -> str | None:
    """Build the JSON-mode answer for a format ``kind`` (and its schema); None for text."""
    if kind == "json_object":
        return orjson.dumps({"answer": "".join(tokens)}).decode()
    if kind == "json_schema":
        return orjson.dumps(tool_arguments(schema)).decode()
    return None


def _response_format(body: dict[str, Any]) -> tuple[Any, Any]:
    """Read chat's ``response_format`` as (type, json_schema.schema)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None, None
    spec = fmt.get("json_schema")
    return fmt.get("type"), spec.get("schema") if isinstance(spec, dict) else None


def _thinking_budget(body: dict[str, Any]) -> int | None:
    """Anthropic extended thinking: budget_tokens when enabled (0 if not an int), else None."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    return budget if _is_int(budget) else 0


def _reasoning_model(model: str) -> bool:
    return REASONING_MODELS.match(model) is not None


def tool_calls(tools: list[tuple[str, Any]], prefix: str, seq: int) -> list[ToolCall]:
    """Call every chosen tool with its schema's arguments; ids ``<prefix>_<seq>_<i>``."""
    calls = []
    for i, (name, schema) in enumerate(tools):
        args = tool_arguments(schema)
        calls.append(ToolCall(f"{prefix}_{seq}_{i}", name, args, orjson.dumps(args).decode()))
    return calls


def compose_answer(
    tokens: list[str],
    *,
    calls: list[ToolCall],
    json_text: str | None,
    max_tokens: Any,
    stops: frozenset[str],
    reasoning_tokens: int = 0,
    thinking: bool = False,
) -> Answer:
    """Answer tool calls, else the JSON text (in 8-character pieces), else the cut words."""
    extra: dict[str, Any] = {"reasoning_tokens": reasoning_tokens, "thinking": thinking}
    if calls:
        return Answer(calls=calls, finish="tool_calls", **extra)
    if json_text is not None:
        size = JSON_PIECE_CHARS
        return Answer([json_text[i : i + size] for i in range(0, len(json_text), size)], **extra)
    return replace(_text_answer(tokens, max_tokens, stops), **extra)


def build_answer(
    body: dict[str, Any],
    shape: str,
    model: str,
    n_words: int,
    seq: int,
    tools: list[tuple[str, Any]],
) -> Answer:
    """Decide what a chat / messages call answers: tool calls, a JSON text or the words."""
    tokens = answer_tokens(model, n_words)
    if shape == "openai":
        reasoning = _reasoning_model(model) or body.get("reasoning_effort") is not None
        cap = _max_tokens(body, shape)
        thought = REASONING_TOKENS if reasoning else 0
        if _is_int(cap):
            # As OpenAI: reasoning spends from the cap first, the words get what is left.
            thought = min(thought, max(cap, 0))
            cap -= thought
        return compose_answer(
            tokens,
            calls=tool_calls(tools, "call_stub", seq),
            json_text=json_answer(*_response_format(body), tokens),
            max_tokens=cap,
            stops=_stop_strings(body, shape),
            reasoning_tokens=thought,
        )
    return compose_answer(
        tokens,
        calls=tool_calls(tools, "toolu_stub", seq),
        json_text=None,
        max_tokens=_max_tokens(body, shape),
        stops=_stop_strings(body, shape),
        thinking=_thinking_budget(body) is not None,
    )


def _halves(text: str) -> list[str]:
    cut = len(text) // 2
    return [text[:cut], text[cut:]]


def _piece_count(answer: Answer, shape: str, n: int) -> int:
    """How many streamed pieces the answer has (what ``slow`` / ``fail_after_tokens`` count)."""
    if shape == "openai":
        return n * (3 * len(answer.calls) if answer.calls else len(answer.pieces))
    thinking = len(THINKING_WORDS) + 1 if answer.thinking else 0
    return thinking + (2 * len(answer.calls) if answer.calls else len(answer.pieces))


# --------------------------------------------------------------------------- OpenAI rendering


_OPENAI_FINISH = {
    "stop": "stop",
    "length": "length",
    "stop_sequence": "stop",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",  # Azure's filtered answer (stubvendor/azure.py)
}


@dataclass(frozen=True)
class OpenAIOptions:
    n: int = 1
    logprobs: bool | None = None  # None: the request has no ``logprobs`` field
    top_logprobs: int = 0
    include_usage: bool = False

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> OpenAIOptions:
        n, top = body.get("n"), body.get("top_logprobs")
        return cls(
            n=n if _is_int(n) and n >= 1 else 1,
            logprobs=(body.get("logprobs") is True) if "logprobs" in body else None,
            top_logprobs=top if _is_int(top) and top >= 0 else 0,
            include_usage=_include_usage(body),
        )


def _openai_usage(prompt: PromptUsage, answer: Answer, n: int) -> dict[str, Any]:
    completion = n * answer.output_tokens
    return {
        "prompt_tokens": prompt.total,
        "completion_tokens": completion,
        "total_tokens": prompt.total + completion,
        "prompt_tokens_details": {"cached_tokens": prompt.cached},
        "completion_tokens_details": {"reasoning_tokens": n * answer.reasoning_tokens},
    }


def _token_logprob(token: str, top: int) -> dict[str, Any]:
    utf8 = list(token.encode())
    alternative = {"token": token, "logprob": TOP_LOGPROB, "bytes": utf8}
    return {"token": token, "logprob": LOGPROB, "bytes": utf8, "top_logprobs": [alternative] * top}


def _openai_tool_calls(answer: Answer) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in answer.calls
    ]


def openai_completion(
    seq: int, model: str, answer: Answer, prompt: PromptUsage, options: OpenAIOptions
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    if answer.calls:
        message = {"role": "assistant", "content": None, "tool_calls": _openai_tool_calls(answer)}
    else:
        message = {"role": "assistant", "content": "".join(answer.pieces)}
    choice: dict[str, Any] = {"message": message}
    if options.logprobs is not None:
        content = [_token_logprob(p, options.top_logprobs) for p in answer.pieces]
        choice["logprobs"] = {"content": content, "refusal": None} if options.logprobs else None
    choice["finish_reason"] = _OPENAI_FINISH[answer.finish]
    return {
        "id": f"chatcmpl-stub-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, **choice} for i in range(options.n)],
        "usage": _openai_usage(prompt, answer, options.n),
    }


def _data_line(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


Frames = tuple[list[tuple[bytes, bool]], list[bytes]]
"""A stream: (body frames, each flagged when it is a piece; tail frames that end it)."""


def _openai_deltas(answer: Answer, options: OpenAIOptions) -> list[tuple[dict[str, Any], Any]]:
    """(delta, logprobs) of each streamed piece of one choice."""
    out: list[tuple[dict[str, Any], Any]] = []
    for i, call in enumerate(answer.calls):
        function = {"name": call.name, "arguments": ""}
        header = {"index": i, "id": call.id, "type": "function", "function": function}
        out.append(({"tool_calls": [header]}, None))
        out.extend(
            ({"tool_calls": [{"index": i, "function": {"arguments": half}}]}, None)
            for half in _halves(call.arguments)
        )
    for piece in answer.pieces:
        lp = None
        if options.logprobs:
            lp = {"content": [_token_logprob(piece, options.top_logprobs)], "refusal": None}
        out.append(({"content": piece}, lp))
    return out


def openai_stream_frames(
    seq: int, model: str, answer: Answer, prompt: PromptUsage, options: OpenAIOptions
) -> Frames:
    """The ``chat.completion.chunk`` stream of the answer."""
    head = {
        "id": f"chatcmpl-stub-{seq}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(
        index: int, delta: dict[str, Any], finish: str | None = None, lp: Any = None
    ) -> bytes:
        choice: dict[str, Any] = {"index": index, "delta": delta}
        if options.logprobs is not None:
            choice["logprobs"] = lp
        choice["finish_reason"] = finish
        data: dict[str, Any] = {**head, "choices": [choice]}
        if options.include_usage:
            data["usage"] = None
        return _data_line(data)

    deltas = _openai_deltas(answer, options)
    body: list[tuple[bytes, bool]] = []
    for index in range(options.n):
        role = {"role": "assistant", "content": None if answer.calls else ""}
        body.append((chunk(index, role), False))
        body.extend((chunk(index, delta, lp=lp), True) for delta, lp in deltas)
    finish = _OPENAI_FINISH[answer.finish]
    tail = [chunk(index, {}, finish) for index in range(options.n)]
    if options.include_usage:
        usage = _openai_usage(prompt, answer, options.n)
        tail.append(_data_line({**head, "choices": [], "usage": usage}))
    tail.append(b"data: [DONE]\n\n")
    return body, tail


# --------------------------------------------------------------------------- Anthropic rendering


_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def _anthropic_usage(prompt: PromptUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt.total - prompt.cache_creation - prompt.cache_read,
        "cache_creation_input_tokens": prompt.cache_creation,
        "cache_read_input_tokens": prompt.cache_read,
        "output_tokens": output_tokens,
    }


def _anthropic_blocks(answer: Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if answer.thinking:
        thinking = " ".join(THINKING_WORDS)
        blocks.append({"type": "thinking", "thinking": thinking, "signature": THINKING_SIGNATURE})
    if answer.calls:
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in answer.calls
        )
    else:
        blocks.append({"type": "text", "text": "".join(answer.pieces)})
    return blocks


def anthropic_message(seq: int, model: str, answer: Answer, prompt: PromptUsage) -> dict[str, Any]:
    """The non-streamed ``message`` object."""
    return {
        "id": f"msg_stub_{seq}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(answer),
        "stop_reason": _ANTHROPIC_STOP[answer.finish],
        "stop_sequence": answer.stop_sequence,
        "usage": _anthropic_usage(prompt, answer.output_tokens),
    }


def _anthropic_stream_blocks(answer: Answer) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(content_block_start's block, its deltas) for every block of the answer."""
    blocks = []
    if answer.thinking:
        deltas = [{"type": "thinking_delta", "thinking": t} for t in _spaced(THINKING_WORDS)]
        deltas.append({"type": "signature_delta", "signature": THINKING_SIGNATURE})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    for call in answer.calls:
        start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        halves = _halves(call.arguments)
        blocks.append((start, [{"type": "input_json_delta", "partial_json": h} for h in halves]))
    if not answer.calls:
        deltas = [{"type": "text_delta", "text": t} for t in answer.pieces]
        blocks.append(({"type": "text", "text": ""}, deltas))
    return blocks


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _event(name: str, **fields: Any) -> bytes:
    return _sse(name, {"type": name, **fields})


def anthropic_stream_frames(seq: int, model: str, answer: Answer, prompt: PromptUsage) -> Frames:
    """The messages event stream of the answer."""
    message = {
        "id": f"msg_stub_{seq}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(prompt, 1),
    }
    body: list[tuple[bytes, bool]] = [(_event("message_start", message=message), False)]
    blocks = _anthropic_stream_blocks(answer)
    for index, (start, deltas) in enumerate(blocks):
        body.append((_event("content_block_start", index=index, content_block=start), False))
        if index == 0:
            body.append((_event("ping"), False))
        body.extend((_event("content_block_delta", index=index, delta=d), True) for d in deltas)
        if index < len(blocks) - 1:
            body.append((_event("content_block_stop", index=index), False))
    delta = {"stop_reason": _ANTHROPIC_STOP[answer.finish], "stop_sequence": answer.stop_sequence}
    tail = [
        _event("content_block_stop", index=len(blocks) - 1),
        _event("message_delta", delta=delta, usage={"output_tokens": answer.output_tokens}),
        _event("message_stop"),
    ]
    return body, tail


async def _write_stream(
    resp: web.StreamResponse, frames: Frames, delay: float, limit: int | None, drop: bool
) -> None:
    """Write the frames: ``delay`` before each piece, at most ``limit`` pieces, no tail on drop."""
    body, tail = frames
    sent = 0
    for data, piece in body:
        if piece:
            if sent == limit:
                return
            if delay:
                await asyncio.sleep(delay)
        await resp.write(data)
        if piece:
            sent += 1
            if sent == limit:
                return
    if not drop:
        await resp.write(b"".join(tail))


# --------------------------------------------------------------------------- vendor


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


class Rendered(Protocol):
    """Render an answer whole or streamed (what faults count and cut)."""

    def message(self) -> dict[str, Any]: ...

    def frames(self) -> Frames: ...

    def pieces(self) -> int: ...


@dataclass(frozen=True)
class Reply:
    """Everything a completion answer is rendered from, in either shape."""

    shape: str
    seq: int
    model: str
    answer: Answer
    prompt: PromptUsage
    options: OpenAIOptions

    def message(self) -> dict[str, Any]:
        if self.shape == "openai":
            return openai_completion(self.seq, self.model, self.answer, self.prompt, self.options)
        return anthropic_message(self.seq, self.model, self.answer, self.prompt)

    def frames(self) -> Frames:
        if self.shape == "openai":
            return openai_stream_frames(
                self.seq, self.model, self.answer, self.prompt, self.options
            )
        return anthropic_stream_frames(self.seq, self.model, self.answer, self.prompt)

    def pieces(self) -> int:
        return _piece_count(self.answer, self.shape, self.options.n)


def _make_reply(
    state: StubState, incoming: Incoming, shape: str, n_words: int, tools: list[tuple[str, Any]]
) -> Reply:
    """Read/write the prompt caches and decide the answer (after faults: see docstring)."""
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


# --------------------------------------------------------------------------- app / running


# The W3C traceparent of the call being handled: every recorded call lists it.
INBOUND_TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stub_inbound_traceparent", default=None
)


@web.middleware
async def trace_context(request: web.Request, handler: Any) -> web.StreamResponse:
    INBOUND_TRACEPARENT.set(request.headers.get("traceparent"))
    return await handler(request)


def _accept_keys_from_env() -> frozenset[str] | None:
    raw = os.environ.get("STUB_ACCEPT_KEYS", "")
    keys = frozenset(k.strip() for k in raw.split(",") if k.strip())
    return keys or None


def make_app(accept_keys: Iterable[str] | None = None) -> web.Application:
    """Build the stub app.  ``accept_keys`` defaults to ``$STUB_ACCEPT_KEYS``."""
    from stubvendor.site import site_page  # the demo's pages (stubvendor/site.py)

    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[trace_context])
    keys = frozenset(accept_keys) if accept_keys is not None else _accept_keys_from_env()
    app[STATE] = StubState(keys)
    app.router.add_post("/_stub/faults", post_faults)
    app.router.add_get("/_stub/faults", get_faults)
    app.router.add_get("/_stub/calls", get_calls)
    app.router.add_delete("/_stub/calls", delete_calls)
    app.router.add_get("/_stub/health", health)
    app.router.add_get("/_stub/site/{tail:.*}", site_page)
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
    # Under ``python -m`` this file runs as ``__main__``, a second copy of the module;
    # the route modules import ``stubvendor.server``, so serve that one (one STATE key).
    from stubvendor.server import main as _main

    _main(sys.argv[1:])
