"""Tollgate's one error language.

Every refusal is an OpenAI-compatible body `{"error": {"message", "type", "code"}}` with a
stable code. The tree:

    GatewayError                      (code, HTTP status, optional Retry-After)
    ├── Unauthorized                  LM-1001 401
    ├── Forbidden                     LM-1003 403
    ├── AccountSuspended              LM-1004 403
    ├── InvalidRequest                LM-2001 400
    ├── VendorRefused                 LM-2002 the vendor's 4xx (400, 404, 413, 422, ...)
    ├── IdempotencyConflict           LM-2009 409  (Retry-After while the first still runs)
    ├── BodyTooLarge                  LM-2013 413
    ├── GuardrailBlocked              LM-2030 400  (names the guardrail, never what it found)
    ├── RequestRateLimited            LM-3001 429  Retry-After
    ├── TokenRateLimited              LM-3002 429  Retry-After
    ├── CapacityExhausted             LM-3003 429  Retry-After
    ├── DailyUnitsExhausted           LM-3004 429  Retry-After (to the next UTC day)
    ├── UpstreamRateLimited           LM-3010 429  Retry-After (the vendor's, else 1 s)
    ├── TeamKeysExhausted             LM-3021 429  (decided by the gateway; never retried)
    ├── BudgetExhausted               LM-4001 402
    ├── WalletInsufficient            LM-4002 402
    ├── UpstreamFailed                LM-5001 502
    ├── UpstreamTimeout               LM-5002 504
    ├── CircuitOpen                   LM-5003 503  Retry-After
    └── DependencyDown                LM-5004 503

Messages are ours: a vendor's body never reaches a client or a log. The one vendor text a
client sees is a refusal's message (LM-2002: what the vendor said was wrong with the
request), extracted from its error JSON, cleaned and bounded by the adapter. A request that
ends in a gateway refusal (`refusal = True`: everything but the upstream outcomes LM-2002,
LM-3010, LM-5001, LM-5002) is billed nothing, bandwidth included, even if a team key was
tried on the way.
"""

from __future__ import annotations

import functools

import orjson

from core.money import format_usd_exact


class GatewayError(Exception):
    code = "LM-5001"
    status = 500
    error_type = "api_error"
    default_message = "Internal error."
    summary: str | None = None  # one sentence for a log's reader, where default_message is long
    refusal = True  # decided by the gateway, not an upstream outcome: never billed

    def __init__(self, message: str | None = None, *, retry_after_s: int | None = None):
        self.message = message or self.default_message
        self.retry_after_s = retry_after_s
        super().__init__(self.message)

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.error_type, "code": self.code}}
        )

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after_s is None:
            return []
        return [(b"retry-after", str(max(1, int(self.retry_after_s))).encode())]


class Unauthorized(GatewayError):
    code, status, error_type = "LM-1001", 401, "authentication_error"
    default_message = "Missing, unknown, revoked or expired API key."


class Forbidden(GatewayError):
    code, status, error_type = "LM-1003", 403, "permission_error"
    default_message = "This key may not use this model or route."


class AccountSuspended(GatewayError):
    code, status, error_type = "LM-1004", 403, "permission_error"
    default_message = (
        "This account is suspended by the gateway's operator: its keys are refused until it"
        " is resumed. Ask the operator."
    )


class InvalidRequest(GatewayError):
    code, status, error_type = "LM-2001", 400, "invalid_request_error"
    default_message = "Invalid request."


class GuardrailBlocked(GatewayError):
    """A guardrail the request's key, group or account carries blocked it (guardrails/): the
    message names the guardrail, the phase and the kinds it found, never the text."""

    code, status, error_type = "LM-2030", 400, "invalid_request_error"
    default_message = "Blocked by a guardrail."


class VendorRefused(GatewayError):
    """The vendor refused the request itself (a 4xx the client can fix): its status and, when
    it said one, its message. Never retried, never another link, no breaker's business."""

    code, status, error_type = "LM-2002", 400, "invalid_request_error"
    default_message = "The upstream provider refused the request."
    summary = "The upstream provider refused the request as invalid (its status and message)."
    refusal = False  # the vendor's verdict on a call that was sent: bandwidth is billed

    def __init__(self, status: int, vendor_message: str | None = None) -> None:
        said = f": {vendor_message}" if vendor_message else "."
        super().__init__(f"The upstream provider refused the request (HTTP {status}){said}")
        self.status = status

    def headers(self) -> list[tuple[bytes, bytes]]:
        # The same request would be refused again: tell the SDKs not to retry it.
        return [*super().headers(), (b"x-should-retry", b"false")]


class NotFound(GatewayError):
    code, status, error_type = "LM-2004", 404, "invalid_request_error"
    default_message = "No such object."


