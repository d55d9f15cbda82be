"""Who is calling: virtual key -> Principal, from an in-process cache.

The request path reads memory only. A miss loads the key (and its group) from the
database once; revocation and changes arrive over the bus and evict the entry on every
replica, and entries also age out after TOLLGATE_AUTH_CACHE_TTL_S as a safety net.

A key-guessing flood costs next to no database lookups:
- a key hash the database did not know is remembered for NEGATIVE_TTL_S (at most
  MAX_NEGATIVE of them, oldest dropped first); a bus message about that hash forgets it,
  so a key restored or changed since is looked up again at once;
- concurrent lookups of one hash share one query;
- a client address whose lookups found nothing TOLLGATE_AUTH_FAIL_PER_MIN times this
  minute is refused LM-3001 (Retry-After: the rest of the minute) for any key not already
  in memory, before a lookup. Only failures count and keys in memory are served as usual,
  so callers behind a flooding shared address (NAT, a proxy) with warm keys are never
  locked out. Counts are per process, kept in memory: no Redis round trip on the refusal
  path, and a fleet of N processes bounds an address at N x the limit.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError

from accounts import rotation
from accounts.access_groups import policy_for_group, policy_for_key
from accounts.model_access import UNRESTRICTED, AccessPolicy
from accounts.models import DEFAULT_CACHE_TTL_S, ApiKey, CacheMode, CacheScope, Group
from accounts.secrets import hash_secret
from billing.models import TagBudget
from core import metrics
from core.config import tollgate
from core.db import off_loop
from core.errors import (
    AccountSuspended,
    DependencyDown,
    InvalidRequest,
    RequestRateLimited,
    Unauthorized,
)
from core.tags import stored_tags
from guardrails.selectors import GuardrailSpec, guardrails_for

NEGATIVE_TTL_S = 30.0
MAX_NEGATIVE = 10_000
FAIL_WINDOW_S = 60
MAX_ADDRESSES = 10_000
OVERFLOW_ADDRESS = "*"  # addresses past MAX_ADDRESSES in one window share one budget


@dataclass(frozen=True, slots=True)
class TagLimit:
    """One tag budget of the principal's account."""

    tag: str
    budget_max_micro: int
    budget_period: str


