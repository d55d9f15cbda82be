"""Tenant API authentication: `Authorization: Token <tenant token>`, stored hashed."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from accounts.models import TenantToken
from accounts.secrets import hash_secret


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
        token = (
            TenantToken.objects.select_related("user")
            .filter(token_hash=hash_secret(secret), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Unknown or revoked tenant token.")
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
