"""Rotate a secret without downtime: a new secret for the same row, the old one kept for a
grace period the tenant picks (none to 7 days), then refused.

The rule, in one place, for every hashed credential Tollgate hands out (virtual keys, tenant
API tokens, the SCIM token): a row holds its current secret's hash in some field
(`key_hash`, `token_hash`, ...) and two more fields named by convention,

    previous_hash          the replaced secret's hash (unique, null when there is none)
    previous_valid_until   when the replaced secret stops working (null: none)

`rotate` moves the current hash to `previous_hash` with its grace end and mints the new
secret; a grace of 0 keeps no previous secret at all. One previous secret at most: rotating
again while an older secret is still in grace ends that older one now (it is dropped), and
the secret being replaced gets the new grace. A lookup accepts either hash through
`matching` (the previous one only before its grace end).

Reusing it for another credential (e.g. the SCIM token), inside the caller's transaction
and with the row locked (select_for_update), then the caller's own audit entry:

    with transaction.atomic():
        row = ScimToken.objects.select_for_update().get(pk=row.pk)
        done = rotation.rotate(row, hash_field="token_hash", secret_prefix="tgs_",
                               grace_s=grace_s)
        audit.record(..., action="scim.rotate", before=done.before, after=done.after)
    # done.secret is shown once; done.dropped_hashes are the hashes that stopped working
    # now (evict them from any cache); lookups use
    ScimToken.objects.filter(rotation.matching("token_hash", hash_secret(secret)))

`api_key_rotate` and `tenant_token_rotate` are that, plus the audit entry and (for keys) the
bus message that evicts every replica's cached entries before they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import models, transaction
from django.utils import timezone

from accounts.models import ApiKey, TenantToken
from accounts.secrets import TENANT_TOKEN_PREFIX, VIRTUAL_KEY_PREFIX, mint_secret
from accounts.tokens import record_token
from audit import services as audit
from audit.actors import Actor
from core import bus

GRACE_MAX_S = 7 * 24 * 3600  # a week: long enough to roll a fleet's config, short-lived
GRACE_ERROR = f"Give grace_s in whole seconds from 0 (none) to {GRACE_MAX_S} (7 days)."
PREVIOUS_HASH = "previous_hash"
PREVIOUS_VALID_UNTIL = "previous_valid_until"


class BadGrace(ValueError):
    """A grace period outside 0..GRACE_MAX_S seconds (or not a whole number of them)."""


class NotRotatable(ValueError):
    """The row cannot be rotated (a revoked key or token)."""


@dataclass(frozen=True)
class Rotated:
    """What a rotation did: the new secret (shown once), the replaced secret's grace end
    (None: refused at once), the hashes that stopped working now, and the audit's view."""

    secret: str
    previous_valid_until: datetime | None
    replaced_hash: str
    dropped_hashes: tuple[str, ...]
    before: dict
    after: dict


def check_grace_s(grace_s: object) -> int:
    """Return the grace in seconds, or raise BadGrace naming the allowed range."""
    if isinstance(grace_s, bool) or not isinstance(grace_s, int) or not 0 <= grace_s <= GRACE_MAX_S:
        raise BadGrace(GRACE_ERROR)
    return grace_s


def matching(hash_field: str, secret_hash: str, *, now: datetime | None = None) -> models.Q:
    """Return the filter of a row whose current secret, or previous one still in grace,
    has this hash."""
    return models.Q(**{hash_field: secret_hash}) | models.Q(
        **{PREVIOUS_HASH: secret_hash, f"{PREVIOUS_VALID_UNTIL}__gt": now or timezone.now()}
    )


