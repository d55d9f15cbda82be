"""The stub's Google routes: the Gemini API and Vertex AI (their OAuth token endpoint is
stubvendor/google_oauth.py, what a call counts and answers stubvendor/gemini_answers.py).

Routes (dispatched from vendor.py's ``vendor``)
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

A body that is not a JSON object answers 400 ``INVALID_ARGUMENT``; a stream
without ``alt=sse`` answers 400 (the stub speaks SSE only).  Errors are Google's
``{"error": {"code", "message", "status"}}``; faults apply as on every route
(``429`` -> ``RESOURCE_EXHAUSTED`` with ``Retry-After``, ``401`` ->
``UNAUTHENTICATED``, ``403`` -> ``PERMISSION_DENIED``, ``500`` -> ``INTERNAL``,
refusals ``400`` / ``404`` / ``413`` / ``422`` with their message; ``hang``,
``fail_before_first_token``, ``fail_after_tokens``, ``slow``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from stubvendor.gemini_answers import (
    BLOCK_WORD,
    BlockedReply,
    GeminiReply,
    _config,
    _prompt,
    build_answer,
    choose_functions,
)
from stubvendor.google_oauth import KEYS_PATH, TOKEN_PATH, issue_token, register_key
from stubvendor.state import STATE, StubState, _ids
from stubvendor.vendor import Incoming, _answer_words, _deliver, read_body
from stubvendor.wire import _GOOGLE_STATUS, _answer, _json, vendor_error

GEMINI = "gemini"
VERTEX = "vertex"


NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
BAD_KEY = "API key not valid. Please pass a valid API key."
BAD_TOKEN = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential."
)


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
    extra: dict[str, str | None] = (
        {"project": route.project, "location": route.location} if route.api == VERTEX else {}
    )
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
