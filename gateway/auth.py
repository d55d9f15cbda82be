"""Who is calling: virtual key -> Caller, from an in-process cache.

The request path reads memory only. A miss loads the key (and its group) from the
database once; revocation and changes arrive over the bus and evict the entry on every
replica, and entries also age out after TOLLGATE_AUTH_CACHE_TTL_S as a safety net.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError

from accounts.models import ApiKey, Group
from accounts.secrets import hash_secret
from gateway.db import off_loop
from gateway.errors import DependencyDown, InvalidRequest, Unauthorized

NEGATIVE_TTL_S = 5.0
MAX_NEGATIVE = 10_000


@dataclass(frozen=True, slots=True)
class Caller:
    """Everything the request path needs to know about who is calling."""

    account_id: int
    billing_mode: str
    group_id: int
    group_budget_max_micro: int | None
    group_rpm: int | None
    group_tpm: int | None
    group_concurrency: int | None
    bandwidth_micro_per_gb: int
    caller_rpm: int | None = None
    caller_tpm: int | None = None
    caller_budget_max_micro: int | None = None
    api_key_id: int | None = None  # None for internal callers, who act for a group
    key_hash: str = ""
    key_budget_max_micro: int | None = None
    key_rpm: int | None = None
    key_tpm: int | None = None
    allowed_models: frozenset[str] = frozenset()
    expires_at: float | None = None

    def may_use(self, model: str) -> bool:
        return not self.allowed_models or model in self.allowed_models

    @property
    def has_budget(self) -> bool:
        return self.group_budget_max_micro is not None or self.key_budget_max_micro is not None


def _caller_for_group(group: Group, **key_fields) -> Caller:
    return Caller(
        account_id=group.account_id,
        billing_mode=group.account.billing_mode,
        group_id=group.pk,
        group_budget_max_micro=group.budget_max_micro,
        group_rpm=group.rpm_limit,
        group_tpm=group.tpm_limit,
        group_concurrency=group.concurrency_limit,
        bandwidth_micro_per_gb=group.bandwidth_micro_usd_per_gb,
        caller_rpm=group.caller_rpm_limit,
        caller_tpm=group.caller_tpm_limit,
        caller_budget_max_micro=group.caller_budget_max_micro,
        **key_fields,
    )


def _load_key(key_hash: str) -> Caller | None:
    api_key = (
        ApiKey.objects.select_related("group__account")
        .filter(key_hash=key_hash, revoked_at__isnull=True)
        .first()
    )
    if api_key is None:
        return None
    return _caller_for_group(
        api_key.group,
        api_key_id=api_key.pk,
        key_hash=key_hash,
        key_budget_max_micro=api_key.budget_max_micro,
        key_rpm=api_key.rpm_limit,
        key_tpm=api_key.tpm_limit,
        allowed_models=frozenset(api_key.allowed_models or ()),
        expires_at=api_key.expires_at.timestamp() if api_key.expires_at else None,
    )


def _load_group(group_id: int) -> Caller | None:
    group = Group.objects.select_related("account").filter(pk=group_id).first()
    return _caller_for_group(group) if group else None


class CallerCache:
    def __init__(self) -> None:
        self._keys: dict[str, tuple[Caller, float]] = {}
        self._groups: dict[int, tuple[Caller, float]] = {}
        self._unknown: dict[str, float] = {}
        self._ttl_s = float(settings.TOLLGATE["AUTH_CACHE_TTL_S"])

    async def for_secret(self, secret: str | None) -> Caller:
        """Return the Caller of a virtual key, or raise Unauthorized (LM-1001)."""
        if not secret:
            raise Unauthorized("Missing API key: send Authorization: Bearer or x-api-key.")
        key_hash = hash_secret(secret)
        now = time.monotonic()
        entry = self._keys.get(key_hash)
        if entry is None or now - entry[1] > self._ttl_s:
            if now - self._unknown.get(key_hash, -NEGATIVE_TTL_S) < NEGATIVE_TTL_S:
                raise Unauthorized()
            caller = await self._load(_load_key, key_hash)
            if caller is None:
                if len(self._unknown) > MAX_NEGATIVE:
                    self._unknown.clear()
                self._unknown[key_hash] = now
                raise Unauthorized()
            entry = (caller, now)
            self._keys[key_hash] = entry
        caller = entry[0]
        if caller.expires_at is not None and caller.expires_at <= time.time():
            raise Unauthorized("API key expired.")
        return caller

    async def for_group(self, group_id: object) -> Caller:
        """Return a Caller acting for a group (internal routes); unknown -> LM-2001."""
        if isinstance(group_id, bool) or not isinstance(group_id, int):
            raise InvalidRequest("'group' must be a group id.")
        now = time.monotonic()
        entry = self._groups.get(group_id)
        if entry is None or now - entry[1] > self._ttl_s:
            caller = await self._load(_load_group, group_id)
            if caller is None:
                raise InvalidRequest("Unknown group.")
            entry = (caller, now)
            self._groups[group_id] = entry
        return entry[0]

    @staticmethod
    async def _load(loader, arg):
        try:
            return await off_loop(loader)(arg)
        except DatabaseError:
            raise DependencyDown() from None

    # Bus handlers: evict what changed.
    def evict_key(self, payload: dict) -> None:
        self._keys.pop(payload.get("key_hash", ""), None)

    def evict_group(self, payload: dict) -> None:
        group_id = payload.get("group_id")
        self._groups.pop(group_id, None)
        for key_hash in [h for h, (c, _) in self._keys.items() if c.group_id == group_id]:
            self._keys.pop(key_hash, None)

    def clear(self) -> None:
        self._keys.clear()
        self._groups.clear()
        self._unknown.clear()
