"""A virtual key's payer map: for each model the live config serves, who pays for it.

Read from the database the gateway's catalog and pools are loaded from, by the catalog's own
rules (providers.catalog: which offers of a name count, which profiles have a platform key,
cheapest per token first), and decided by the gateway's own payer rule (byok.payers: team
pool, platform serving, fallback flags, the chain lock), so the map answers what the key's
next request meets: the team's keys (which pool), the platform (at which prices) or a refusal
(its LM code and message).

What it cannot see from here: a request's own shape (a surcharged field is served on team keys
only), a wallet too low for the platform's hold (LM-4002) and keys benched this minute (counted
as `team_keys_usable`; the request then goes to the next payer listed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from accounts.access_groups import policy_for_key
from accounts.model_access import AccessPolicy, Offering
from accounts.model_access import refusal_message as refusal_message_of_access
from accounts.models import ApiKey
from byok.models import KeyPool, TeamKey
from byok.payers import (
    PLATFORM,
    TEAM,
    Payers,
    link_payers,
    platform_serves,
    refusal_message,
    team_pool,
)
from core.errors import AccountSuspended, Forbidden, TeamKeysExhausted, Unauthorized
from core.money import TokenPrices
from providers.catalog import (
    cheapest_first,
    enabled_profiles,
    model_aliases,
    offers_by_model,
    platform_keys,
)
from providers.models import TEAM_KEY_ELIGIBLE_KINDS, WEB_KINDS, ProviderModel, ProviderProfile

TEAM_KEY = "team_key"  # what the map calls a team attempt's payer
PAYER_OF = {TEAM: TEAM_KEY, PLATFORM: PLATFORM}
REFUSED = "refused"
# A platform key named by an environment variable counts as present: the gateway's
# environment holds it, and the control plane's may not (each service gets its own settings).
NAMED = "named"


@dataclass(frozen=True, slots=True)
class ProfileView:
    """What the payer rule reads of a profile row (as gateway.catalog.Profile holds it)."""

    name: str
    kind: str
    allows_platform: bool
    platform_key: str | None

    @property
    def team_key_eligible(self) -> bool:
        return self.kind in TEAM_KEY_ELIGIBLE_KINDS


@dataclass(frozen=True, slots=True)
class PoolCounts:
    """A group's pool as the rule reads it: its flag and its keys (ids, never secrets)."""

    fallback: bool
    keys: tuple[int, ...]
    usable: int  # keys neither failing nor benched now (the database's copy of the bench)


@dataclass(frozen=True, slots=True)
class Offer:
    profile: ProfileView
    model: str
    kind: str
    aliases: tuple[str, ...]
    prices: TokenPrices  # the platform's, what providers.catalog.price_rank reads


@dataclass(frozen=True, slots=True)
class Payment:
    """One attempt of a model's chain: who pays for it, through which profile."""

    payer: str  # TEAM_KEY or PLATFORM
    provider: str


@dataclass(frozen=True, slots=True)
class ModelPayers:
    model: str
    kind: str
    aliases: tuple[str, ...]
    payer: str  # TEAM_KEY, PLATFORM or REFUSED: who pays for the next request
    provider: str | None  # the profile (for a team key: the pool) that serves it
    attempts: tuple[Payment, ...]  # in order: the next one pays when the one before fails
    code: str  # the refusal's LM code, "" when someone pays
    reason: str  # the refusal's message, as a request is answered
    price: TokenPrices | None  # the platform's prices, when one of the attempts is the platform's
    team_keys: int  # keys in the pool of `provider` (a team key payer), else 0
    team_keys_usable: int

    @property
    def then(self) -> str | None:
        """Say who pays when the first payer fails: the next attempt's payer, or None."""
        return self.attempts[1].payer if len(self.attempts) > 1 else None


@dataclass(frozen=True, slots=True)
class KeyPayers:
    api_key: ApiKey
    models: tuple[ModelPayers, ...]


def profile_view(row: ProviderProfile) -> ProfileView:
    """Return a profile row as the payer rule reads it: a platform key of those the gateway
    loads (providers.catalog.platform_keys) counts as present."""
    return ProfileView(
        name=row.name,
        kind=row.kind,
        allows_platform=row.allows_platform,
        platform_key=NAMED if platform_keys(row) else None,
    )


def _offer(profile: ProfileView, m: ProviderModel) -> Offer:
    return Offer(profile, m.name, m.kind, model_aliases(m), m.token_prices())


def served_offers() -> dict[str, list[Offer]]:
    """Return every model offer of the enabled profiles, by model name, by the catalog's
    rules (providers.catalog.offers_by_model); web-only profiles serve no model."""
    served = [(profile_view(row), row) for row in enabled_profiles() if row.kind not in WEB_KINDS]
    offers, _ignored = offers_by_model(served, _offer)  # the gateway logs them
    return offers