class IdempotencyConflict(GatewayError):
    """An Idempotency-Key already used with another body, or its request still running."""

    code, status, error_type = "LM-2009", 409, "invalid_request_error"
    default_message = "This Idempotency-Key was already used with another request body."

    def __init__(self, message: str | None = None, *, in_progress: bool = False) -> None:
        super().__init__(message, retry_after_s=1 if in_progress else None)
        self.in_progress = in_progress

    def headers(self) -> list[tuple[bytes, bytes]]:
        # The official SDKs retry any 409 unless told otherwise: only waiting helps.
        return [*super().headers(), (b"x-should-retry", b"true" if self.in_progress else b"false")]


class BodyTooLarge(GatewayError):
    code, status, error_type = "LM-2013", 413, "invalid_request_error"
    default_message = "Request body is over the size cap."


class RequestRateLimited(GatewayError):
    code, status, error_type = "LM-3001", 429, "rate_limit_error"
    default_message = "Request rate over limit."


class TokenRateLimited(GatewayError):
    code, status, error_type = "LM-3002", 429, "rate_limit_error"
    default_message = "Token rate over limit."


class CapacityExhausted(GatewayError):
    code, status, error_type = "LM-3003", 429, "rate_limit_error"
    default_message = "Too many requests in flight."


class DailyUnitsExhausted(GatewayError):
    """The group's daily web unit budget (pages, rendered pages, queries) is used up."""

    code, status, error_type = "LM-3004", 429, "rate_limit_error"
    default_message = "The group's daily web unit budget is exhausted."


class UpstreamRateLimited(GatewayError):
    """The vendor still answered 429 after the allowed tries and every fallback link."""

    code, status, error_type = "LM-3010", 429, "rate_limit_error"
    default_message = "The upstream provider is rate limiting; retry later."
    refusal = False


class TeamKeysExhausted(GatewayError):
    code, status, error_type = "LM-3021", 429, "rate_limit_error"
    default_message = "No team key is usable and platform fallback is off."

    def headers(self) -> list[tuple[bytes, bytes]]:
        # Never retried (a key added, or fallback turned on, changes the answer; a retry
        # does not): the official SDKs retry a 429 unless told otherwise.
        return [*super().headers(), (b"x-should-retry", b"false")]


class BudgetExhausted(GatewayError):
    code, status, error_type = "LM-4001", 402, "insufficient_quota"
    default_message = "Budget exhausted."


# What a tenant does about LM-4002: the wallet is funded by the gateway's operator (there is
# no card checkout), and the tenant API and dashboard show its balance.
FUND_THE_WALLET = (
    "Ask this gateway's operator to top up the wallet. The balance is at"
    " GET /api/accounts/{account_id}/wallet (tenant API token) and on the dashboard's"
    " Wallet page."
)


class WalletInsufficient(GatewayError):
    code, status, error_type = "LM-4002", 402, "insufficient_quota"
    default_message = "The account's wallet cannot cover this request. " + FUND_THE_WALLET.format(
        account_id="<account id>"
    )
    summary = "The account's wallet could not cover the request's worst-case cost."

    @classmethod
    def for_wallet(
        cls, *, account_id: int, available_micro: int | None, needed_micro: int
    ) -> WalletInsufficient:
        """Say in dollars what the wallet holds, what the request may cost, and who funds it."""
        held = (
            f"it has {format_usd_exact(available_micro)} available and "
            if available_micro is not None
            else ""
        )
        return cls(
            f"The account's wallet cannot cover this request: {held}this request may cost up"
            f" to {format_usd_exact(needed_micro)} (held before the call; what it does not"
            f" use is released). {FUND_THE_WALLET.format(account_id=account_id)}"
        )


class UpstreamFailed(GatewayError):
    code, status, error_type = "LM-5001", 502, "api_error"
    default_message = "The upstream provider failed."
    refusal = False


class UpstreamTimeout(GatewayError):
    code, status, error_type = "LM-5002", 504, "timeout_error"
    default_message = "The upstream provider timed out."
    refusal = False


class CircuitOpen(GatewayError):
    code, status, error_type = "LM-5003", 503, "overloaded_error"
    default_message = "Upstream circuit open; failing fast."


class DependencyDown(GatewayError):
    code, status, error_type = "LM-5004", 503, "api_error"
    default_message = "A Tollgate dependency is down; refusing rather than serving unbilled."


def _leaves(cls: type[GatewayError]) -> list[type[GatewayError]]:
    return [cls, *(leaf for sub in cls.__subclasses__() for leaf in _leaves(sub))]


# The codes a request may end with that bill nothing (bandwidth included).
REFUSAL_CODES = frozenset(c.code for c in _leaves(GatewayError)[1:] if c.refusal)


@functools.cache
def meanings() -> dict[str, str]:
    """Every error code with what it means in one sentence (for the usage log's readers)."""

    def family(cls: type[GatewayError]):
        for sub in cls.__subclasses__():
            yield sub
            yield from family(sub)

    return {cls.code: cls.summary or cls.default_message for cls in family(GatewayError)}
