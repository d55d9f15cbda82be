"""What the stub answers a completion call: tool calls, a JSON text or words, and the output
tokens that costs.

The rules (part of the stub's contract, stubvendor/server.py):

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
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from stubvendor.tools import tool_arguments
from stubvendor.wire import _as_list, _is_int, _max_tokens

_BASE_WORDS = ("Hello", "from", "the", "stub", "model", None, "reply", "ok")


TOOL_CALL_TOKENS = 5
REASONING_TOKENS = 16
JSON_PIECE_CHARS = 8


REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")
THINKING_WORDS = ("Stub", "thinking", "about", "it.")
THINKING_SIGNATURE = "stub-signature"


MAX_TOKENS_UNSUPPORTED = (
    "Unsupported parameter: 'max_tokens' is not supported with this model. "
    "Use 'max_completion_tokens' instead."
)
THINKING_BUDGET_TOO_LARGE = "max_tokens must be greater than thinking.budget_tokens"


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
