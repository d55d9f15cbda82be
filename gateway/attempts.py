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
kind's worst case is stays with the kind. Who pays for a link is byok/payers.py's rule, which
a tenant's payer map (byok/payer_map.py) reads too.
"""

from __future__ import annotations

from dataclasses import dataclass

# Who pays is byok.payers' rule, which the tenant's payer map reads too; its names are
# re-exported for the gateway's modules.
from byok.payers import (
    PLATFORM,
    TEAM,
    BillableProfile,
    link_payers,
    platform_serves,
    team_pool,
)
from byok.pools import Pool
from core.config import tollgate
from core.money import with_margin_micro

__all__ = [
    "PLATFORM",
    "TEAM",
    "Attempt",
    "BillableProfile",
    "Boundary",
    "ChainLock",
    "billing_boundary",
    "platform_serves",
    "team_pool",
]


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
    payers = link_payers(pool=pool, platform_ok=platform_ok, locked=lock.locked)
    attempts: list[Attempt] = []
    for served_by in payers.served_by:
        if served_by == TEAM:
            attempts.append(Attempt(TEAM, f"{stem}:team", False, 0, pool))
        else:
            source = f"{stem}:platform-fallback" if payers.team else f"{stem}:platform"
            attempts.append(Attempt(PLATFORM, source, prepaid, escrow_micro))
    lock.locked = lock.locked or payers.locks_chain
    return Boundary(
        attempts=tuple(attempts),
        escrow_micro=escrow_micro,
        breaker_key=f"{profile.name}#group:{group_id}" if payers.team else profile.name,
        team_scoped=payers.team,
        locked=payers.locked,
        pool_exhausted_refusal=payers.locks_chain,
    )
