"""The stub's Google routes: the Gemini API, Vertex AI, and an OAuth token endpoint.

Routes (dispatched from server.py's ``vendor``)
-----------------------------------------------
* ``POST .../v1beta/models/{model}:generateContent`` and
  ``.../v1beta/models/{model}:streamGenerateContent?alt=sse`` (any prefix): the
  Gemini API.  Key: ``x-goog-api-key: <key>`` (or the ``?key=`` query).  Missing:
  403 ``PERMISSION_DENIED`` (Google's "Method doesn't allow unregistered callers
  ..."); not in ``STUB_ACCEPT_KEYS`` (when set): 400 ``INVALID_ARGUMENT`` "API key
  not valid. Please pass a valid API key." with ``details: [{"@type":
  "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]``, as
  Google answers.  Recorded with ``shape: "gemini"``.
* ``POST .../v1/projects/{project}/locations/{location}/publishers/google/models/
  {model}:generateContent`` / ``:streamGenerateContent?alt=sse`` (any prefix):
  Vertex AI.  Key: ``Authorization: Bearer <token>``, a token this stub's token
  endpoint issued and that has not expired; otherwise 401 ``UNAUTHENTICATED``.
  Recorded with ``shape: "vertex"``, ``key`` the token, and ``principal`` the
  service account it was issued to, ``project`` and ``location`` from the path.
* ``POST /_stub/google/token``: the OAuth 2.0 JWT-bearer grant
  (``application/x-www-form-urlencoded``: ``grant_type=urn:ietf:params:oauth:
  grant-type:jwt-bearer`` and ``assertion=<JWT>``), as google-auth's service
  account credentials call it.  The assertion must be a JWT with ``alg: RS256``
  whose claims name ``iss`` (the service account), an ``aud`` of Google's token URL
  (``https://oauth2.googleapis.com/token``, which google-auth always writes) or
  this route's own URL, a ``scope``, and an ``exp`` in the future.  When a test
  registered a public key for that ``iss`` (below), the RS256 signature must
  verify against it; without one, only the claims are checked.  Answers
  ``{"access_token": "ya29.stub-<n>-<hex>", "expires_in": <lifetime>,
  "token_type": "Bearer"}`` (lifetime 3600 s, or the one registered); refusals
  are OAuth's ``{"error": "invalid_grant" | "unsupported_grant_type" |
  "invalid_request", "error_description"}`` with status 400.  Recorded with
  ``shape: "google-token"``, ``model: null``, ``key`` the ``iss`` (so it is not
  a vendor call), ``body`` the grant's fields.  Not subject to faults (a fault
  meant for a Vertex call is never consumed by the token it needs first).
* ``POST /_stub/google/keys`` ``{"client_email", "public_key": <PEM>,
  "token_lifetime_s"?}``: register a service account's public key (and the
  lifetime of the tokens it gets) -> ``{"registered": <client_email>}``.  Issued
  tokens and registered keys outlive ``DELETE /_stub/calls`` (a gateway keeps
  its token); the prompt caches do not.

A body that is not a JSON object answers 400 ``INVALID_ARGUMENT``; a stream
without ``alt=sse`` answers 400 (the stub speaks SSE only).  Errors are Google's
``{"error": {"code", "message", "status"}}``; faults apply as on every route
(``429`` -> ``RESOURCE_EXHAUSTED`` with ``Retry-After``, ``401`` ->
``UNAUTHENTICATED``, ``403`` -> ``PERMISSION_DENIED``, ``500`` -> ``INTERNAL``,
refusals ``400`` / ``404`` / ``413`` / ``422`` with their message; ``hang``,
``fail_before_first_token``, ``fail_after_tokens``, ``slow``).

Prompt tokens
-------------
Words (``str.split()``) of every text part of ``systemInstruction`` and
``contents``, and of every string value of a ``functionResponse``'s
``response``; +85 per ``inlineData``/``fileData`` image (``mimeType``
``image/*``), +100 per other one; +10 per function declaration (the chat
route's +10 per tool, so an OpenAI body translated for Gemini counts what it
counts on the OpenAI route); ``functionCall`` parts 0; minimum 1: the
``promptTokenCount``.  Caching is OpenAI's automatic rule (server.py's
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
  schema rule of server.py applied to ``parametersJsonSchema`` (or
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

import base64
import binascii
import itertools
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from aiohttp import web

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
from stubvendor.state import STATE, StubState, _ids
from stubvendor.tools import pick_tools
from stubvendor.vendor import Incoming, _answer_words, _deliver, read_body
from stubvendor.wire import _GOOGLE_STATUS, _answer, _as_list, _json, vendor_error

GEMINI = "gemini"
VERTEX = "vertex"
TOKEN_PATH = "/_stub/google/token"
KEYS_PATH = "/_stub/google/keys"
GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_LIFETIME_S = 3600
BLOCK_WORD = "BLOCKME"
BLOCK_REASON = "PROHIBITED_CONTENT"
NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
BAD_KEY = "API key not valid. Please pass a valid API key."
BAD_TOKEN = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential."
)
_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "stop_sequence": "STOP", "tool_calls": "STOP"}
_token_numbers = itertools.count(1)


@dataclass(frozen=True)
class Route:
    """What a Google path says: which API, the model, the method, Vertex's project/location."""

    api: str  # GEMINI or VERTEX
    model: str
    stream: bool
    project: str = ""
    location: str = ""


