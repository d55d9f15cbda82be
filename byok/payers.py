"""Who pays for one link of a request: the team's own keys, the platform's, or nobody.

The one rule, read by the gateway's billing boundary on every request (gateway/attempts.py)
and by a tenant's payer map before any request (byok/payer_map.py), so what the map says is
what a request meets. Pure: the profile and the pool are handed in, the switches read from
tollgate(); nothing here reads the database or Redis.

- A group's pool for the profile (team serving on, a kind that takes plain API keys): the
  team's keys first, then the platform only when the pool's fallback flag is on and the
  platform serves the profile. A fallback-off pool locks the chain.
- An empty pool answers like an absent one: the platform if its fallback is on, LM-3021
  otherwise (removing the last key never turns into a silent platform charge).
- No pool: the platform, when it serves the profile and the chain is not locked.
- Nobody: LM-3021 without a vendor call.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Protocol, TypeVar

from core.config import tollgate

TEAM = "team"
PLATFORM = "platform"


class BillableProfile(Protocol):
    """What the rule reads of a profile (the gateway's catalog profiles, the map's rows)."""

    @property
    def name(self) -> str: ...
    @property
    def allows_platform(self) -> bool: ...
    @property
    def platform_key(self) -> str | None: ...
    @property
    def team_key_eligible(self) -> bool: ...


class PoolView(Protocol):
    """What the rule reads of a pool (byok.pools.Pool, or a KeyPool row's counts)."""

    @property
    def fallback(self) -> bool: ...
    @property
    def keys(self) -> Sized: ...


P = TypeVar("P", bound=PoolView)  # byok.pools.Pool on the request path


@dataclass(frozen=True, slots=True)
class Payers:
    """Who may pay for one link, in the order they are tried, and how the chain lock stands."""

    served_by: tuple[str, ...]  # (TEAM,), (TEAM, PLATFORM), (PLATFORM,) or (): refused
    team: bool  # the team's pool takes part (its breaker is the group's own)
    locked: bool  # refused by the chain lock: LM-3021 without a call
    locks_chain: bool  # a fallback-off pool: later links without a team key refuse; an
    # emptied one refuses its own link too


def team_pool(
    profile: BillableProfile, group_id: int, pool_for: Callable[[int, str], P | None]
) -> P | None:
    """Return the group's team keys for a profile, when team serving is on and its kind
    takes plain API keys."""
    if not (tollgate().byok_enabled and profile.team_key_eligible):
        return None
    return pool_for(group_id, profile.name)


def platform_serves(profile: BillableProfile, *, keyless: bool = False) -> bool:
    """Say whether the platform may serve this profile: platform serving on, the profile
    allowing it, and a platform key (`keyless`: an adapter that needs none)."""
    return (
        tollgate().ptb_enabled
        and profile.allows_platform
        and (profile.platform_key is not None or keyless)
    )


# Every answer the rule can give, made once: the request path allocates none.
TEAM_ONLY = Payers((TEAM,), team=True, locked=False, locks_chain=False)
TEAM_ONLY_LOCKING = Payers((TEAM,), team=True, locked=False, locks_chain=True)
TEAM_THEN_PLATFORM = Payers((TEAM, PLATFORM), team=True, locked=False, locks_chain=False)
PLATFORM_ONLY = Payers((PLATFORM,), team=False, locked=False, locks_chain=False)
EMPTIED_REFUSED = Payers((), team=False, locked=False, locks_chain=True)
LOCKED_OUT = Payers((), team=False, locked=True, locks_chain=False)
NOBODY = Payers((), team=False, locked=False, locks_chain=False)


def link_payers(*, pool: PoolView | None, platform_ok: bool, locked: bool) -> Payers:
    """Return who may pay for a link, given the group's pool for its profile (None: none, or
    team serving off), whether the platform serves it, and whether the chain is locked."""
    if pool is not None:
        if len(pool.keys) > 0:
            if not pool.fallback:
                return TEAM_ONLY_LOCKING
            return TEAM_THEN_PLATFORM if platform_ok else TEAM_ONLY
        if not pool.fallback:
            # Emptied with fallback off: refused (it never becomes a silent platform charge).
            return EMPTIED_REFUSED
    if platform_ok and not locked:
        return PLATFORM_ONLY
    return LOCKED_OUT if locked else NOBODY


def refusal_message(provider: str, *, locked: bool, fallback_off: bool) -> str:
    """Say why nobody may pay for a link of `provider`: the LM-3021 a request is answered.
    `locked`: refused by the chain lock; `fallback_off`: the group's pool for it (emptied)
    has its fallback off."""
    if locked:
        return f"Chain locked: no team key for {provider} and platform fallback is off."
    why = (
        "its pool is empty and platform fallback is off"
        if fallback_off
        else ("platform serving is off")
    )
    return f"No team key for {provider}: {why}."


def keys_exhausted_message(provider: str) -> str:
    """Say that a pool's keys are all benched or failing (its keys exist, none may serve)."""
    return f"Every team key for {provider} is benched or failing."
