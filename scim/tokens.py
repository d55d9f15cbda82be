"""The account's SCIM token: created or rotated by an owner (the secret shown once), looked
up per request by its hash (no cache: a rotation's end of grace holds at once everywhere)."""

from __future__ import annotations

from django.db import transaction

from accounts import rotation
from accounts.models import Account
from accounts.secrets import hash_secret, mint_secret
from audit import services as audit
from audit.actors import Actor
from scim.models import ScimToken

SCIM_TOKEN_PREFIX = "tgs_"


def _record(token: ScimToken, *, action: str, actor: Actor | None, before: dict, after: dict):
    audit.record(
        actor=actor,
        action=action,
        account_id=token.account_id,
        target_type="scim_token",
        target_id=token.pk,
        target_label=f"{token.prefix}…",
        before=before,
        after=after,
    )


def scim_token_issue(
    *, account: Account, grace_s: int = 0, actor: Actor | None = None
) -> tuple[ScimToken, str]:
    """Create the account's SCIM token, or rotate it if it has one (the replaced secret
    keeps working `grace_s` seconds, accounts/rotation.py); return the row and the secret,
    which is never shown again."""
    rotation.check_grace_s(grace_s)
    with transaction.atomic():
        token = ScimToken.objects.select_for_update().filter(account=account).first()
        if token is None:
            secret, token_hash, prefix = mint_secret(SCIM_TOKEN_PREFIX)
            token = ScimToken.objects.create(account=account, prefix=prefix, token_hash=token_hash)
            _record(
                token, action="scim.token.create", actor=actor, before={}, after={"prefix": prefix}
            )
            return token, secret
        done = rotation.rotate(
            token, hash_field="token_hash", secret_prefix=SCIM_TOKEN_PREFIX, grace_s=grace_s
        )
        _record(
            token, action="scim.token.rotate", actor=actor, before=done.before, after=done.after
        )
        return token, done.secret


def scim_token_lookup(secret: str) -> ScimToken | None:
    """Return the SCIM token whose current secret, or previous one in grace, is `secret`."""
    return (
        ScimToken.objects.select_related("account")
        .filter(rotation.matching("token_hash", hash_secret(secret)))
        .first()
    )
