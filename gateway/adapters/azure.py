"""Azure OpenAI: OpenAI's bodies and answers on a resource of the operator's own.

What differs from OpenAI is where a call goes and how it is signed:

- the key travels in the `api-key` header (never `Authorization`);
- a model's `upstream` is the name of its Azure deployment. With the profile's api_version
  set, chat completions and embeddings go to the deployment's own path,
  `{base_url}/openai/deployments/{deployment}/chat/completions?api-version=...`, and the
  Responses API to `{base_url}/openai/responses?api-version=...`; with no api_version,
  every API is on the v1 paths, `{base_url}/openai/v1/chat/completions`. The body names
  the deployment as its `model` on every path (Azure ignores it where the path names the
  deployment, as the official SDK sends it).

Azure's content filter is OpenAI's shape too: a refused prompt is an HTTP 400 whose
`error.message` says so (a vendor's refusal, passed on to the client, LM-2002, never
retried) and a filtered answer ends with `finish_reason: "content_filter"`, which the
shapes carry as they carry OpenAI's. Azure's annotations of what its filter found
(`prompt_filter_results`, `content_filter_results`) stay in a whole answer, as extra fields;
a stream's chunk that carries nothing else is dropped.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import orjson

from gateway.adapters.base import CallTarget
from gateway.adapters.openai import APIS, ChatStream, OpenAIProvider, ResponsesStream
from gateway.shapes import openai as chat_shape
from gateway.shapes.openai import OPENAI_SHAPE
from gateway.types import EMBEDDINGS, OPENAI, RESPONSES, Chunk, ModelRequest

# From this api-version on (and on the v1 paths) Azure takes `max_completion_tokens` for
# every model; before it, only `max_tokens`.
COMPLETION_CAP_SINCE = "2024-09-01"
# What an operator may have pasted after the resource URL: Tollgate adds it itself.
_PATH_SUFFIXES = ("/openai/v1", "/openai")


class AzureChatStream(ChatStream):
    """OpenAI's chunks, without Azure's chunk of filter annotations alone (its first:
    `choices: []`, `prompt_filter_results`, an empty `object`), which is none of OpenAI's
    and which clients that read `choices[0]` of every chunk break on."""

    def feed(self, event: str, data: bytes) -> Chunk | None:
        if data == b"[DONE]":
            self.done = True
            return None
        payload = orjson.loads(data)
        if isinstance(payload, dict) and not payload.get("choices") and not payload.get("usage"):
            return None
        return chat_shape.chunk_from_vendor(payload)


class AzureOpenAIProvider(OpenAIProvider):
    """OpenAI's chat completions, Responses and embeddings on an Azure OpenAI resource."""

    native = frozenset({OPENAI, RESPONSES, EMBEDDINGS})  # Azure has no moderations route

    def url_for(self, base_url: str, shape: str) -> str:
        # The v1 paths: the same for every deployment. The deployment paths are built per
        # call (`url`), as each names its model's deployment.
        return f"{resource_url(base_url)}/openai/v1{APIS[shape][0]}"

    def request(self, req: ModelRequest, target: CallTarget) -> tuple[str, bytes, dict[str, str]]:
        return self.url(target), self.body(req, target), self.headers(target.api_key)

    def url(self, target: CallTarget) -> str:
        """Return the URL of one call: the deployment's path when the profile names an
        api-version, else the v1 path."""
        api = self.api(target)
        version = self._options.api_version
        if not version:
            return self._urls[api]
        query = urlencode({"api-version": version})
        resource = resource_url(self._base_url)
        if api == RESPONSES:
            return f"{resource}/openai/responses?{query}"
        deployment = quote(target.upstream_model, safe="")
        return f"{resource}/openai/deployments/{deployment}{APIS[api][0]}?{query}"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"api-key": api_key, "Content-Type": "application/json"}

    def body(self, req: ModelRequest, target: CallTarget) -> bytes:
        if self.api(target) != OPENAI or not self._takes_completion_cap():
            return super().body(req, target)
        # A deployment's name says nothing of its model, so OpenAI's rule (reasoning models
        # by name take `max_completion_tokens`) cannot be read from it: where Azure takes
        # that field for every model, it is always the one sent.
        return OPENAI_SHAPE.vendor_body(
            {**target.payload, "max_completion_tokens": None},  # an owned field: reset below
            upstream_model=target.upstream_model,
            caller_label=target.caller_label,
            max_tokens=target.max_tokens,
            stream=req.stream,
        )

    def decoder(self, target: CallTarget) -> AzureChatStream | ResponsesStream:
        return ResponsesStream() if self.api(target) == RESPONSES else AzureChatStream()

    def _takes_completion_cap(self) -> bool:
        version = self._options.api_version
        return not version or version >= COMPLETION_CAP_SINCE


def resource_url(base_url: str) -> str:
    """Return the resource's URL (https://NAME.openai.azure.com) of a profile's base URL,
    which may already end in `/openai` or `/openai/v1`."""
    url = base_url.rstrip("/")
    for suffix in _PATH_SUFFIXES:
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url
