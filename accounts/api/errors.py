"""The tenant API speaks the gateway's error language: {"error": {message, type, code}}."""

from __future__ import annotations

import math

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

CODES = {
    status.HTTP_400_BAD_REQUEST: ("LM-2001", "invalid_request_error"),
    status.HTTP_401_UNAUTHORIZED: ("LM-1001", "authentication_error"),
    status.HTTP_403_FORBIDDEN: ("LM-1003", "permission_error"),
    status.HTTP_404_NOT_FOUND: ("LM-2004", "not_found_error"),
    status.HTTP_405_METHOD_NOT_ALLOWED: ("LM-2001", "invalid_request_error"),
    status.HTTP_409_CONFLICT: ("LM-2009", "conflict_error"),
    status.HTTP_429_TOO_MANY_REQUESTS: ("LM-3001", "rate_limit_error"),
}


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflict."


def _message(detail) -> str:
    if isinstance(detail, dict):
        field, value = next(iter(detail.items()))
        inner = _message(value)
        return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list):
        return _message(detail[0]) if detail else "Invalid request."
    return str(detail)


def tenant_exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if not isinstance(exc, exceptions.APIException):
        return None
    code, error_type = CODES.get(exc.status_code, ("LM-2001", "invalid_request_error"))
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        code, error_type = CODES[status.HTTP_401_UNAUTHORIZED]
        exc.status_code = status.HTTP_401_UNAUTHORIZED
    body = {"error": {"message": _message(exc.detail), "type": error_type, "code": code}}
    response = Response(body, status=exc.status_code)
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        response["WWW-Authenticate"] = "Token"
    if getattr(exc, "wait", None):  # a lockout (accounts/authentication.py) or DRF throttle
        response["Retry-After"] = str(math.ceil(exc.wait))
    return response