def google_route(path: str) -> Route | None:
    """Read a generateContent path; None for any other path."""
    head, colon, method = path.rpartition(":")
    if not colon or method not in ("generateContent", "streamGenerateContent"):
        return None
    stream = method == "streamGenerateContent"
    segments = head.split("/")
    if len(segments) >= 3 and segments[-2] == "models" and segments[-3] == "v1beta":
        return Route(GEMINI, segments[-1], stream)
    if (
        len(segments) >= 9
        and segments[-9:-7] == ["v1", "projects"]
        and segments[-6] == "locations"
        and segments[-4:-1] == ["publishers", "google", "models"]
    ):
        return Route(VERTEX, segments[-1], stream, project=segments[-7], location=segments[-5])
    return None


def is_google_call(request: web.Request) -> bool:
    """Say whether a request is for one of this module's routes."""
    return request.path in (TOKEN_PATH, KEYS_PATH) or google_route(request.path) is not None


async def google_vendor(request: web.Request) -> web.StreamResponse:
    """Answer one of this module's routes."""
    if request.method != "POST":
        return google_error(405, f"Method {request.method} not allowed.")
    if request.path == TOKEN_PATH:
        return await issue_token(request)
    if request.path == KEYS_PATH:
        return await register_key(request)
    route = google_route(request.path)
    assert route is not None
    return await generate_content(request, route)


def google_error(status: int, message: str, details: list | None = None) -> web.Response:
    """Build an error in Google's shape, with its `details` when given."""
    if details is None:
        return vendor_error(GEMINI, status, message)
    error = {"code": status, "message": message, "status": _GOOGLE_STATUS[status]}
    return _json(status, {"error": {**error, "details": details}})


# --------------------------------------------------------------------------- tokens


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _oauth_error(error: str, description: str) -> web.Response:
    return _json(400, {"error": error, "error_description": description})


def _check_assertion(state: StubState, assertion: str, own_url: str) -> dict[str, Any] | str:
    """Return the claims of a valid JWT-bearer assertion, or why it is refused."""
    pieces = assertion.split(".")
    if len(pieces) != 3:
        return "The assertion is not a JWT."
    try:
        header = orjson.loads(_b64url(pieces[0]))
        claims = orjson.loads(_b64url(pieces[1]))
        signature = _b64url(pieces[2])
    except (ValueError, binascii.Error):
        return "The assertion is not a JWT."
    if not isinstance(header, dict) or header.get("alg") != "RS256":
        return "The assertion must be signed with RS256."
    if not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        return "The assertion names no issuer (iss)."
    if claims.get("aud") not in (GOOGLE_TOKEN_URL, own_url):
        return f"Invalid JWT: the audience must be {GOOGLE_TOKEN_URL}."
    if not isinstance(claims.get("scope"), str) or not claims["scope"]:
        return "Invalid JWT: no scope."
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or exp <= time.time():
        return "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe."
    registered = state.google_keys.get(claims["iss"])
    if registered is not None and not _signature_valid(
        registered["public_key"], f"{pieces[0]}.{pieces[1]}".encode(), signature
    ):
        return "Invalid JWT Signature."
    return claims


def _signature_valid(public_pem: str, signed: bytes, signature: bytes) -> bool:
    # Imported here: only a test that registers a key needs cryptography.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = serialization.load_pem_public_key(public_pem.encode())
    if not isinstance(key, rsa.RSAPublicKey):
        return False
    try:
        key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


