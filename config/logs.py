"""One line for each request Django refuses, instead of a traceback.

Django logs a refused request (403 PermissionDenied, 400 SuspiciousOperation such as a
disallowed Host, a CSRF failure, a 404) on `django.request` / `django.security.*`, with the
exception's traceback for the first two. A refusal is ordinary, not a bug: it gets one line,
`refused METHOD PATH STATUS: reason`. Errors (5xx) keep their traceback.
"""

from __future__ import annotations

import logging
import re

# A long path segment made of token characters may be a secret (a one-time set-password
# link's token); request ids (32 lowercase hex digits) stay readable.
_TOKEN_SEGMENT = re.compile(r"^[A-Za-z0-9_\-:.=]{24,}$")
_HEX_ID = re.compile(r"^[0-9a-f\-]+$")


def _printable(text: str) -> str:
    # As Django escapes the path it logs: no newline or control character reaches the log.
    return text.encode("unicode_escape").decode("ascii")


def _redacted(path: str) -> str:
    return "/".join(
        "[redacted]" if _TOKEN_SEGMENT.match(part) and not _HEX_ID.match(part) else part
        for part in path.split("/")
    )


class OneLineRefusals(logging.Filter):
    """Rewrite Django's record of a refused (4xx) request as one line without a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        request = getattr(record, "request", None)
        if (
            not isinstance(status, int)
            or not 400 <= status < 500
            or request is None
            or not record.name.startswith(("django.request", "django.security"))
        ):
            return True
        path = _printable(request.path)
        reason = record.getMessage()
        if reason.endswith(f": {path}"):
            reason = reason[: -len(path) - 2]
        record.msg = "refused %s %s %s: %s"
        record.args = (request.method, _redacted(path), status, _printable(reason))
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True
