"""The stub's Azure OpenAI routes: OpenAI's handlers on Azure's paths, key and errors.

Routes (any prefix before ``/openai``; the prefix is the resource)
-------------------------------------------------------------------
* ``POST .../openai/deployments/{deployment}/chat/completions?api-version=V``
* ``POST .../openai/deployments/{deployment}/embeddings?api-version=V``
* ``POST .../openai/responses?api-version=V`` (the deployment is the body's ``model``)
* ``POST .../openai/v1/chat/completions``, ``.../openai/v1/responses``,
  ``.../openai/v1/embeddings`` (the deployment is the body's ``model``; no
  api-version needed).  A v1 call that carries neither an ``api-key`` header
  nor an ``api-version`` query is OpenAI's (server.py's routes): an OpenAI SDK
  may sit at a base URL ending in ``/openai/v1``.

The deployment routes and ``.../openai/responses`` without an ``api-version``
query parameter, and any other ``.../openai/deployments/...`` path, answer
Azure's 404 ``{"error": {"code": "404", "message": "Resource not found"}}``
(not recorded, like vendor.py's unknown paths); a method other than POST, 405.

Each route is served by vendor.py's OpenAI handler (chat completions,
Responses, embeddings): answers, tokens, streaming, tools, caching, faults and
the calls log as documented there, with these differences:

* Key: the ``api-key`` header.  Missing or empty, or not in
  ``STUB_ACCEPT_KEYS``: 401 ``{"error": {"code": "401", "message": "Access
  denied due to invalid subscription key or wrong API endpoint. ..."}}``
  (recorded, before faults).  ``Authorization`` is never read.
* Calls log: each call's record has one more field, ``api_version`` (the
  ``api-version`` query parameter, or null).
* Model: on a deployment path, the deployment (the body's ``model``, if any,
  is ignored, as Azure does); it is the call's ``model`` in ``GET
  /_stub/calls`` and the ``<model>`` of the answer's words.
* Content filter on the prompt: a chat or Responses body containing
  ``FILTERME`` (anywhere in its JSON) answers 400 in Azure's shape, ``{"error":
  {"message": FILTERED_PROMPT, "type": null, "param": "prompt", "code":
  "content_filter", "status": 400, "innererror": {"code":
  "ResponsibleAIPolicyViolation", "content_filter_result": {...}}}}``
  (recorded, after the key check, before faults).
* Content filter on the answer: a chat body containing ``FILTERANSWER`` gets
  its usual answer (same words, same tokens) ending with ``finish_reason:
  "content_filter"``, whole or streamed.
* Chat answers carry Azure's filter annotations: a whole answer has
  ``prompt_filter_results`` and each choice ``content_filter_results``; a
  stream starts with Azure's extra chunk ``{"choices": [], "created": 0, "id":
  "", "model": "", "object": "", "prompt_filter_results": [...]}`` (not a piece
  for ``fail_after_tokens``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from stubvendor.dialect import DIALECT
from stubvendor.rendering import Frames, Rendered, Reply, _data_line
from stubvendor.state import StubState
from stubvendor.vendor import _completion
from stubvendor.wire import _json, vendor_error

AZURE_PATH = re.compile(
    r"/openai/(?:deployments/(?P<deployment>[^/]+)/(?P<deployed_api>chat/completions|embeddings)"
    r"|(?P<v1>v1/)?(?P<api>chat/completions|responses|embeddings))/?$"
)
FILTER_PROMPT_MARKER = b"FILTERME"
FILTER_ANSWER_MARKER = b"FILTERANSWER"
KEY_HEADER = "api-key"
ACCESS_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API endpoint "
    "for your resource."
)
FILTERED_PROMPT = (
    "The response was filtered due to the prompt triggering Azure OpenAI's content "
    "management policy. Please modify your prompt and retry. To learn more about our content "
    "filtering policies please read our documentation: "
    "https://go.microsoft.com/fwlink/?linkid=2198766"
)
_SAFE = {"filtered": False, "severity": "safe"}
NOTHING_FILTERED = {
    "hate": _SAFE,
    "self_harm": _SAFE,
    "sexual": _SAFE,
    "violence": _SAFE,
}
VIOLENCE_FILTERED = {**NOTHING_FILTERED, "violence": {"filtered": True, "severity": "medium"}}
PROMPT_FILTER_RESULTS = [
    {
        "prompt_index": 0,
        "content_filter_results": {
            **NOTHING_FILTERED,
            "jailbreak": {"filtered": False, "detected": False},
        },
    }
]


def azure_error(status: int, code: str, message: str) -> web.Response:
    """Azure's own error shape (its gateway's, not the model's): code and message."""
    return _json(status, {"error": {"code": code, "message": message}})