async def issue_token(request: web.Request) -> web.Response:
    """Answer the JWT-bearer grant with an access token (the module docstring)."""
    state = request.app[STATE]
    form = {
        name: values[0]
        for name, values in parse_qs((await request.read()).decode(errors="replace")).items()
    }
    claims: dict[str, Any] | str
    if form.get("grant_type") != JWT_BEARER:
        claims = "unsupported_grant_type"
    else:
        own_url = str(request.url.with_query(None))
        claims = _check_assertion(state, form.get("assertion", ""), own_url)
    issuer = claims.get("iss") if isinstance(claims, dict) else None
    call = state.record(
        body=form,
        path=request.path,
        shape="google-token",
        model=None,
        key=issuer,
        stream=False,
        user=None,
        max_tokens=None,
    )
    if claims == "unsupported_grant_type":
        return _answer(call, _oauth_error("unsupported_grant_type", "Invalid grant_type."))
    if isinstance(claims, str):
        return _answer(call, _oauth_error("invalid_grant", claims))
    lifetime = state.google_keys.get(claims["iss"], {}).get("lifetime_s", TOKEN_LIFETIME_S)
    token = f"ya29.stub-{next(_token_numbers)}-{secrets.token_hex(8)}"
    state.google_tokens[token] = (claims["iss"], time.time() + lifetime)
    answer = {"access_token": token, "expires_in": lifetime, "token_type": "Bearer"}
    return _answer(call, _json(200, answer))


async def register_key(request: web.Request) -> web.Response:
    """Register a service account's public key (and its tokens' lifetime)."""
    _, body = await read_body(request)
    if not isinstance(body, dict):
        return _json(400, {"error": "body must be a JSON object"})
    email, pem = body.get("client_email"), body.get("public_key")
    lifetime = body.get("token_lifetime_s", TOKEN_LIFETIME_S)
    if not isinstance(email, str) or not isinstance(pem, str):
        return _json(400, {"error": "client_email and public_key (PEM) are required"})
    if not isinstance(lifetime, int) or isinstance(lifetime, bool) or lifetime < 1:
        return _json(400, {"error": "token_lifetime_s must be a positive integer"})
    request.app[STATE].google_keys[email] = {"public_key": pem, "lifetime_s": lifetime}
    return _json(200, {"registered": email})


# --------------------------------------------------------------------------- prompt


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


# --------------------------------------------------------------------------- answer


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


# --------------------------------------------------------------------------- calls


def _key_of(request: web.Request, route: Route) -> tuple[str | None, str | None]:
    """Return (key or token, the raw header value it came from)."""
    if route.api == VERTEX:
        raw = request.headers.get("Authorization")
        scheme, _, token = (raw or "").strip().partition(" ")
        return (token.strip() or None) if scheme.lower() == "bearer" else None, raw
    raw = request.headers.get("x-goog-api-key")
    if raw is None:
        raw = request.query.get("key")
    return (raw.strip() or None) if raw is not None else None, raw


def _refuse_caller(state: StubState, route: Route, key: str | None) -> web.Response | None:
    if route.api == VERTEX:
        issued = state.google_tokens.get(key or "")
        if issued is None or issued[1] <= time.time():
            return google_error(401, BAD_TOKEN)
        return None
    if key is None:
        return google_error(403, NO_KEY)
    if state.accept_keys is not None and key not in state.accept_keys:
        reason = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
        return google_error(400, BAD_KEY, [reason])
    return None


async def generate_content(request: web.Request, route: Route) -> web.StreamResponse:
    """Answer a Gemini API or Vertex AI generateContent call (the module docstring)."""
    state = request.app[STATE]
    raw, body = await read_body(request)
    key, raw_key = _key_of(request, route)
    extra = {"project": route.project, "location": route.location} if route.api == VERTEX else {}
    if route.api == VERTEX:
        extra["principal"] = state.google_tokens.get(key or "", (None, 0))[0]
    config = _config(body) if isinstance(body, dict) else {}
    call = state.record(
        body=body,
        path=request.path,
        shape=route.api,
        model=route.model,
        key=key,
        stream=route.stream,
        user=None,
        max_tokens=config.get("maxOutputTokens"),
        **extra,
    )
    refused = _refuse_caller(state, route, key)
    if refused is not None:
        return _answer(call, refused)
    if not isinstance(body, dict):
        return _answer(call, google_error(400, "The request body must be a JSON object."))
    if route.stream and request.query.get("alt") != "sse":
        return _answer(call, google_error(400, "The stub streams with alt=sse only."))
    n_words = _answer_words(request)
    if isinstance(n_words, str):
        return _answer(call, google_error(400, n_words))
    tools = choose_functions(body)
    if isinstance(tools, str):
        return _answer(call, google_error(400, tools))
    candidates = config.get("candidateCount")
    candidates = candidates if isinstance(candidates, int) and candidates >= 1 else 1
    incoming = Incoming(call, body, route.model, key, raw_key)
    blocked = BLOCK_WORD in raw.decode(errors="replace")

    def make_reply() -> GeminiReply | BlockedReply:
        prompt = _prompt(state, route.model, body)
        if blocked:
            return BlockedReply(next(_ids), route.model, prompt)
        answer = build_answer(body, route.model, n_words, tools)
        return GeminiReply(next(_ids), route.model, answer, prompt, candidates)

    return await _deliver(request, incoming, route.api, make_reply)