def pools_of(*, group_id: int, now: datetime) -> dict[str, PoolCounts]:
    """Return the group's pools by provider, with their key ids and how many may serve now."""
    pools = {}
    for pool in KeyPool.objects.filter(group_id=group_id).prefetch_related("keys"):
        keys = sorted(pool.keys.all(), key=lambda k: k.pk)
        usable = sum(
            1
            for k in keys
            if k.status == TeamKey.Status.ACTIVE
            and (k.benched_until is None or k.benched_until <= now)
        )
        pools[pool.provider] = PoolCounts(pool.fallback, tuple(k.pk for k in keys), usable)
    return pools


def key_refusal(api_key: ApiKey, *, now: datetime) -> tuple[str, str] | None:
    """Return the (code, message) every request of the key is refused with, if it is."""
    # The gateway's words: a revoked key is an unknown one; an expired one says so.
    if api_key.revoked_at is not None:
        return Unauthorized.code, Unauthorized.default_message
    if not api_key.is_usable(now):
        return Unauthorized.code, "API key expired."
    if api_key.group.account.suspended_at is not None:
        return AccountSuspended.code, AccountSuspended.default_message
    return None


def model_payers(
    offers: list[Offer], *, group_id: int, pools: dict[str, PoolCounts]
) -> ModelPayers:
    """Return who pays for one model's request: its offers' links walked in the gateway's
    order through the payer rule, the chain lock carried from link to link."""
    first = offers[0]
    locked = False
    attempts: list[Payment] = []
    price: TokenPrices | None = None
    team_pool_of: PoolCounts | None = None
    reason = ""
    for offer in cheapest_first(offers):
        pool = team_pool(offer.profile, group_id, lambda _g, name: pools.get(name))
        payers: Payers = link_payers(
            pool=pool, platform_ok=platform_serves(offer.profile), locked=locked
        )
        locked = locked or payers.locks_chain
        if not payers.served_by:
            reason = refusal_message(
                offer.profile.name, locked=payers.locked, fallback_off=payers.locks_chain
            )
        for served_by in payers.served_by:
            if served_by == PLATFORM and price is None:
                price = offer.prices
            if served_by == TEAM and not attempts:
                team_pool_of = pool
            attempts.append(Payment(PAYER_OF[served_by], offer.profile.name))
    lead = attempts[0] if attempts else None
    return ModelPayers(
        model=first.model,
        kind=first.kind,
        aliases=tuple(sorted({a for o in offers for a in o.aliases})),
        payer=lead.payer if lead else REFUSED,
        provider=lead.provider if lead else None,
        attempts=tuple(attempts),
        code="" if lead else TeamKeysExhausted.code,
        reason="" if lead else reason,
        price=price,
        team_keys=len(team_pool_of.keys) if team_pool_of else 0,
        team_keys_usable=team_pool_of.usable if team_pool_of else 0,
    )


def _refused(offers: list[Offer], code: str, reason: str) -> ModelPayers:
    first = offers[0]
    return ModelPayers(
        model=first.model,
        kind=first.kind,
        aliases=tuple(sorted({a for o in offers for a in o.aliases})),
        payer=REFUSED,
        provider=None,
        attempts=(),
        code=code,
        reason=reason,
        price=None,
        team_keys=0,
        team_keys_usable=0,
    )


def payer_map(*, api_key: ApiKey, now: datetime | None = None) -> KeyPayers:
    """Return who pays for each model the live config serves, for this key's next request."""
    now = now or timezone.now()
    offers = served_offers()
    pools = pools_of(group_id=api_key.group_id, now=now)
    refused = key_refusal(api_key, now=now)
    permitted = _permitted(offers, policy_for_key(api_key))
    allowed = sorted(name for name in offers if permitted[name])
    models = []
    for name in sorted(offers):
        if refused is not None:
            models.append(_refused(offers[name], *refused))
        elif not permitted[name]:
            message = refusal_message_of_access(name, allowed)
            models.append(_refused(offers[name], Forbidden.code, message))
        else:
            models.append(model_payers(permitted[name], group_id=api_key.group_id, pools=pools))
    return KeyPayers(api_key=api_key, models=tuple(models))


def _permitted(offers: dict[str, list[Offer]], policy: AccessPolicy) -> dict[str, list[Offer]]:
    """Return each model's offers the key's policy permits, by the gateway's rule
    (gateway/access.py): an alias counts for the model the catalog resolves it to (a
    canonical name wins; else the alias of the profile whose name sorts first)."""
    resolves_to: dict[str, str] = {}
    for offer in sorted((o for os in offers.values() for o in os), key=_by_profile):
        for alias in offer.aliases:
            if alias not in offers:
                resolves_to.setdefault(alias, offer.model)
    return {
        name: [
            o
            for o in group
            if policy.permits(
                Offering(
                    profile=o.profile.name,
                    provider=o.profile.kind,
                    model=o.model,
                    aliases=tuple(a for a in o.aliases if resolves_to.get(a) == o.model),
                )
            )
        ]
        for name, group in offers.items()
    }


def _by_profile(offer: Offer) -> tuple[str, str]:
    return offer.profile.name, offer.model
