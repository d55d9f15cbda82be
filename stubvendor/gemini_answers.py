"""What the stub counts and answers to a Gemini or Vertex AI call (stubvendor/gemini.py):
its prompt tokens and cache, the answer, and the response, whole or streamed.

Prompt tokens
-------------
Words (``str.split()``) of every text part of ``systemInstruction`` and
``contents``, and of every string value of a ``functionResponse``'s
``response``; +85 per ``inlineData``/``fileData`` image (``mimeType``
``image/*``), +100 per other one; +10 per function declaration (the chat
route's +10 per tool, so an OpenAI body translated for Gemini counts what it
counts on the OpenAI route); ``functionCall`` parts 0; minimum 1: the
``promptTokenCount``.  Caching is OpenAI's automatic rule (stubvendor/prompt.py's
``cached_prefix_tokens``) over the units ``{"system": systemInstruction}`` (when
present) and each content: the longest earlier-seen proper prefix of >= 64
tokens for the same model is ``cachedContentTokenCount`` (kept apart from the
other routes' caches, cleared by ``DELETE /_stub/calls``).

Answer
------
Chat's rules, read from Gemini's fields:

* Tool calls when ``tools[].functionDeclarations`` declare functions,
  ``toolConfig.functionCallingConfig.mode`` is not ``NONE``, and the last content
  does not hold a ``functionResponse``: the one ``allowedFunctionNames`` names
  when it names exactly one (a name not declared: 400), else the first two
  declarations when two or more are given, else the first.  Arguments: the
  schema rule of stubvendor/answers.py applied to ``parametersJsonSchema`` (or
  ``parameters``).  Each call is one ``{"functionCall": {"name", "args"}}`` part
  (no ids, as Gemini), 5 output tokens; finish ``STOP``.
* Else JSON for ``generationConfig.responseMimeType: "application/json"``: the
  object built from ``responseJsonSchema`` (or ``responseSchema``), else
  ``{"answer": "<the words>"}``; compact, never cut, streamed in 8-character
  pieces.
* Else the words (``x-stub-words``), cut at the first word equal to one of
  ``generationConfig.stopSequences`` (finish ``STOP``) or at ``maxOutputTokens``
  (finish ``MAX_TOKENS``).
* ``generationConfig.thinkingConfig`` with a ``thinkingLevel`` or a
  ``thinkingBudget`` other than 0: ``thoughtsTokenCount`` 16 per candidate (no
  thought parts: never asked for with ``includeThoughts``).
* ``candidateCount`` n: n identical candidates (``index`` 0..n-1).
* A prompt containing ``BLOCKME`` (anywhere in the body's JSON): no candidates,
  ``promptFeedback: {"blockReason": "PROHIBITED_CONTENT"}``, usage of the prompt
  only; streamed as that one event.  After faults, like an answer.

Response: ``{"candidates": [{"content": {"role": "model", "parts": [...]},
"finishReason", "index"}], "usageMetadata": {"promptTokenCount": P,
"candidatesTokenCount": C, "totalTokenCount": P + C + T,
"cachedContentTokenCount": K (when K), "thoughtsTokenCount": T (when T)},
"modelVersion": <model>, "responseId": "stub-<n>"}``, C = n x (words / JSON
pieces / 5 per call).  Stream: one ``data: <response>`` event per piece (a text
or JSON piece, or one whole call) for each candidate in turn, carrying
``usageMetadata`` ``{"promptTokenCount": P, "totalTokenCount": P}``; then one
event with every candidate's empty text part and ``finishReason`` and the whole
``usageMetadata``.  No ``[DONE]``: the stream ends with the connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stubvendor.answers import (
    REASONING_TOKENS,
    Answer,
    answer_tokens,
    compose_answer,
    json_answer,
    tool_calls,
)
from stubvendor.prompt import (
    DOCUMENT_TOKENS,
    IMAGE_TOKENS,
    TOOL_DEFINITION_TOKENS,
    PromptUsage,
    _words,
    cached_prefix_tokens,
)
from stubvendor.rendering import Frames, _data_line
from stubvendor.state import StubState
from stubvendor.tools import pick_tools
from stubvendor.wire import _as_list

BLOCK_WORD = "BLOCKME"
BLOCK_REASON = "PROHIBITED_CONTENT"


_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "stop_sequence": "STOP", "tool_calls": "STOP"}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _part_tokens(part: Any) -> int:
    if not isinstance(part, dict):
        return 0
    if isinstance(part.get("text"), str):
        return _words(part["text"])
    media = part.get("inlineData") or part.get("fileData")
    if isinstance(media, dict):
        mime = media.get("mimeType")
        return (
            IMAGE_TOKENS if isinstance(mime, str) and mime.startswith("image/") else DOCUMENT_TOKENS
        )
    response = part.get("functionResponse")
    if isinstance(response, dict):
        return sum(_words(text) for text in _strings(response.get("response")))
    return 0


def _content_tokens(content: Any) -> int:
    parts = content.get("parts") if isinstance(content, dict) else None
    return sum(_part_tokens(part) for part in _as_list(parts))


def _declarations(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        declaration
        for tool in _as_list(body.get("tools"))
        if isinstance(tool, dict)
        for declaration in _as_list(tool.get("functionDeclarations"))
        if isinstance(declaration, dict) and isinstance(declaration.get("name"), str)
    ]


def _units(body: dict[str, Any]) -> list[tuple[Any, int]]:
    """List (unit, tokens) in prompt order: the system instruction, then every content."""
    system = body.get("systemInstruction")
    units = [({"system": system}, _content_tokens(system))] if system is not None else []
    return units + [
        (content, _content_tokens(content)) for content in _as_list(body.get("contents"))
    ]


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """Count a generateContent call's prompt tokens (cached ones included; minimum 1)."""
    units = sum(tokens for _, tokens in _units(body))
    return max(units + TOOL_DEFINITION_TOKENS * len(_declarations(body)), 1)


