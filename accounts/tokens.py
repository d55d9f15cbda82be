"""Tenant API tokens (`Authorization: Token ...`): minted, revoked, recorded by prefix.

A token's rotation is accounts/rotation.py's; its check on each request is
accounts/authentication.py's.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from accounts.models import Membership, TenantToken
from accounts.secrets import TENANT_TOKEN_PREFIX, mint_secret
from audit import services as audit
from audit.actors import Actor


def record_token(
    token: TenantToken, *, action: str, actor: Actor | None, before: dict, after: dict
) -> None:
    """Record a tenant token's change in the trail of each account its user is a member of
    (operator-wide for a user in none): by prefix, never the token."""
    account_ids: list[int | None] = list(
        Membership.objects.filter(user_id=token.user_id)
        .order_by("account_id")
        .values_list("account_id", flat=True)
    )
    for account_id in account_ids or [None]:
        audit.record(
            actor=actor,
            action=action,
            account_id=account_id,
            target_type="token",
            target_id=token.pk,
            target_label=f"{token.prefix}… of {token.user.get_username()}",
            before=before,
            after=after,
        )


def tenant_token_create(*, user, actor: Actor | None = None) -> tuple[TenantToken, str]:
    secret, token_hash, prefix = mint_secret(TENANT_TOKEN_PREFIX)
    with transaction.atomic():
        token = TenantToken.objects.create(user=user, prefix=prefix, token_hash=token_hash)
        after = {"prefix": prefix, "user": user.get_username()}
        record_token(token, action="token.create", actor=actor, before={}, after=after)
    return token, secret


def tenant_tokens_revoke(*, user, actor: Actor | None = None) -> int:
    """Revoke every live tenant API token of `user`; return how many."""
    now = timezone.now()
    with transaction.atomic():
        tokens = list(
            TenantToken.objects.select_for_update()
            .filter(user=user, revoked_at__isnull=True)
            .order_by("id")
        )
        TenantToken.objects.filter(pk__in=[t.pk for t in tokens]).update(revoked_at=now)
        for token in tokens:
            record_token(
                token,
                action="token.revoke",
                actor=actor,
                before={"revoked_at": None},
                after={"revoked_at": now},
            )
    return len(tokens)
