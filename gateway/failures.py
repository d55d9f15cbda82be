"""What a vendor's failure means in our language: the one place this is decided.

- a timeout: LM-5002; a stream cut after its first chunk: LM-5001;
- a refusal of the request itself (a 4xx but 401, 402, 403, 408, 409, 429): LM-2002 with the
  vendor's status and message, and the request ends (`refused_by_vendor`);
- a 429: LM-3010 with the vendor's wait; any other status, or none: LM-5001;
- a failure counts against the breaker unless it is the client's fault; a platform key the
  vendor refuses (401, 403) is the platform's problem, a team key's is the key's
  (`judges_provider`).
The chain runner (gateway/chain.py) and each kind's policy read these.
"""

from __future__ import annotations

import math

from core import errors
from gateway.adapters.base import ProviderError
from gateway.attempts import PLATFORM

# 4xx statuses that speak of the key, the account, the rate or the moment, not the request.
NOT_THE_REQUEST = frozenset({401, 402, 403, 408, 409, 429})


def upstream_error(exc: ProviderError, *, mid_stream: bool = False) -> errors.GatewayError:
    """Say in our language what a vendor failure means: the one place this is decided."""
    if exc.timeout:
        return errors.UpstreamTimeout()
    if mid_stream:  # after the first chunk there is no status to speak of, only a cut
        return errors.UpstreamFailed("The upstream stream broke.")
    if refused_by_vendor(exc):
        return errors.VendorRefused(exc.status or 400, exc.vendor_message)
    if exc.status == 429:
        # Waiting helps: say so in our language, with the vendor's wait (or a second).
        retry_after_s = math.ceil(exc.retry_after_s) if exc.retry_after_s else 1
        return errors.UpstreamRateLimited(
            f"The upstream provider is rate limiting (HTTP 429); retry after {retry_after_s} s.",
            retry_after_s=retry_after_s,
        )
    if exc.status is not None:
        return errors.UpstreamFailed(f"The upstream provider failed (HTTP {exc.status}).")
    return errors.UpstreamFailed()


def refused_by_vendor(exc: ProviderError) -> bool:
    """Say whether the vendor refused the request itself: a 4xx the client can fix (400, 404,
    413, 422, ...), not one about the key, the account's credit, the rate or a conflict."""
    status = exc.status
    return status is not None and 400 <= status < 500 and status not in NOT_THE_REQUEST


def judges_provider(exc: ProviderError, *, served_by: str) -> bool:
    """Say whether a failure counts against the breaker (client faults do not)."""
    if exc.status is None or exc.status >= 500 or exc.status in (408, 429):
        return True
    # A platform key refused is the platform's problem; a team key refused is the key's.
    return exc.status in (401, 403) and served_by == PLATFORM


class AttemptFailed(Exception):
    """One attempt failed: its error, whether the breaker hears of it, whether it ends the
    request (no other profile may try: a URL our fetcher refuses)."""

    def __init__(
        self, error: errors.GatewayError, *, judged: bool, ends_request: bool = False
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.judged = judged
        self.ends_request = ends_request


def vendor_failure(exc: ProviderError, *, served_by: str) -> AttemptFailed:
    """The attempt failure a vendor's error makes, in our language."""
    return AttemptFailed(
        upstream_error(exc),
        judged=judges_provider(exc, served_by=served_by),
        ends_request=refused_by_vendor(exc),
    )