def resource_not_found() -> web.Response:
    return azure_error(404, "404", "Resource not found")


def content_filter_refusal() -> web.Response:
    """Azure refusing a prompt its content filter flagged."""
    return _json(
        400,
        {
            "error": {
                "message": FILTERED_PROMPT,
                "type": None,
                "param": "prompt",
                "code": "content_filter",
                "status": 400,
                "innererror": {
                    "code": "ResponsibleAIPolicyViolation",
                    "content_filter_result": VIOLENCE_FILTERED,
                },
            }
        },
    )


@dataclass(frozen=True)
class AzureChatReply:
    """A chat reply with Azure's filter annotations (and, when filtered, its finish)."""

    reply: Reply

    def message(self) -> dict[str, Any]:
        data = self.reply.message()
        data["prompt_filter_results"] = PROMPT_FILTER_RESULTS
        for choice in data["choices"]:
            choice["content_filter_results"] = self._choice_results()
        return data

    def frames(self) -> Frames:
        body, tail = self.reply.frames()
        first = {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": PROMPT_FILTER_RESULTS,
        }
        return [(_data_line(first), False), *body], tail

    def pieces(self) -> int:
        return self.reply.pieces()

    def _choice_results(self) -> dict[str, Any]:
        filtered = self.reply.answer.finish == "content_filter"
        return VIOLENCE_FILTERED if filtered else NOTHING_FILTERED


@dataclass(frozen=True)
class AzureDialect:
    """How one Azure call differs from OpenAI's (dialect.py's ``Dialect``)."""

    path_model: str | None  # the deployment of a deployment path
    api: str  # chat/completions, responses or embeddings
    raw_body: bytes
    recorded: dict[str, Any]  # {"api_version": the query's, or None}
    key_header: str = KEY_HEADER

    def refuse(
        self, state: StubState, key: str | None, body: dict[str, Any]
    ) -> web.Response | None:
        if key is None or (state.accept_keys is not None and key not in state.accept_keys):
            return azure_error(401, "401", ACCESS_DENIED)
        if self.api != "embeddings" and FILTER_PROMPT_MARKER in self.raw_body:
            return content_filter_refusal()
        return None

    def adjust(self, reply: Rendered) -> Rendered:
        if not isinstance(reply, Reply):
            return reply  # a Responses reply goes as OpenAI sends it
        if FILTER_ANSWER_MARKER in self.raw_body:
            reply = replace(reply, answer=replace(reply.answer, finish="content_filter"))
        return AzureChatReply(reply)


def is_azure_call(request: web.Request) -> bool:
    """Say whether a call is Azure's: a deployment path, the api-version'd Responses path,
    or a v1 path signed with ``api-key`` or carrying an api-version."""
    path = request.path
    if "/openai/deployments/" in path or path.rstrip("/").endswith("/openai/responses"):
        return True
    return "/openai/v1/" in path and (
        KEY_HEADER in request.headers or "api-version" in request.query
    )


async def azure_vendor(request: web.Request) -> web.StreamResponse:
    """Answer an Azure OpenAI call with vendor.py's OpenAI handlers."""
    # Imported here: those modules build on vendor.py, as this one does.
    from stubvendor.embeddings import create_embeddings
    from stubvendor.responses import create_response

    match = AZURE_PATH.search(request.path)
    if match is None:
        return resource_not_found()
    deployment = match["deployment"]
    api = match["deployed_api"] or match["api"]
    if match["v1"] is None and not request.query.get("api-version"):
        return resource_not_found()
    if request.method != "POST":
        return vendor_error("openai", 405, f"Method {request.method} not allowed.")
    raw_body = await request.read()  # kept by aiohttp: the handler reads it again
    request[DIALECT] = AzureDialect(
        path_model=deployment,
        api=api,
        raw_body=raw_body,
        recorded={"api_version": request.query.get("api-version")},
    )
    handler = {
        "chat/completions": _completion,
        "responses": create_response,
        "embeddings": create_embeddings,
    }[api]
    return await handler(request, "openai")
