"""The tenant API speaks the gateway's error language: {"error": {message, type, code}}.

Every error under the tenant API's prefixes (`/api/`, `/admin/groups/`) is that JSON body,
whatever raised it and whatever the client accepts:

- inside a DRF view, `tenant_exception_handler` (settings.REST_FRAMEWORK) answers DRF's own
  exceptions, Django's 404 and 403, a body over the upload cap (LM-2013) and a database or
  Redis outage (LM-5004, 503, Retry-After); anything else is re-raised to Django;
- outside a view (no route matched, a middleware failed, an unexpected exception), Django
  calls the handlers config/urls.py names (`bad_request`, `permission_denied`,
  `page_not_found`, `server_error`): JSON on the tenant API's paths, Django's own pages
  elsewhere. An unexpected exception is a JSON 500 "Internal error." (LM-5001, as the
  gateway answers one), logged with its traceback by Django, never shown to the client.
"""

from __future__ import annotations

import logging
import math
import sys

import orjson
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.views import defaults
from redis import exceptions as redis_exceptions
from rest_framework import exceptions, status
from rest_framework.views import set_rollback

from core import errors

log = logging.getLogger(__name__)

CODES = {
    status.HTTP_400_BAD_REQUEST: ("LM-2001", "invalid_request_error"),
    status.HTTP_401_UNAUTHORIZED: ("LM-1001", "authentication_error"),
    status.HTTP_403_FORBIDDEN: ("LM-1003", "permission_error"),
    status.HTTP_404_NOT_FOUND: ("LM-2004", "not_found_error"),
    status.HTTP_405_METHOD_NOT_ALLOWED: ("LM-2001", "invalid_request_error"),
    status.HTTP_409_CONFLICT: ("LM-2009", "conflict_error"),
    status.HTTP_413_REQUEST_ENTITY_TOO_LARGE: ("LM-2013", "invalid_request_error"),
    status.HTTP_429_TOO_MANY_REQUESTS: ("LM-3001", "rate_limit_error"),
}

# The paths whose errors are ours: the tenant API and the BYOK admin routes.
TENANT_API_PREFIXES = ("/api/", "/admin/groups/")

# A database failover or restart takes seconds: a client that waits this long and retries
# (the SDKs honour Retry-After) usually finds it back.
OUTAGE_RETRY_AFTER_S = 5

# What a lost PostgreSQL or Redis connection raises: the dependency is down, not the request
# wrong. (A deadlock or a cancelled statement is an OperationalError too: retrying helps.)
OUTAGES = (
    OperationalError,
    InterfaceError,
    redis_exceptions.ConnectionError,
    redis_exceptions.TimeoutError,
)


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflict."


def is_tenant_api(path: str) -> bool:
    """Whether a request path belongs to the tenant API (its errors are JSON)."""
    return path.startswith(TENANT_API_PREFIXES) or path in ("/api", "/admin/groups")


def error_response(
    status_code: int,
    message: str,
    *,
    code: str | None = None,
    error_type: str | None = None,
    retry_after_s: float | None = None,
) -> HttpResponse:
    """Return the one error body as JSON (code and type from CODES unless given).

    A plain Django response, not DRF's: DRF would render it for the client's Accept header,
    and a browser asking for HTML would get the browsable API's page instead."""
    default_code, default_type = CODES.get(status_code, ("LM-2001", "invalid_request_error"))
    body = {
        "error": {
            "message": message,
            "type": error_type or default_type,
            "code": code or default_code,
        }
    }
    response = HttpResponse(orjson.dumps(body), status=status_code, content_type="application/json")
    # As DRF's responses carry it, for tests and middleware that read it (an attribute of
    # this instance, which HttpResponse's type does not declare).
    response.data = body  # type: ignore[attr-defined]
    if retry_after_s:
        response["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    return response


def outage_response() -> HttpResponse:
    """LM-5004: a dependency (the database, Redis) is down; try again shortly."""
    down = errors.DependencyDown()
    return error_response(
        down.status,
        down.message,
        code=down.code,
        error_type=down.error_type,
        retry_after_s=OUTAGE_RETRY_AFTER_S,
    )


def internal_error_response() -> HttpResponse:
    """A JSON 500 that says nothing of what failed (the log has the traceback)."""
    failed = errors.GatewayError()
    return error_response(
        status.HTTP_500_INTERNAL_SERVER_ERROR,
        failed.message,
        code=failed.code,
        error_type=failed.error_type,
    )


def _message(detail) -> str:
    if isinstance(detail, dict):
        field, value = next(iter(detail.items()))
        inner = _message(value)
        return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list):
        return _message(detail[0]) if detail else "Invalid request."
    return str(detail)


def _too_large_response() -> HttpResponse:
    too_large = errors.BodyTooLarge()
    return error_response(too_large.status, too_large.message, code=too_large.code)


def tenant_exception_handler(exc: Exception, context: dict) -> HttpResponse | None:
    """Answer an exception raised in a DRF view in our error language; None re-raises it."""
    if isinstance(exc, OUTAGES):
        # The first line only (a deadlock's, a refused connection's): no statement or values.
        first_line = str(exc).strip().partition("\n")[0][:200]
        log.warning(
            "tenant API: a dependency is down (%s: %s): answering LM-5004",
            type(exc).__name__,
            first_line,
        )
        set_rollback()
        return outage_response()
    if isinstance(exc, RequestDataTooBig):
        return _too_large_response()
    if isinstance(exc, SuspiciousOperation):
        return error_response(status.HTTP_400_BAD_REQUEST, "Invalid request.")
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: Django logs it and answers through server_error below
    status_code = exc.status_code
    code, error_type = CODES.get(status_code, ("LM-2001", "invalid_request_error"))
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        status_code = status.HTTP_401_UNAUTHORIZED
        code, error_type = CODES[status_code]
    set_rollback()
    response = error_response(
        status_code,
        _message(exc.detail),
        code=code,
        error_type=error_type,
        # A lockout (accounts/authentication.py) or DRF throttle says how long to wait.
        retry_after_s=getattr(exc, "wait", None),
    )
    if status_code == status.HTTP_401_UNAUTHORIZED:
        response["WWW-Authenticate"] = "Token"
    return response


# ---------------------------------------------------------------- Django's error handlers


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: a request Django refused before any view (a body over the cap, ...)."""
    if not is_tenant_api(request.path):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return _too_large_response()
    return error_response(status.HTTP_400_BAD_REQUEST, "Invalid request.")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403."""
    if not is_tenant_api(request.path):
        return defaults.permission_denied(request, exception)
    return error_response(status.HTTP_403_FORBIDDEN, "You may not do this.")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: no route matched (an unknown path, an id that is not a number)."""
    if not is_tenant_api(request.path):
        return defaults.page_not_found(request, exception)
    return error_response(status.HTTP_404_NOT_FOUND, "Not found.")


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an exception nothing answered. Django calls it while handling that
    exception (and has logged it), so sys.exc_info() says whether it was an outage."""
    if not is_tenant_api(request.path):
        return defaults.server_error(request)
    if isinstance(sys.exc_info()[1], OUTAGES):
        return outage_response()
    return internal_error_response()