def rotate(
    row: models.Model,
    *,
    hash_field: str,
    secret_prefix: str,
    grace_s: int,
    now: datetime | None = None,
    prefix_field: str | None = "prefix",
) -> Rotated:
    """Give `row` a new secret and keep its current one for `grace_s` seconds; save only
    those fields. The caller holds the row locked in its transaction."""
    grace_s = check_grace_s(grace_s)
    now = now or timezone.now()
    old_hash = getattr(row, hash_field)
    old_until = getattr(row, PREVIOUS_VALID_UNTIL)
    old_previous = getattr(row, PREVIOUS_HASH)
    secret, new_hash, display = mint_secret(secret_prefix)
    until = now + timedelta(seconds=grace_s) if grace_s else None
    before = {PREVIOUS_VALID_UNTIL: old_until}
    setattr(row, hash_field, new_hash)
    setattr(row, PREVIOUS_HASH, old_hash if until else None)
    setattr(row, PREVIOUS_VALID_UNTIL, until)
    fields = [hash_field, PREVIOUS_HASH, PREVIOUS_VALID_UNTIL]
    if prefix_field:
        before[prefix_field] = getattr(row, prefix_field)
        setattr(row, prefix_field, display)
        fields.append(prefix_field)
    row.save(update_fields=fields)
    after: dict[str, object] = {PREVIOUS_VALID_UNTIL: until, "grace_s": grace_s}
    if prefix_field:
        after[prefix_field] = display
    dropped = [old_previous] if old_previous else []
    if until is None:
        dropped.append(old_hash)
    return Rotated(
        secret=secret,
        previous_valid_until=until,
        replaced_hash=old_hash,
        dropped_hashes=tuple(dropped),
        before=before,
        after=after,
    )


def api_key_rotate(*, api_key: ApiKey, grace_s: int, actor: Actor | None = None) -> Rotated:
    """Rotate a virtual key's secret (same id, models, limits, budget, usage); returns once
    every replica dropped its cached entries, so both secrets are looked up afresh."""
    check_grace_s(grace_s)
    with transaction.atomic():
        # The key's row alone: the money path updates its group's row then the key's, and a
        # lock taken on both here (select_related's join) deadlocks with it under load.
        locked = (
            ApiKey.objects.select_for_update(of=("self",))
            .select_related("group")
            .get(pk=api_key.pk)
        )
        if locked.revoked_at is not None:
            raise NotRotatable("A revoked key cannot be rotated.")
        done = rotate(
            locked, hash_field="key_hash", secret_prefix=VIRTUAL_KEY_PREFIX, grace_s=grace_s
        )
        audit.record(
            actor=actor,
            action="key.rotate",
            account_id=locked.group.account_id,
            target_type="key",
            target_id=locked.pk,
            target_label=f"{locked.prefix}… {locked.name}".strip(),
            before=done.before,
            after=done.after,
        )
    for name in ("key_hash", "prefix", PREVIOUS_HASH, PREVIOUS_VALID_UNTIL):
        setattr(api_key, name, getattr(locked, name))
    # The replaced hash's cached entry has no grace end yet: evict it (and any dropped one)
    # everywhere before answering; the next request reloads it with its grace end.
    key_hashes = [done.replaced_hash, *done.dropped_hashes, locked.key_hash]
    bus.publish(
        bus.Topic.API_KEY,
        {"key_hash": done.replaced_hash, "key_hashes": list(dict.fromkeys(key_hashes))},
        wait=True,
    )
    return done


def tenant_token_rotate(*, token: TenantToken, grace_s: int, actor: Actor | None = None) -> Rotated:
    """Rotate a tenant API token (looked up per request: no cache to evict)."""
    check_grace_s(grace_s)
    with transaction.atomic():
        locked = (
            TenantToken.objects.select_for_update(of=("self",))
            .select_related("user")
            .get(pk=token.pk)
        )
        if locked.revoked_at is not None:
            raise NotRotatable("A revoked token cannot be rotated.")
        done = rotate(
            locked, hash_field="token_hash", secret_prefix=TENANT_TOKEN_PREFIX, grace_s=grace_s
        )
        record_token(
            locked, action="token.rotate", actor=actor, before=done.before, after=done.after
        )
    for name in ("token_hash", "prefix", PREVIOUS_HASH, PREVIOUS_VALID_UNTIL):
        setattr(token, name, getattr(locked, name))
    return done