def _prompt(state: StubState, model: str, body: dict[str, Any]) -> PromptUsage:
    units = _units(body)
    cached = cached_prefix_tokens(
        state.gemini_prefixes, model, [unit for unit, _ in units], [t for _, t in units]
    )
    return PromptUsage(count_prompt_tokens(body), cached=cached)


def _config(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("generationConfig")
    return config if isinstance(config, dict) else {}


def choose_functions(body: dict[str, Any]) -> list[tuple[str, Any]] | str:
    """Choose the functions the answer calls ([] = none), or say why the config is bad."""
    specs = [
        (d["name"], d.get("parametersJsonSchema", d.get("parameters"))) for d in _declarations(body)
    ]
    tool_config = body.get("toolConfig")
    calling = tool_config.get("functionCallingConfig") if isinstance(tool_config, dict) else None
    calling = calling if isinstance(calling, dict) else {}
    names = _as_list(calling.get("allowedFunctionNames"))
    forced = names[0] if len(names) == 1 and isinstance(names[0], str) else None
    contents = _as_list(body.get("contents"))
    last = contents[-1] if contents else None
    last_parts = _as_list(last.get("parts")) if isinstance(last, dict) else []
    return pick_tools(
        specs,
        allowed=calling.get("mode") != "NONE",
        forced=forced,
        parallel=True,  # Gemini has no switch for one call at a time
        after_tool_result=any(isinstance(p, dict) and "functionResponse" in p for p in last_parts),
    )


def _thinking(config: dict[str, Any]) -> bool:
    thinking = config.get("thinkingConfig")
    if not isinstance(thinking, dict):
        return False
    return thinking.get("thinkingLevel") is not None or thinking.get("thinkingBudget") not in (
        None,
        0,
    )


def build_answer(body: dict[str, Any], model: str, n_words: int, tools: list) -> Answer:
    config = _config(body)
    tokens = answer_tokens(model, n_words)
    json_text = None
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema", config.get("responseSchema"))
        json_text = json_answer(
            "json_schema" if schema is not None else "json_object", schema, tokens
        )
    stops = config.get("stopSequences")
    return compose_answer(
        tokens,
        calls=tool_calls(tools, "call_stub", 0),
        json_text=json_text,
        max_tokens=config.get("maxOutputTokens"),
        stops=frozenset(s for s in _as_list(stops) if isinstance(s, str)),
        reasoning_tokens=REASONING_TOKENS if _thinking(config) else 0,
    )


@dataclass(frozen=True)
class GeminiReply:
    """Everything a generateContent answer is rendered from (a server.Rendered)."""

    seq: int
    model: str
    answer: Answer
    prompt: PromptUsage
    candidates: int

    def _head(self) -> dict[str, Any]:
        return {"modelVersion": self.model, "responseId": f"stub-{self.seq}"}

    def usage(self) -> dict[str, Any]:
        answer, n = self.answer, self.candidates
        thoughts = n * answer.reasoning_tokens
        visible = n * answer.output_tokens - thoughts
        usage = {
            "promptTokenCount": self.prompt.total,
            "candidatesTokenCount": visible,
            "totalTokenCount": self.prompt.total + visible + thoughts,
        }
        if self.prompt.cached:
            usage["cachedContentTokenCount"] = self.prompt.cached
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return usage

    def _parts(self) -> list[dict[str, Any]]:
        if self.answer.calls:
            return [{"functionCall": {"name": c.name, "args": c.input}} for c in self.answer.calls]
        return [{"text": "".join(self.answer.pieces)}]

    def message(self) -> dict[str, Any]:
        finish = _FINISH[self.answer.finish]
        candidates = [
            {
                "content": {"role": "model", "parts": self._parts()},
                "finishReason": finish,
                "index": i,
            }
            for i in range(self.candidates)
        ]
        return {"candidates": candidates, "usageMetadata": self.usage(), **self._head()}

    def pieces(self) -> int:
        return self.candidates * (len(self.answer.calls) or len(self.answer.pieces))

    def frames(self) -> Frames:
        prompt_only = {"promptTokenCount": self.prompt.total, "totalTokenCount": self.prompt.total}
        parts = (
            [{"functionCall": {"name": c.name, "args": c.input}} for c in self.answer.calls]
            if self.answer.calls
            else [{"text": piece} for piece in self.answer.pieces]
        )
        body = [
            (
                _data_line(
                    {
                        "candidates": [{"content": {"role": "model", "parts": [part]}, "index": i}],
                        "usageMetadata": prompt_only,
                        **self._head(),
                    }
                ),
                True,
            )
            for i in range(self.candidates)
            for part in parts
        ]
        finish = _FINISH[self.answer.finish]
        last = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": ""}]},
                    "finishReason": finish,
                    "index": i,
                }
                for i in range(self.candidates)
            ],
            "usageMetadata": self.usage(),
            **self._head(),
        }
        return body, [_data_line(last)]


@dataclass(frozen=True)
class BlockedReply:
    """A prompt Gemini blocks: no candidates, its feedback, the prompt's usage."""

    seq: int
    model: str
    prompt: PromptUsage

    def message(self) -> dict[str, Any]:
        total = self.prompt.total
        return {
            "promptFeedback": {"blockReason": BLOCK_REASON},
            "usageMetadata": {"promptTokenCount": total, "totalTokenCount": total},
            "modelVersion": self.model,
            "responseId": f"stub-{self.seq}",
        }

    def pieces(self) -> int:
        return 0

    def frames(self) -> Frames:
        return [], [_data_line(self.message())]