def _tag_limits(account_id: int) -> tuple[TagLimit, ...]:
    return tuple(
        TagLimit(*row)
        for row in TagBudget.objects.filter(account_id=account_id)
        .order_by("tag")
        .values_list("tag", "budget_max_micro", "budget_period")
    )


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, authenticated: a virtual key with its group and account (or, on the
    internal routes, a trusted service acting for a group), and their limits and budgets.

    Not the end user: that is the caller label (usage.pseudonym), which only labels.
    """

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
    web_units_per_day: int | None = None  # the group's daily web unit cap (None: no cap)
    api_key_id: int | None = None  # None for internal callers, who act for a group
    key_hash: str = ""
    key_budget_max_micro: int | None = None
    key_rpm: int | None = None
    key_tpm: int | None = None
    # Which models the key may call (accounts/model_access.py; gateway/access.py applies it).
    access: AccessPolicy = UNRESTRICTED
    expires_at: float | None = None
    # Set when the secret presented is a rotated key's previous one: refused from then on.
    grace_ends_at: float | None = None
    suspended: bool = False  # the account's, set by an operator: every request refused
    # The response cache's tenant rule: the key's where it sets one, else its group's.
    cache_mode: str = CacheMode.ON_REQUEST
    cache_ttl_s: int = DEFAULT_CACHE_TTL_S
    cache_scope: str = CacheScope.ACCOUNT
    account_created_us: int = 0  # with the id, names the account for good (cache keys)
    # The key's default tags, then its group's (gateway/tags.py puts them after the request's).
    default_tags: tuple[str, ...] = ()
    # The account's tag budgets (billing.models.TagBudget) and the time zone of their periods:
    # loaded with the principal, evicted with the account's (billing/tag_budgets.py).
    tag_budgets: tuple[TagLimit, ...] = ()
    time_zone: str = "UTC"
    trace_content: bool = False  # the account's traces carry prompts and answers
    # The guardrails of the key, its group and its account (guardrails.selectors), in the
    # order they run: loaded with the principal, evicted with the account's.
    guardrails: tuple[GuardrailSpec, ...] = ()

    @property
    def has_budget(self) -> bool:
        return self.group_budget_max_micro is not None or self.key_budget_max_micro is not None


def _principal_for_group(group: Group, api_key: ApiKey | None = None, **key_fields) -> Principal:
    return Principal(
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
        web_units_per_day=group.web_units_per_day,
        suspended=group.account.suspended_at is not None,
        cache_mode=(api_key and api_key.cache_mode) or group.cache_mode,
        cache_ttl_s=(
            api_key.cache_ttl_s
            if api_key is not None and api_key.cache_ttl_s is not None
            else group.cache_ttl_s
        ),
        cache_scope=(api_key and api_key.cache_scope) or group.cache_scope,
        account_created_us=int(group.account.created_at.timestamp() * 1_000_000),
        default_tags=stored_tags(api_key.default_tags if api_key else (), group.default_tags),
        tag_budgets=_tag_limits(group.account_id),
        time_zone=group.account.time_zone,
        trace_content=group.account.trace_content,
        guardrails=guardrails_for(group.account_id, group.pk, api_key.pk if api_key else None),
        **key_fields,
    )


def _load_key(key_hash: str) -> Principal | None:
    # The key's current secret, or its previous one while in grace (accounts/rotation.py):
    # either way the same key, so the same limits, budgets and usage rows.
    api_key = (
        ApiKey.objects.select_related("group__account")
        .filter(rotation.matching("key_hash", key_hash), revoked_at__isnull=True)
        .first()
    )
    if api_key is None:
        return None
    grace_ends = api_key.previous_valid_until if api_key.key_hash != key_hash else None
    return _principal_for_group(
        api_key.group,
        api_key,
        api_key_id=api_key.pk,
        key_hash=key_hash,
        key_budget_max_micro=api_key.budget_max_micro,
        key_rpm=api_key.rpm_limit,
        key_tpm=api_key.tpm_limit,
        access=policy_for_key(api_key),
        expires_at=api_key.expires_at.timestamp() if api_key.expires_at else None,
        grace_ends_at=grace_ends.timestamp() if grace_ends else None,
    )


def _load_group(group_id: int) -> Principal | None:
    group = Group.objects.select_related("account").filter(pk=group_id).first()
    # A service acting for a group is bounded by the group's access groups, as its keys are.
    return _principal_for_group(group, access=policy_for_group(group)) if group else None


def bearer(headers: dict[bytes, bytes]) -> str | None:
    """Return the credential from `Authorization: Bearer` or `x-api-key`."""
    auth = headers.get(b"authorization")
    if auth is not None:
        scheme, _, value = auth.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    api_key = headers.get(b"x-api-key")
    return api_key.decode("latin-1").strip() if api_key else None


def internal_authorized(headers: dict[bytes, bytes], *, web: bool = False) -> bool:
    """Say whether the request carries its routes' internal token: GATEWAY_INTERNAL_TOKEN on
    the model routes (and reload), or with `web` WEB_FETCH_INTERNAL_TOKEN or its alias on web
    acquisition's; neither opens the other's routes."""
    conf = tollgate()
    tokens = conf.web_internal_tokens if web else (conf.internal_token,)
    given = bearer(headers)
    if given is None:
        return False
    raw = given.encode("latin-1")
    # Every token compared, so the time taken says nothing of which one matched.
    return any([hmac.compare_digest(raw, token.encode()) for token in tokens if token])


def require_internal(headers: dict[bytes, bytes], *, web: bool = False) -> None:
    """Raise LM-1001 unless `internal_authorized`; an operator who left the web token unset
    is told so, since the model routes' token no longer opens web routes."""
    if internal_authorized(headers, web=web):
        return
    if web and not tollgate().web_internal_tokens:
        raise Unauthorized("Internal web routes are off: WEB_FETCH_INTERNAL_TOKEN is not set.")
    raise Unauthorized(
        "Missing or wrong internal token"
        + (" (web routes take WEB_FETCH_INTERNAL_TOKEN)." if web else ".")
    )


