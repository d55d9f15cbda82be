"""Tenant API authentication: `Authorization: Token <tenant token>`, stored hashed.

A client address that sends too many unknown or revoked tokens is refused for a while
(accounts/throttle.py), before the lookup, with LM-3001 and Retry-After. Only an unknown or
revoked token counts: a lookup that fails on a server error (the database unreachable) is
given back.
"""

from __future__ import annotations

from rest_framework import authentication, exceptions, status

from accounts import rotation, throttle, throttle_subjects
from accounts.models import TenantToken
from accounts.secrets import hash_secret


class TokensThrottled(exceptions.APIException):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "throttled"

    def __init__(self, wait_s: int, *, busy: bool = False) -> None:
        self.wait = wait_s  # the Retry-After, as DRF's Throttled names it
        super().__init__(throttle_subjects.token_refusal(wait_s, busy=busy))


class TenantTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, secret = header.partition(" ")
        if scheme != self.keyword:
            return None
        secret = secret.strip()
        if not secret:
            raise exceptions.AuthenticationFailed("Missing tenant token.")
        attempt = throttle.default.begin_token(
            address=throttle_subjects.client_address(request.META)
        )
        if attempt.wait_s:
            raise TokensThrottled(attempt.wait_s, busy=attempt.busy)
        try:
            token = (
                TenantToken.objects.select_related("user")
                # The current token, or the previous one while in grace (accounts/rotation.py).
                .filter(
                    rotation.matching("token_hash", hash_secret(secret)), revoked_at__isnull=True
                )
                .first()
            )
        except BaseException:
            throttle.default.released(attempt)  # a server error is not a wrong token
            raise
        if token is None or not token.user.is_active:
            wait_s = throttle.default.failed(attempt)
            if wait_s:
                raise TokensThrottled(wait_s)
            raise exceptions.AuthenticationFailed("Unknown or revoked tenant token.")
        throttle.default.succeeded(attempt)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
