"""Append audit entries: one per control-plane change, in the change's own transaction.

Services call `record` inside the transaction that makes the change (it joins it: a change
rolled back leaves no entry, an entry that cannot be written rolls the change back). Before
and after hold only the fields that changed, never a secret: `record` refuses a field named
like one (keys are recorded by label and last4, tokens by prefix).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypedDict

from django.db import connection, transaction
from django.utils import timezone

from audit.actors import Actor, default_actor
from audit.chain import GENESIS, entry_hash
from audit.heads import latest_or_sign, lock_sql
from audit.models import AuditEntry, SignedHead, iso

# Field names that would hold a secret; a before/after naming one is a bug, refused.
SECRET_FIELDS = frozenset(
    {
        "key",
        "secret",
        "key_hash",
        "token_hash",
        "sealed",
        "api_key_sealed",
        "password",
        "platform_key",
        "api_key",
    }
)
OPERATOR_CHAIN = 0  # the chain of entries with no account (provider profiles)

FALLBACK_CONSENT = (
    "Platform fallback on for {provider} in group {group}: the account agrees to pay platform "
    "prices for requests its team keys cannot serve (from its wallet when prepaid, on its "
    "invoice otherwise)."
)


class SecretInTrail(ValueError):
    """A before/after that names a secret's field: never written."""


def jsonable(value: Any) -> Any:
    """Return `value` as JSON keeps it: times as UTC ISO strings, decimals as strings,
    tuples and sets as lists."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, dt.datetime):
        return iso(value) if timezone.is_aware(value) else value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, str):
        return str(value)  # a choice (a str enum) as its plain value
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[dict, dict]:
    """Keep only what differs: the keys whose values changed (a key missing on one side is
    None there); a mapping on both sides (a profile's models) is compared key by key."""
    old, new = jsonable(before), jsonable(after)
    kept_old: dict[str, Any] = {}
    kept_new: dict[str, Any] = {}
    for name in sorted(set(old) | set(new)):
        was, now = old.get(name), new.get(name)
        if was == now:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            was, now = changes(was, now)
        kept_old[name], kept_new[name] = was, now
    return kept_old, kept_new


def _refuse_secrets(*parts: Any) -> None:
    for part in parts:
        if isinstance(part, dict):
            named = SECRET_FIELDS & set(part)
            if named:
                raise SecretInTrail(f"an audit entry never holds {sorted(named)[0]!r}")
            _refuse_secrets(*part.values())
        elif isinstance(part, list):
            _refuse_secrets(*part)


def lock_chain(chain: str, account_id: int) -> None:
    """Serialise appends to one chain until the transaction ends (audit/heads.py)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(lock_sql(chain, "SELECT %s::bigint"), [account_id])


def chain_head(account_id: int | None) -> tuple[int, str]:
    """The chain's head: its last entry's seq and hash ((0, GENESIS) while empty)."""
    last = (
        AuditEntry.objects.filter(account_id=account_id)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    return last if last is not None else (0, GENESIS)


def signed_audit_head(account_id: int | None) -> SignedHead:
    """The account's audit chain head (operator-wide with no account), signed now, or the
    newest signature of it if the chain has not moved since."""
    seq, hash = chain_head(account_id)
    chain = account_id if account_id is not None else OPERATOR_CHAIN
    return latest_or_sign(chain=SignedHead.Chain.AUDIT, account_id=chain, seq=seq, hash=hash)


class Target(TypedDict):
    """Who changed which row: the arguments `record` and `record_change` share, for a caller
    that records a row created or changed with one of them."""

    actor: Actor | None
    account_id: int | None
    target_type: str
    target_id: object
    target_label: str


def record(
    *,
    actor: Actor | None,
    action: str,
    account_id: int | None,
    target_type: str,
    target_id: object = "",
    target_label: str = "",
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    consent: str = "",
) -> AuditEntry:
    """Append one entry to the account's chain (operator-wide with no account) and return it.

    Joins the caller's transaction; the chain is locked until it commits, so one account's
    entries are appended one at a time, in order."""
    actor = actor or default_actor()
    before_j, after_j = jsonable(before or {}), jsonable(after or {})
    _refuse_secrets(before_j, after_j)
    chain = account_id if account_id is not None else OPERATOR_CHAIN
    with transaction.atomic():
        lock_chain(SignedHead.Chain.AUDIT, chain)
        last = chain_head(account_id)
        entry = AuditEntry(
            account_id=account_id,
            seq=last[0] + 1,
            created_at=timezone.now(),
            actor_kind=actor.kind,
            actor_id=actor.id,
            actor_label=actor.label[:200],
            remote_addr=actor.remote_addr,
            action=action,
            target_type=target_type,
            target_id=str(target_id if target_id is not None else "")[:64],
            target_label=str(target_label)[:200],
            before=before_j,
            after=after_j,
            consent=consent,
            prev_hash=last[1],
        )
        entry.hash = entry_hash(last[1], entry.as_record())
        entry.save()
    return entry


def record_change(
    *,
    actor: Actor | None,
    action: str,
    account_id: int | None,
    target_type: str,
    target_id: object,
    target_label: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> AuditEntry | None:
    """Record an update with only what differs; None (no entry) when nothing did."""
    old, new = changes(before, after)
    if not old and not new:
        return None
    return record(
        actor=actor,
        action=action,
        account_id=account_id,
        target_type=target_type,
        target_id=target_id,
        target_label=target_label,
        before=old,
        after=new,
    )