class FailedLookups:
    """Count key lookups that found nothing, per client address, in one-minute windows."""

    def __init__(
        self, per_min: int, *, clock: Callable[[], float] = time.time, epoch_s: int = 0
    ) -> None:
        self.per_min = per_min  # 0: no limit
        self._clock = clock
        self._epoch_s = epoch_s  # windows are counted from this Unix time (0: on the minute)
        self._window = -1
        self._counts: dict[str, int] = {}

    def _slot(self, address: str) -> str:
        window = int((self._clock() - self._epoch_s) // FAIL_WINDOW_S)
        if window != self._window:
            self._window = window
            self._counts.clear()
        if address in self._counts or len(self._counts) < MAX_ADDRESSES:
            return address
        return OVERFLOW_ADDRESS

    def retry_after_s(self, address: str) -> int | None:
        """Return how long `address` must wait before it may cost a lookup, or None."""
        if not self.per_min or self._counts.get(self._slot(address), 0) < self.per_min:
            return None
        return math.ceil(FAIL_WINDOW_S - (self._clock() - self._epoch_s) % FAIL_WINDOW_S)

    def failed(self, address: str) -> None:
        slot = self._slot(address)
        self._counts[slot] = self._counts.get(slot, 0) + 1


class PrincipalCache:
    def __init__(self) -> None:
        self._keys: dict[str, tuple[Principal, float]] = {}
        self._groups: dict[int, tuple[Principal, float]] = {}
        self._unknown: dict[str, float] = {}  # key hash -> when the database did not know it
        self._pending: dict[str, asyncio.Future] = {}
        self._evictions = 0  # bus evictions so far: a lookup that spans one reads again
        conf = tollgate()
        self._failures = FailedLookups(conf.auth_fail_per_min, epoch_s=conf.rate_epoch_s)
        self._ttl_s = float(conf.auth_cache_ttl_s)

    async def for_secret(
        self, secret: str | None, *, client: tuple[str, int] | None = None
    ) -> Principal:
        """Return the Principal of a virtual key, or raise Unauthorized (LM-1001).

        `client` is the ASGI scope's client (address, port): an address that failed too
        many lookups this minute gets RequestRateLimited (LM-3001) instead of a lookup.
        """
        if not secret:
            raise Unauthorized("Missing API key: send Authorization: Bearer or x-api-key.")
        key_hash = hash_secret(secret)
        entry = self._keys.get(key_hash)
        if entry is None or time.monotonic() - entry[1] > self._ttl_s:
            address = client[0] if client else ""
            evictions = self._evictions
            principal = await self._lookup(key_hash, address)
            if self._evictions != evictions:
                # A change (a rotation, a revoke) was announced while the row was read: the
                # read may predate it, so read again rather than keep a stale key for the TTL.
                principal = await self._lookup(key_hash, address)
            entry = (principal, time.monotonic())
            self._keys[key_hash] = entry
        principal = entry[0]
        if principal.expires_at is not None and principal.expires_at <= time.time():
            raise Unauthorized("API key expired.")
        # Checked on every request, so a cached previous secret ends on time on every
        # replica, with no message needed.
        if principal.grace_ends_at is not None and principal.grace_ends_at <= time.time():
            raise Unauthorized("This key was rotated and its previous secret's grace ended.")
        if principal.suspended:
            raise AccountSuspended()
        return principal

    async def _lookup(self, key_hash: str, address: str) -> Principal:
        missed_at = self._unknown.get(key_hash)
        if missed_at is not None and time.monotonic() - missed_at < NEGATIVE_TTL_S:
            raise Unauthorized()
        wait_s = self._failures.retry_after_s(address)
        if wait_s is not None:
            metrics.AUTH_THROTTLED.inc()
            raise RequestRateLimited(
                "Too many unknown API keys from this address; retry later.", retry_after_s=wait_s
            )
        pending = self._pending.get(key_hash)
        if pending is None:
            # Only the address that cost the query is charged when it finds nothing.
            pending = asyncio.ensure_future(self._load_key(key_hash, address))
            self._pending[key_hash] = pending
            pending.add_done_callback(lambda done: self._lookup_done(key_hash, done))
        principal = await asyncio.shield(pending)
        if principal is None:
            raise Unauthorized()
        return principal

    async def _load_key(self, key_hash: str, address: str) -> Principal | None:
        try:
            principal = await self._load(_load_key, key_hash)
        except DependencyDown:
            metrics.AUTH_LOOKUPS.labels("error").inc()
            raise
        if principal is None:
            metrics.AUTH_LOOKUPS.labels("unknown").inc()
            self._failures.failed(address)
            self._unknown.pop(key_hash, None)  # re-inserted last: the order is by age
            if len(self._unknown) >= MAX_NEGATIVE:
                del self._unknown[next(iter(self._unknown))]  # the oldest
            self._unknown[key_hash] = time.monotonic()
        else:
            metrics.AUTH_LOOKUPS.labels("found").inc()
        return principal

    def _lookup_done(self, key_hash: str, done: asyncio.Future) -> None:
        if self._pending.get(key_hash) is done:
            del self._pending[key_hash]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have left (client disconnects)

    async def for_group(self, group_id: object) -> Principal:
        """Return a Principal acting for a group (internal routes); unknown -> LM-2001."""
        if isinstance(group_id, bool) or not isinstance(group_id, int):
            raise InvalidRequest("'group' must be a group id.")
        now = time.monotonic()
        entry = self._groups.get(group_id)
        if entry is None or now - entry[1] > self._ttl_s:
            principal = await self._load(_load_group, group_id)
            if principal is None:
                raise InvalidRequest("Unknown group.")
            entry = (principal, now)
            self._groups[group_id] = entry
        if entry[0].suspended:
            raise AccountSuspended()
        return entry[0]

    @staticmethod
    async def _load(loader, arg):
        try:
            return await off_loop(loader)(arg)
        except DatabaseError:
            raise DependencyDown() from None

    # Bus handlers: evict what changed.
    def _evicted(self) -> None:
        self._evictions += 1
        self._pending.clear()  # queries under way may predate the change: none is joined

    def evict_key(self, payload: dict) -> None:
        self._evicted()
        # A rotated key is cached under each of its secrets: "key_hashes" names them all.
        for key_hash in payload.get("key_hashes") or [payload.get("key_hash", "")]:
            self._keys.pop(key_hash, None)
            self._unknown.pop(key_hash, None)  # a key restored or changed is looked up again

    def evict_group(self, payload: dict) -> None:
        if payload.get("account_id") is not None:  # its access groups changed
            self._evict_account(payload["account_id"])
        group_id = payload.get("group_id")
        if group_id is None:
            return
        self._evicted()
        self._groups.pop(group_id, None)
        for key_hash in [h for h, (c, _) in self._keys.items() if c.group_id == group_id]:
            self._keys.pop(key_hash, None)

    def _evict_account(self, account_id: int) -> None:
        self._evicted()  # a lookup under way may have read the access groups before
        for group_id in [g for g, (c, _) in self._groups.items() if c.account_id == account_id]:
            self._groups.pop(group_id, None)
        for key_hash in [h for h, (c, _) in self._keys.items() if c.account_id == account_id]:
            self._keys.pop(key_hash, None)

    def clear(self) -> None:
        self._keys.clear()
        self._groups.clear()
        self._unknown.clear()
