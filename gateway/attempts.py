"""The billing boundary of a chain's link, the same for every request kind: who may pay for it.

A link has a team attempt when the group has a usable pool (one with a key) for its profile,
then a platform attempt only when the platform serves the profile and any pool's fallback flag
is on; with no pool, or an emptied one whose flag is on, a platform attempt, unless the chain
is locked. Chain lock: once a fallback-off team link is reached (an emptied one included),
later links with no team pool refuse LM-3021 without calling upstream, so a chain never
silently reaches the platform's keys. A team-served link's breaker is the
group's own (a team key failing says nothing of the platform's); a platform attempt's wallet
reservation is its worst case with the escrow margin on top. Model plans (gateway/plan.py)
and web plans (gateway/web/plan.py) build their links through `billing_boundary`; what each
kind's worst case is stays with the kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from byok.pools import Pool
from core.config import tollgate
from core.money import with_margin_micro

TEAM = "team"
PLATFORM = "platform"


class BillableProfile(Protocol):
    """What the billing boundary reads of a profile (catalog.Profile, catalog.WebProfile)."""

    @property
    def name(self) -> str: ...
    @property
    def allows_platform(self) -> bool: ...
    @property
    def platform_key(self) -> str | None: ...
    @property
    def team_key_eligible(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Attempt:
    served_by: str  # TEAM or PLATFORM
    source: str  # e.g. "openai-main:gpt-4o-mini:team"
    needs_escrow: bool
    escrow_budget_micro: int
    pool: Pool | None = None


@dataclass(frozen=True, slots=True)
class Boundary:
    """Who may pay for one link: its attempts in order, its breaker and its lock."""

    attempts: tuple[Attempt, ...]
    escrow_micro: int  # a platform attempt's worst case, margin included
    breaker_key: str
    team_scoped: bool  # a team pool serves it: its breaker is the group's own
    locked: bool  # refused by the chain lock: LM-3021 without an upstream call
    pool_exhausted_refusal: bool  # a fallback-off team link: LM-3021 when keys run out

    @property
    def platform_pays(self) -> bool:
        return any(a.served_by == PLATFORM for a in self.attempts)


@dataclass(slots=True)
class ChainLock:
    """Set once a fallback-off team link is reached: later links without a pool refuse."""

    locked: bool = False


def escrow_margin_pct() -> int:
    return tollgate().escrow_margin_pct


def team_pool(
    profile: BillableProfile, group_id: int, pool_for: Callable[[int, str], Pool | None]
) -> Pool | None:
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


def billing_boundary(
    *,
    profile: BillableProfile,
    stem: str,
    group_id: int,
    pool: Pool | None,
    platform_ok: bool,
    prepaid: bool,
    worst_micro: int,
    lock: ChainLock,
) -> Boundary:
    """Return one link's attempts: team first, the platform when allowed, the chain lock,
    the breaker's scope. `worst_micro`: what the link may cost the platform, before the
    margin; `stem`: the attempts' source prefix (e.g. "openai-main:gpt-4o-mini")."""
    escrow_micro = with_margin_micro(worst_micro, margin_pct=escrow_margin_pct())
    # A pool with no key left (its last one removed) is not a usable pool: no team attempt,
    # which could only answer "benched". It answers as no pool would, but by its flag:
    # fallback on, the platform serves; off, LM-3021 (no attempt at all, below).
    team = pool if pool is not None and pool.keys else None
    emptied_refusal = pool is not None and team is None and not pool.fallback
    attempts: list[Attempt] = []
    if team is not None:
        attempts.append(Attempt(TEAM, f"{stem}:team", False, 0, team))
        if team.fallback and platform_ok:
            attempts.append(Attempt(PLATFORM, f"{stem}:platform-fallback", prepaid, escrow_micro))
    elif platform_ok and not lock.locked and not emptied_refusal:
        attempts.append(Attempt(PLATFORM, f"{stem}:platform", prepaid, escrow_micro))
    boundary = Boundary(
        attempts=tuple(attempts),
        escrow_micro=escrow_micro,
        breaker_key=f"{profile.name}#group:{group_id}" if team is not None else profile.name,
        team_scoped=team is not None,
        locked=lock.locked and team is None and not emptied_refusal,
        pool_exhausted_refusal=pool is not None and not pool.fallback,
    )
    if pool is not None and not pool.fallback:
        lock.locked = True
    return boundary
