"""Bearer authentication of /scim/v2/ with the account's SCIM token, throttled as tenant API
tokens are (accounts/throttle.py's token door, by client address): an address that sends too
many wrong tokens is refused for a while before any lookup (429, Retry-After)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest

from accounts import throttle, throttle_subjects
from accounts.models import Account
from audit.actors import Actor, Kind, remote_address
from scim.errors import ScimError
from scim.models import ScimToken
from scim.tokens import scim_token_lookup


@dataclass(frozen=True)
class Caller:
    """The directory calling: the account its token belongs to, and the audit's actor."""

    account: Account
    token: ScimToken
    actor: Actor


class Throttled(ScimError):
    def __init__(self, wait_s: int, *, busy: bool = False) -> None:
        super().__init__(429, throttle_subjects.token_refusal(wait_s, busy=busy))
        self.wait_s = wait_s

    def response(self):
        response = super().response()
        response["Retry-After"] = str(max(1, self.wait_s))
        return response


def unauthorized(detail: str) -> ScimError:
    return ScimError(401, detail)


def authenticate(request: HttpRequest) -> Caller:
    """Return the caller of a SCIM request, or raise a SCIM 401 (429 while throttled)."""
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise unauthorized("Send the account's SCIM token: Authorization: Bearer <token>.")
    attempt = throttle.default.begin_token(address=throttle_subjects.client_address(request.META))
    if attempt.wait_s:
        raise Throttled(attempt.wait_s, busy=attempt.busy)
    try:
        token = scim_token_lookup(secret)
    except BaseException:
        throttle.default.released(attempt)  # a server error is not a wrong token
        raise
    if token is None:
        wait_s = throttle.default.failed(attempt)
        if wait_s:
            raise Throttled(wait_s)
        raise unauthorized("Unknown or replaced SCIM token.")
    throttle.default.succeeded(attempt)
    actor = Actor(Kind.TOKEN, f"SCIM token {token.prefix}…", token.pk, remote_address(request.META))
    return Caller(account=token.account, token=token, actor=actor)
