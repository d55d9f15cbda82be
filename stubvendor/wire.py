"""What every vendor route shares on the wire: JSON answers, the vendors' error shapes, the
key a call carries, and small readers of a body's fields."""

from __future__ import annotations

from typing import Any, TypeGuard, TypeVar

import orjson
from aiohttp import web

from stubvendor.dialect import DIALECT

_Resp = TypeVar("_Resp", bound=web.StreamResponse)  # _answer hands back what it got


def _json(status: int, obj: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(obj),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _answer(call: dict[str, Any], resp: _Resp) -> _Resp:
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


def _is_int(value: Any) -> TypeGuard[int]:  # False for bools: TypeIs would say "not int"
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
